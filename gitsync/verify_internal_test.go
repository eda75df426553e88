package gitsync

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/rollgate/rollgate/test/gitserver"
)

// TestShallowBranches: with history fetched (Depth -1), a ShallowBranches
// branch still comes without it, so a status branch that grows with every
// write does not fill the store; the tracked branch keeps its history.
func TestShallowBranches(t *testing.T) {
	srv := gitserver.Start(t, gitserver.Options{})
	url, err := srv.CreateRepo("app", map[string]string{"a.txt": "1\n"})
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range []string{"main", "main", "rollgate/status", "rollgate/status"} {
		if _, err := srv.Commit("app", b, "commit", map[string]string{"a.txt": strings.Repeat("x", i+2)}); err != nil {
			t.Fatal(err)
		}
	}
	repo, err := Open(Options{URL: url, Depth: -1, ShallowBranches: []string{"rollgate/status"}})
	if err != nil {
		t.Fatal(err)
	}
	for branch, wantHistory := range map[string]bool{"main": true, "rollgate/status": false} {
		snap, err := repo.Snapshot(context.Background(), branch)
		if err != nil {
			t.Fatal(err)
		}
		_, err = snap.commit.Parent(0)
		if hasHistory := err == nil; hasHistory != wantHistory {
			t.Errorf("%s fetched with history: %v (%v), want %v", branch, hasHistory, err, wantHistory)
		}
		if err != nil && !errors.Is(err, plumbing.ErrObjectNotFound) {
			t.Errorf("%s: %v", branch, err)
		}
	}
}
