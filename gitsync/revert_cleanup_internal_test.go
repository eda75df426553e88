package gitsync

import (
	"context"
	"testing"
	"time"

	"github.com/rollgate/rollgate/test/gitserver"
)

// TestDeleteBranchesAtIsALease: a revert branch that moved after it was
// judged (pushed again under the same name, say) is not deleted.
func TestDeleteBranchesAtIsALease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := gitserver.Start(t, gitserver.Options{})
	url, err := srv.CreateRepo("app", map[string]string{"a": "1\n"})
	if err != nil {
		t.Fatal(err)
	}
	judged, err := srv.Commit("app", "rollgate/revert/demo/web/r1", "rollgate: revert demo/web", map[string]string{"a": "0\n"})
	if err != nil {
		t.Fatal(err)
	}
	moved, err := srv.Commit("app", "rollgate/revert/demo/web/r1", "rollgate: revert demo/web again", map[string]string{"a": "2\n"})
	if err != nil {
		t.Fatal(err)
	}
	repo, err := Open(Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	if err := repo.deleteBranchesAt(ctx, map[string]string{"rollgate/revert/demo/web/r1": judged}); err == nil {
		t.Fatal("deleting a branch that moved since it was judged succeeded")
	}
	if head, _ := srv.Head("app", "rollgate/revert/demo/web/r1"); head != moved {
		t.Fatalf("branch head = %q, want %s (kept)", head, moved)
	}
	if err := repo.deleteBranchesAt(ctx, map[string]string{"rollgate/revert/demo/web/r1": moved}); err != nil {
		t.Fatal(err)
	}
	if head, _ := srv.Head("app", "rollgate/revert/demo/web/r1"); head != "" {
		t.Fatalf("branch head = %q, want deleted", head)
	}
}
