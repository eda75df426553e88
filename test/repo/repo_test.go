package repo_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rollgate/rollgate/test/repo"
)

func TestRootHoldsTheModule(t *testing.T) {
	root := repo.Root()
	data, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil || !strings.HasPrefix(string(data), "module "+repo.ModulePath+"\n") {
		t.Fatalf("Root() = %s: go.mod does not declare %s (%v)", root, repo.ModulePath, err)
	}
	if got, want := repo.ToolsDir(), filepath.Join(root, "bin"); got != want {
		t.Fatalf("ToolsDir() = %s, want %s", got, want)
	}
}

func TestToolFindsBinAndBinK8s(t *testing.T) {
	for _, name := range []string{"kwokctl", "kube-apiserver", "etcd"} {
		p := repo.Tool(t, name)
		if !strings.HasPrefix(p, repo.ToolsDir()+string(filepath.Separator)) {
			t.Errorf("Tool(%s) = %s, outside %s", name, p, repo.ToolsDir())
		}
	}
}

// fatalRecorder records Fatalf instead of ending the test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}
func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
}

func TestToolFailsWhenMissing(t *testing.T) {
	rec := &fatalRecorder{TB: t}
	repo.Tool(rec, "no-such-tool")
	if want := "no-such-tool not found in bin/: run 'make tools'"; rec.msg != want {
		t.Fatalf("Fatalf message = %q, want %q", rec.msg, want)
	}
	if _, err := repo.LookTool("no-such-tool"); !errors.Is(err, repo.ErrToolMissing) {
		t.Fatalf("LookTool error = %v, want ErrToolMissing", err)
	}
}
