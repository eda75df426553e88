package walkthrough

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollgate/rollgate/test/docpage"
)

// treeBuild lets one page block at a time build in the repository's
// working tree (`make build` writes bin/rollgate and links
// bin/kubectl-rollgate): the walkthroughs run side by side.
var treeBuild sync.Mutex

// buildsInTree says whether a block runs make, which builds in the
// working tree.
func buildsInTree(script string) bool {
	for _, line := range strings.Split(script, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "make" {
			return true
		}
	}
	return false
}

// runPage runs the page's shell blocks in order in s: an env block as the
// test's exports for the same names, an "instead" block as its hook, an
// "after" block followed by its hook. It fails the test at the first
// failing block, and when a hook is no longer named by the page. It returns
// the output of the last block it ran.
func runPage(ctx context.Context, t *testing.T, s *Session, pagePath string, blocks []docpage.Block, env map[string]string, hooks map[string]func() error) (last string) {
	t.Helper()
	used := map[string]bool{}
	for _, b := range blocks {
		if !b.Shell() {
			continue
		}
		what := fmt.Sprintf("block at %s:%d", pagePath, b.Line)
		script := b.Body
		switch b.Directive {
		case "env":
			names, err := b.Exports()
			if err != nil {
				t.Fatal(err)
			}
			script = exportsFor(t, names, env)
		case "instead", "after":
			if hooks[b.Hook] == nil {
				t.Fatalf("%s names hook %q, which the test does not have", what, b.Hook)
			}
			used[b.Hook] = true
		}
		if b.Directive == "instead" {
			start := time.Now()
			if err := hooks[b.Hook](); err != nil {
				t.Fatalf("%s: hook %s (instead of the block): %v", what, b.Hook, err)
			}
			t.Logf("%s: ran hook %s instead (%s)", what, b.Hook, time.Since(start).Round(time.Millisecond))
			continue
		}
		start := time.Now()
		inTree := buildsInTree(script)
		if inTree {
			treeBuild.Lock()
		}
		out, err := s.Run(ctx, script, 6*time.Minute)
		if inTree {
			treeBuild.Unlock()
		}
		t.Logf("%s (%s):\n%s\n%s", what, time.Since(start).Round(time.Millisecond), indent(script), indent(out))
		if err != nil {
			t.Fatalf("%s failed: %v", what, err)
		}
		last = out
		if b.Directive == "after" {
			if err := hooks[b.Hook](); err != nil {
				t.Fatalf("%s: hook %s (after the block): %v", what, b.Hook, err)
			}
		}
	}
	for name := range hooks {
		if !used[name] {
			t.Errorf("the page no longer marks a block for hook %q: remove it from the test or restore the directive", name)
		}
	}
	return last
}
