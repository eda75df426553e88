package gitsync_test

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/rollgate/rollgate/gitsync"
)

// cleanupDeployment is the manifest of Deployment name at image.
func cleanupDeployment(name, image string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: %s
  namespace: demo
spec:
  template:
    spec:
      containers:
      - name: app
        image: %s
`, name, image)
}

// TestCleanupRevertBranches proposes the revert of four failed releases,
// one Rollout each, on a real Git server, and merges them as users do:
// merged (a merge commit), squash-merged, not merged, and merged with main
// changed again afterwards in an unrelated file. Only the merged ones are
// deleted; the unmerged one stays, however often the cleanup runs.
func TestCleanupRevertBranches(t *testing.T) {
	files := map[string]string{"README.md": "app\n"}
	for _, n := range []string{"merged", "squashed", "unmerged", "later"} {
		files["apps/"+n+"/deploy.yaml"] = cleanupDeployment(n, "ghcr.io/acme/"+n+":2.0")
	}
	srv, repo := newRepo(t, files)
	branch := map[string]string{}
	for _, n := range []string{"merged", "squashed", "unmerged", "later"} {
		out, err := gitsync.Revert(ctx(t), repo, gitsync.RevertOptions{TrackedBranch: "main", Paths: []string{"apps/" + n}}, gitsync.RevertRequest{
			Namespace: "demo", Name: n, Revision: "rev-" + n,
			Workload: gitsync.WorkloadRef{Name: n},
			Images:   map[string]string{"app": "ghcr.io/acme/" + n + ":1.0"},
		})
		if err != nil || !out.Pushed {
			t.Fatalf("revert of %s = %+v, %v", n, out, err)
		}
		branch[n] = out.Branch
	}
	// Main moves on after the reverts branched off.
	if _, err := srv.Commit("app", "main", "Another change", map[string]string{"README.md": "app, v2\n"}); err != nil {
		t.Fatal(err)
	}
	// merged: main moved, so a merge commit.
	if _, err := srv.Merge("app", "main", branch["merged"], "Merge revert"); err != nil {
		t.Fatal(err)
	}
	// squashed: the revert's content committed on main, no link to it.
	squash, err := srv.ReadFile("app", branch["squashed"], "apps/squashed/deploy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Commit("app", "main", "Revert squashed (#12)", map[string]string{"apps/squashed/deploy.yaml": squash}); err != nil {
		t.Fatal(err)
	}
	// later: merged, then main changed again elsewhere.
	if _, err := srv.Merge("app", "main", branch["later"], "Merge revert"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Commit("app", "main", "Unrelated", map[string]string{"README.md": "app, v3\n", "apps/merged/notes.txt": "x\n"}); err != nil {
		t.Fatal(err)
	}
	// unmerged: main even changed the file the revert changes, to another
	// bad image: still not the revert's content.
	if _, err := srv.Commit("app", "main", "Bump unmerged", map[string]string{"apps/unmerged/deploy.yaml": cleanupDeployment("unmerged", "ghcr.io/acme/unmerged:2.1")}); err != nil {
		t.Fatal(err)
	}

	for round := 1; round <= 2; round++ {
		for n, wantDeleted := range map[string]bool{"merged": true, "squashed": true, "unmerged": false, "later": true} {
			res, err := gitsync.CleanupRevertBranches(ctx(t), repo, "demo", n, "main")
			if err != nil {
				t.Fatalf("round %d, %s: %v", round, n, err)
			}
			want := gitsync.RevertCleanup{}
			switch {
			case !wantDeleted:
				want.Kept = []string{branch[n]}
			case round == 1:
				want.Deleted = []string{branch[n]}
			}
			if !reflect.DeepEqual(res, want) {
				t.Errorf("round %d, %s: cleanup = %+v, want %+v", round, n, res, want)
			}
			head, err := srv.Head("app", branch[n])
			if err != nil {
				t.Fatal(err)
			}
			if gone := head == ""; gone != wantDeleted {
				t.Errorf("round %d: revert branch %s on the server: %q, want deleted %v", round, branch[n], head, wantDeleted)
			}
		}
	}
	gitFsck(t, srv)
}

// TestCleanupKeepsAnAddedCommit: a revert branch whose tip a user changed
// (a commit on top of rollgate's) holds more than the revert and is kept,
// even when main holds the files of that last commit.
func TestCleanupKeepsAnAddedCommit(t *testing.T) {
	srv, repo := newRepo(t, map[string]string{"apps/web/deploy.yaml": cleanupDeployment("web", "web:2.0")})
	out, err := gitsync.Revert(ctx(t), repo, gitsync.RevertOptions{TrackedBranch: "main", Paths: []string{"apps/web"}}, gitsync.RevertRequest{
		Namespace: "demo", Name: "web", Revision: "r1", Images: map[string]string{"app": "web:1.0"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Commit("app", out.Branch, "Also a note", map[string]string{"NOTE": "n\n"}); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Commit("app", "main", "The note alone", map[string]string{"NOTE": "n\n"}); err != nil {
		t.Fatal(err)
	}
	res, err := gitsync.CleanupRevertBranches(ctx(t), repo, "demo", "web", "main")
	if err != nil || len(res.Deleted) != 0 || len(res.Kept) != 1 {
		t.Fatalf("cleanup = %+v, %v; want the branch kept", res, err)
	}
	if head, _ := srv.Head("app", out.Branch); head == "" {
		t.Fatal("the revert branch with a user's commit was deleted")
	}
}
