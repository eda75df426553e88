package docpage

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/rollgate/rollgate/test/repo"
)

// mdLink is a Markdown link's target, without its #fragment; codeSpan is
// inline code, where brackets are not links.
var (
	mdLink   = regexp.MustCompile(`\]\(([^)\s#]*)(#[^)\s]*)?\)`)
	codeSpan = regexp.MustCompile("`[^`]*`")
)

// TestDocsIndexAndLinks: docs/README.md lists every page under docs/, and
// every relative link of the README and of the docs names a file that
// exists, so a page moved or renamed cannot leave a reader at a dead link.
func TestDocsIndexAndLinks(t *testing.T) {
	root := repo.Root()
	var pages []string
	if err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			pages = append(pages, path)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	index := filepath.Join(root, "docs", "README.md")
	listed := map[string]bool{}
	for _, page := range append(slices.Clone(pages), filepath.Join(root, "README.md")) {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		fenced := false
		for i, line := range strings.Split(string(text), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				fenced = !fenced
			}
			if fenced {
				continue
			}
			for _, m := range mdLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
				target := m[1]
				if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path := filepath.Join(filepath.Dir(page), target)
				if page == index {
					listed[path] = true
				}
				if _, err := os.Stat(path); err != nil {
					rel, _ := filepath.Rel(root, page)
					t.Errorf("%s:%d links %s, which does not exist", rel, i+1, target)
				}
			}
		}
	}
	for _, page := range pages {
		if page != index && !listed[page] {
			rel, _ := filepath.Rel(root, page)
			t.Errorf("docs/README.md does not list %s", rel)
		}
	}
}
