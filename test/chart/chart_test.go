// Package chart tests the Helm chart in charts/rollgate: lint, rendered
// output against golden files, least-privilege RBAC, the generated values
// table in docs/, and on a kwok cluster install, upgrade from the previous
// chart release (testdata/previous) and uninstall, including an upgrade in
// the middle of a release with the chart's controller running (through
// test/chartrun).
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
		"default":    nil,
		"full":       {"-f", "testdata/full-values.yaml"},
		"sharded":    {"-f", "testdata/sharded-values.yaml"},
		"namespaced": {"-f", "testdata/namespaced-values.yaml"},
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

// TestPreviousChartIsOlder: the archive the upgrade tests start from is an
// earlier version than the chart (refreshed at each release, see
// docs/development.md).
func TestPreviousChartIsOlder(t *testing.T) {
	_, prev := previousChart(t)
	cur := chartVersion(t)
	if !versionLess(prev, cur) {
		t.Fatalf("testdata/previous holds chart %s, not older than charts/rollgate %s: bump Chart.yaml or refresh the archive", prev, cur)
	}
}

// versionLess compares two MAJOR.MINOR.PATCH versions.
func versionLess(a, b string) bool {
	pa, pb := strings.SplitN(a, ".", 3), strings.SplitN(b, ".", 3)
	for i := range 3 {
		x, _ := strconv.Atoi(strings.SplitN(pa[min(i, len(pa)-1)], "-", 2)[0])
		y, _ := strconv.Atoi(strings.SplitN(pb[min(i, len(pb)-1)], "-", 2)[0])
		if x != y {
			return x < y
		}
	}
	return false
}

// TestPodDisruptionBudget: rendered only with more than one replica, never
// blocking every eviction, and also from values reused from a release of a
// chart that had no podDisruptionBudget (helm upgrade --reuse-values).
func TestPodDisruptionBudget(t *testing.T) {
	render := func(args ...string) (string, error) {
		cmd := exec.Command(repo.Tool(t, "helm"), append([]string{"template", "rg", chartDir(), "-s", "templates/poddisruptionbudget.yaml"}, args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, tc := range []struct {
		name string
		args []string
		want string // a line of the budget, or "" for none
	}{
		{"default", nil, "  minAvailable: 1"},
		{"one replica", []string{"--set", "replicaCount=1"}, ""},
		{"disabled", []string{"--set", "podDisruptionBudget.enabled=false"}, ""},
		{"percentage", []string{"--set", "replicaCount=4", "--set", "podDisruptionBudget.minAvailable=50%"}, "  minAvailable: 50%"},
		{"values of chart 0.1.0", []string{"--set", "podDisruptionBudget=null"}, "  minAvailable: 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := render(tc.args...)
			switch {
			case tc.want == "" && !strings.Contains(out, "could not find template"):
				t.Fatalf("want no PodDisruptionBudget, got (%v):\n%s", err, out)
			case tc.want != "" && (err != nil || !strings.Contains(out, "\n"+tc.want+"\n")):
				t.Fatalf("want %q, got (%v):\n%s", tc.want, err, out)
			}
		})
	}
	if out, err := render("--set", "replicaCount=2", "--set", "podDisruptionBudget.minAvailable=2"); err == nil || !strings.Contains(out, "must be lower than replicaCount") {
		t.Fatalf("minAvailable equal to replicaCount must be refused: %v\n%s", err, out)
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
