package gitsource

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/test/gitserver"
)

const blackFriday = `freezes:
- name: black-friday
  reason: shop peak
  rollouts: {namespaces: [shop]}
`

// TestFreezesNameWhoMergedThem: against a real Git server, a freeze
// merged through a pull request (a merge commit by Jane) is read from the
// tracked branch and attributed to that merge, also after later commits
// by others changed the file; a file that no longer parses and a missing
// file are errors naming spec.releaseRules.path and the fix.
func TestFreezesNameWhoMergedThem(t *testing.T) {
	ctx := context.Background()
	srv := gitserver.Start(t, gitserver.Options{})
	url, err := srv.CreateRepo("app", map[string]string{"freezes.yaml": "freezes: []\n", "app.yaml": "a: 1\n"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Commit("app", "freeze-pr", "declare the black-friday freeze", map[string]string{"freezes.yaml": blackFriday}); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Commit("app", "main", "an unrelated change", map[string]string{"app.yaml": "a: 2\n"}); err != nil {
		t.Fatal(err)
	}
	merge, err := srv.MergeAs("app", "main", "freeze-pr", "Merge pull request #7", "Jane Merger", "jane@example.com")
	if err != nil {
		t.Fatal(err)
	}
	// A later change of the file by someone else: a window added.
	if _, err := srv.Commit("app", "main", "add a window", map[string]string{"freezes.yaml": blackFriday + `windows:
- name: weekend
  timeZone: Europe/Berlin
  closed: [{from: Fri 16:00, to: Mon 08:00}]
`}); err != nil {
		t.Fatal(err)
	}

	e := openForRules(t, url, "freezes.yaml")
	f, err := e.Rules(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := "merged in " + merge[:7] + " by Jane Merger <jane@example.com>"
	if got := f.MergedBy["black-friday"]; got != want {
		t.Fatalf("black-friday %q, want %q", got, want)
	}
	saturday := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	if hs := f.Parsed.Holds("shop", nil, saturday); len(hs) != 2 {
		t.Fatalf("holds %+v, want the freeze and the weekend", hs)
	}
	if again, _ := e.Rules(ctx); again != f {
		t.Fatal("the same head was read and parsed again")
	}
	// A new head with the same file: the attribution stays, the history
	// is not walked again.
	if _, err := srv.Commit("app", "main", "another app's change", map[string]string{"app.yaml": "a: 3\n"}); err != nil {
		t.Fatal(err)
	}
	if err := e.clone.Fetch(ctx, "main"); err != nil {
		t.Fatal(err)
	}
	again, err := e.Rules(ctx)
	if err != nil || again.Commit == f.Commit || again.MergedBy["black-friday"] != want {
		t.Fatalf("at the next head: %+v %v, want the same attribution at a new commit", again, err)
	}

	// Broken by a merge: an error naming the field, the file and the head.
	head, err := srv.Commit("app", "main", "typo", map[string]string{"freezes.yaml": "freezes:\n- name: x\n  namespace: shop\n"})
	if err != nil {
		t.Fatal(err)
	}
	e = openForRules(t, url, "freezes.yaml")
	_, err = e.Rules(ctx)
	if err == nil || !strings.Contains(err.Error(), "the release rules file freezes.yaml (spec.releaseRules.path) at "+head[:7]+" of main") ||
		!strings.Contains(err.Error(), `unknown field "freezes[0].namespace"`) {
		t.Fatalf("error %v, want one naming the file, the head and the field", err)
	}

	e = openForRules(t, url, "clusters/prod/release-rules.yaml")
	if _, err := e.Rules(ctx); err == nil || !strings.Contains(err.Error(), "spec.releaseRules.path clusters/prod/release-rules.yaml is not on branch main") {
		t.Fatalf("a missing file: %v", err)
	}
}

// openForRules opens a Repo of url whose spec.releaseRules names path, with
// the tracked branch fetched as the Repository controller fetches it.
func openForRules(t *testing.T, url, path string) *Repo {
	t.Helper()
	clone, err := gitsync.Open(gitsync.Options{URL: url, Depth: 1})
	if err != nil {
		t.Fatal(err)
	}
	history, err := gitsync.Open(gitsync.Options{URL: url, Depth: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := clone.Fetch(context.Background(), "main"); err != nil {
		t.Fatal(err)
	}
	spec := v1alpha1.RepositorySpec{URL: url, ReleaseRules: &v1alpha1.ReleaseRulesSpec{Path: path}}
	return &Repo{pool: NewPool(nil, Options{}), spec: spec, clone: clone, history: history, branch: "main"}
}
