package chartrun

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rollgate/rollgate/test/docpage"
	"github.com/rollgate/rollgate/test/repo"
)

// DocsGitURL is the Git URL the GitOps recipes of docs/install.md are
// written with; a test puts its own Git server's URL in its place.
const DocsGitURL = "https://git.example.com/platform/rollgate.git"

// InstallRecipe returns the yaml block of docs/install.md that holds want
// (such as "kind: HelmRelease"), with url in place of DocsGitURL: the block
// exactly as the page writes it, but for the Git URL.
func InstallRecipe(t testing.TB, want, url string) string {
	t.Helper()
	page, err := os.ReadFile(filepath.Join(repo.Root(), "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := docpage.Parse(string(page))
	if err != nil {
		t.Fatalf("docs/install.md: %v", err)
	}
	for _, b := range blocks {
		if b.Lang == "yaml" && strings.Contains(b.Body, want) && strings.Contains(b.Body, DocsGitURL) {
			return strings.ReplaceAll(b.Body, DocsGitURL, url)
		}
	}
	t.Fatalf("docs/install.md has no yaml block with %q and the Git URL %s", want, DocsGitURL)
	return ""
}

// ChartFiles are the files of charts/rollgate (without its Go tests), at
// the same paths, for a Git repository a GitOps tool installs it from.
func ChartFiles(t testing.TB) map[string]string {
	t.Helper()
	files := map[string]string{}
	root := repo.Root()
	err := filepath.WalkDir(filepath.Join(root, "charts", "rollgate"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(p, ".go") {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		files[filepath.ToSlash(rel)] = string(data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// Bumped chart version and the flag its changed default gives the
// controller, for ChartBump.
const (
	BumpedVersion = "0.2.1"
	BumpedFlag    = "--log-level=debug"
)

// ChartBump returns the files to commit for a new chart version:
// Chart.yaml at BumpedVersion and values.yaml with a changed default
// (logLevel debug, so the controller's Deployment changes: BumpedFlag).
func ChartBump(t testing.TB, files map[string]string) map[string]string {
	t.Helper()
	chart, values := files["charts/rollgate/Chart.yaml"], files["charts/rollgate/values.yaml"]
	newChart := strings.Replace(chart, "\nversion: 0.2.0\n", "\nversion: "+BumpedVersion+"\n", 1)
	newValues := strings.Replace(values, "\nlogLevel: info\n", "\nlogLevel: debug\n", 1)
	if newChart == chart || newValues == values {
		t.Fatal("charts/rollgate: Chart.yaml has no 'version: 0.2.0' or values.yaml no 'logLevel: info' to change: update chartrun.ChartBump")
	}
	return map[string]string{"charts/rollgate/Chart.yaml": newChart, "charts/rollgate/values.yaml": newValues}
}
