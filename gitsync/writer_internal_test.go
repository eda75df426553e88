package gitsync

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rollgate/rollgate/test/gitserver"
)

// TestFlushPushRace lands another writer's commit between the flush's
// fetch and its push: the push is rejected, the flush rebuilds on the new
// head, and both commits survive.
func TestFlushPushRace(t *testing.T) {
	srv := gitserver.Start(t, gitserver.Options{})
	url, err := srv.CreateRepo("app", map[string]string{"a": "a\n"})
	if err != nil {
		t.Fatal(err)
	}
	repo, err := Open(Options{URL: url, RetryBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(repo, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	builds := 0
	w.afterBuild = func() {
		builds++
		if builds <= 2 {
			// Twice in a row, so the second attempt loses too.
			if _, err := srv.Commit("app", DefaultStatusBranch, fmt.Sprintf("other %d", builds),
				map[string]string{fmt.Sprintf("other/x%d.txt", builds): "x\n"}); err != nil {
				t.Error(err)
			}
		}
	}
	for i := range 5 {
		w.Enqueue(RolloutState{Namespace: "demo", Name: fmt.Sprintf("r%d", i), Phase: "Progressing"})
	}
	res, err := w.Flush(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Attempts != 3 || builds != 3 || len(res.Changed) != 5 {
		t.Fatalf("flush = %+v after %d builds; want 3 attempts, 5 rollouts", res, builds)
	}
	for _, f := range []string{"other/x1.txt", "other/x2.txt", "demo/r0.yaml", "demo/r4.yaml", "README.md"} {
		if _, err := srv.ReadFile("app", DefaultStatusBranch, f); err != nil {
			t.Errorf("%s lost: %v", f, err)
		}
	}
	if head, _ := srv.Head("app", DefaultStatusBranch); head != res.Commit {
		t.Fatalf("status branch at %s, flush reported %s", head, res.Commit)
	}
}
