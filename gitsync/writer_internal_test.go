package gitsync

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rollgate/rollgate/test/gitserver"
)

// TestFlushPushRace lands another writer's commit between the flush's
// fetch and its push: the push is rejected, the flush rebuilds on the new
// head, and both commits survive.
func TestFlushPushRace(t *testing.T) {
	srv, w, ctx := newStatusWriter(t, time.Millisecond)
	builds := 0
	w.afterBuild = func(bool) {
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

// TestRejectedPushIsRetriedAtOnceOnTheNewHead loses a push to another
// writer twice: first to a commit that leaves the status files alone, then
// to one that adds another writer's status file. The flush retries at once
// (the backoff of an hour would otherwise hold it), reuses the change it
// built when only other files moved, builds again when a status file
// moved, and keeps both foreign commits under its own.
func TestRejectedPushIsRetriedAtOnceOnTheNewHead(t *testing.T) {
	srv, w, ctx := newStatusWriter(t, time.Hour)
	w.Enqueue(RolloutState{Namespace: "demo", Name: "r0", Phase: "Progressing"})
	if _, err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	theirs, err := RenderStatus(RolloutState{Namespace: "other", Name: "theirs", Phase: "Healthy"})
	if err != nil {
		t.Fatal(err)
	}
	foreign := []map[string]string{
		{"notes/1.txt": "not a status file\n"},
		{"other/theirs.yaml": string(theirs)},
	}
	var rebuilt []bool
	var heads []string
	w.afterBuild = func(r bool) {
		rebuilt = append(rebuilt, r)
		if n := len(rebuilt); n <= len(foreign) {
			h, err := srv.Commit("app", DefaultStatusBranch, fmt.Sprintf("foreign %d", n), foreign[n-1])
			if err != nil {
				t.Error(err)
			}
			heads = append(heads, h)
		}
	}
	for i := range 5 {
		w.Enqueue(RolloutState{Namespace: "demo", Name: fmt.Sprintf("r%d", i), Phase: "Paused"})
	}
	// Two waits of the backoff (capped at maxRetryBackoff, at least half
	// of it each) would outlast this.
	quick, cancelQuick := context.WithTimeout(ctx, maxRetryBackoff*9/10)
	defer cancelQuick()
	res, err := w.Flush(quick)
	if err != nil {
		t.Fatalf("flush: %v (the retries waited for the backoff)", err)
	}
	if want := []bool{true, false, true}; fmt.Sprint(rebuilt) != fmt.Sprint(want) || res.Attempts != 3 {
		t.Fatalf("attempts %d, rebuilt per attempt %v; want 3 attempts, rebuilt %v", res.Attempts, rebuilt, want)
	}
	if parent, err := exec.Command("git", "-C", srv.Root+"/app.git", "rev-parse", res.Commit+"^").Output(); err != nil || strings.TrimSpace(string(parent)) != heads[1] {
		t.Fatalf("status commit's parent %q (%v), want the last foreign commit %s", parent, err, heads[1])
	}
	for _, f := range []string{"notes/1.txt", "other/theirs.yaml", "demo/r0.yaml", "demo/r4.yaml"} {
		if _, err := srv.ReadFile("app", DefaultStatusBranch, f); err != nil {
			t.Errorf("%s lost: %v", f, err)
		}
	}
	readme, err := srv.ReadFile("app", DefaultStatusBranch, OverviewFile)
	if err != nil || !strings.Contains(readme, "other/theirs") || !strings.Contains(readme, "demo/r4") {
		t.Fatalf("overview does not list both writers' Rollouts (%v):\n%s", err, readme)
	}
	if s, err := srv.ReadFile("app", DefaultStatusBranch, "demo/r4.yaml"); err != nil || !strings.Contains(s, "Paused") {
		t.Fatalf("demo/r4.yaml (%v):\n%s", err, s)
	}
}

// TestRetryAfterTheBranchWasDeleted deletes the status branch between a
// flush's fetch and its push: the push is refused, the retry finds the
// branch gone and creates it again with every state.
func TestRetryAfterTheBranchWasDeleted(t *testing.T) {
	srv, w, ctx := newStatusWriter(t, 0)
	w.Enqueue(RolloutState{Namespace: "demo", Name: "r0", Phase: "Progressing"})
	if _, err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	builds := 0
	w.afterBuild = func(bool) {
		if builds++; builds == 1 {
			if out, err := exec.Command("git", "-C", srv.Root+"/app.git", "update-ref", "-d", "refs/heads/"+DefaultStatusBranch).CombinedOutput(); err != nil {
				t.Errorf("deleting the branch: %v: %s", err, out)
			}
		}
	}
	w.Enqueue(RolloutState{Namespace: "demo", Name: "r1", Phase: "Progressing"})
	res, err := w.Flush(ctx)
	if err != nil || res.Attempts != 2 {
		t.Fatalf("flush = %+v, %v; want success at the second attempt", res, err)
	}
	for _, f := range []string{"demo/r0.yaml", "demo/r1.yaml", OverviewFile} {
		if _, err := srv.ReadFile("app", DefaultStatusBranch, f); err != nil {
			t.Errorf("%s missing from the recreated branch: %v", f, err)
		}
	}
}

// newStatusWriter starts a Git server with repository app (one file) and
// returns it with a Writer on the repository, whose failed pushes wait
// about backoff (Open's default when 0), and a context that ends a minute
// later.
func newStatusWriter(t *testing.T, backoff time.Duration) (*gitserver.Server, *Writer, context.Context) {
	t.Helper()
	srv := gitserver.Start(t, gitserver.Options{})
	url, err := srv.CreateRepo("app", map[string]string{"a": "a\n"})
	if err != nil {
		t.Fatal(err)
	}
	repo, err := Open(Options{URL: url, RetryBackoff: backoff})
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(repo, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return srv, w, ctx
}
