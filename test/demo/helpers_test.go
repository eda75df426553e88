package demo

import (
	"context"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rollgate/rollgate/test/repo"
)

// buildRollgate builds cmd/rollgate into a temporary folder, so the test
// runs the code of this checkout even without `make build`.
func buildRollgate(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "rollgate")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/rollgate")
	cmd.Dir = repo.Root()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/rollgate: %v\n%s", err, out)
	}
	return bin
}

// newTestWorld builds rollgate and makes a world for test t writing to
// out (the test's log when nil), and a context that ends after limit or
// with the test. When the test ends it prints the state of the world if the
// test failed, then closes the world.
func newTestWorld(t *testing.T, out io.Writer, limit time.Duration) (*world, context.Context) {
	t.Helper()
	bin := buildRollgate(t)
	if out == nil {
		out = logWriter{t}
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	t.Cleanup(cancel)
	w, err := newWorld(Options{Out: out, Rollgate: bin})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.close(); err != nil {
			t.Errorf("teardown: %v", err)
		}
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("state of the world:%s", w.failureReport())
		}
	})
	return w, ctx
}

// gitStatusPhase returns the PHASE column of demo/echoserver in the table
// `rollgate status --repo` printed.
func gitStatusPhase(out string) string {
	_, status, _ := strings.Cut(out, "rollgate status --repo")
	for _, line := range strings.Split(status, "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == Namespace && f[1] == App {
			return f[2]
		}
	}
	return ""
}
