// Package chart tests the Helm chart in charts/rollgate: lint, rendered
// output against golden files, least-privilege RBAC, the generated values
// table in docs/, and install, upgrade and uninstall on a kwok cluster.
package chart

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rollgate/rollgate/test/repo"
)

func chartDir() string { return filepath.Join(repo.Root(), "charts", "rollgate") }

func helm(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(repo.Tool(t, "helm"), args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

func TestLint(t *testing.T) {
	out := helm(t, "lint", "--strict", chartDir())
	if !strings.Contains(out, "0 chart(s) failed") {
		t.Fatalf("helm lint:\n%s", out)
	}
	helm(t, "lint", "--strict", chartDir(), "-f", "testdata/full-values.yaml")
}

// TestTemplateGolden compares `helm template` with testdata/*.golden.yaml.
// Run with UPDATE_GOLDEN=1 to rewrite them after an intended change.
func TestTemplateGolden(t *testing.T) {
	for name, args := range map[string][]string{
		"default": nil,
		"full":    {"-f", "testdata/full-values.yaml"},
	} {
		t.Run(name, func(t *testing.T) {
			got := helm(t, append([]string{"template", "rg", chartDir(), "--namespace", "rollgate-system"}, args...)...)
			path := filepath.Join("testdata", name+".golden.yaml")
			if os.Getenv("UPDATE_GOLDEN") != "" {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with UPDATE_GOLDEN=1 to create it)", err)
			}
			if got != string(want) {
				t.Fatalf("helm template differs from %s (run with UPDATE_GOLDEN=1 after an intended change):\n%s", path, diffLines(string(want), got))
			}
		})
	}
}

func diffLines(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for i := 0; i < max(len(w), len(g)); i++ {
		var a, c string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			c = g[i]
		}
		if a != c {
			b.WriteString("line " + strconv.Itoa(i+1) + ":\n  - " + a + "\n  + " + c + "\n")
			if b.Len() > 4000 {
				break
			}
		}
	}
	return b.String()
}
