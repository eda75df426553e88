package gitsync_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/test/gitserver"
)

// observed records what Options.Observe is told.
type observed struct {
	mu  sync.Mutex
	ops []string
}

func (o *observed) observe(op gitsync.Operation, d time.Duration, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	result := "ok"
	switch {
	case errors.Is(err, gitsync.ErrNonFastForward):
		result = "rejected"
	case err != nil:
		result = "error"
	}
	if d <= 0 {
		result += " (no duration)"
	}
	o.ops = append(o.ops, fmt.Sprintf("%s %s", op, result))
}

// take returns what was observed since the last take.
func (o *observed) take() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := strings.Join(o.ops, ", ")
	o.ops = nil
	return s
}

func TestObserveSeesEveryExchange(t *testing.T) {
	srv := gitserver.Start(t, gitserver.Options{})
	url, err := srv.CreateRepo("app", map[string]string{"apps/a.yaml": "a: 1\n"})
	if err != nil {
		t.Fatal(err)
	}
	var obs observed
	repo := openRepo(t, gitsync.Options{URL: url, RetryBackoff: time.Millisecond, Observe: obs.observe})

	if _, err := repo.ReadFile(ctx(t), "main", "apps/a.yaml"); err != nil {
		t.Fatal(err)
	}
	if got, want := obs.take(), "list ok, fetch ok"; got != want {
		t.Errorf("reading a file: observed %q, want %q", got, want)
	}

	// Another writer pushes between our fetch and our push: the first
	// push is rejected, the second attempt lands.
	raced := false
	_, err = repo.Update(ctx(t), gitsync.UpdateRequest{Branch: "main"}, func(*gitsync.Snapshot) (*gitsync.Change, error) {
		if !raced {
			raced = true
			if _, err := srv.Commit("app", "main", "theirs", map[string]string{"apps/b.yaml": "b: 1\n"}); err != nil {
				return nil, err
			}
		}
		return &gitsync.Change{Files: map[string][]byte{"apps/a.yaml": []byte("a: 2\n")}, Message: "ours"}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := obs.take(), "list ok, push rejected, list ok, fetch ok, push ok"; got != want {
		t.Errorf("a write that lost a race: observed %q, want %q", got, want)
	}

	_, err = repo.Update(ctx(t), gitsync.UpdateRequest{Branch: "side", From: "main"}, func(*gitsync.Snapshot) (*gitsync.Change, error) {
		return &gitsync.Change{Files: map[string][]byte{"apps/c.yaml": []byte("c: 1\n")}, Message: "side"}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := repo.DeleteBranches(ctx(t), "side"); err != nil {
		t.Fatal(err)
	}
	if got, want := obs.take(), "list ok, push ok, push ok"; got != want {
		t.Errorf("creating and deleting a branch: observed %q, want %q", got, want)
	}

	missing := openRepo(t, gitsync.Options{URL: srv.URL + "/missing.git", Observe: obs.observe})
	if err := missing.Fetch(ctx(t), "main"); err == nil {
		t.Fatal("fetching a repository that does not exist succeeded")
	}
	if got, want := obs.take(), "list error"; got != want {
		t.Errorf("a repository that does not exist: observed %q, want %q", got, want)
	}
}
