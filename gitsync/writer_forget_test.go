package gitsync_test

import (
	"testing"
	"time"

	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/test/gitserver"
)

// TestForgottenRolloutIsLeftToItsNewWriter: two Writers (two shards) on one
// status branch; a Rollout moves from the first to the second. Without
// Forget, the first Writer's next flush (for another of its Rollouts) puts
// the moved Rollout's old state back over the second Writer's; after
// Forget it leaves that file alone.
func TestForgottenRolloutIsLeftToItsNewWriter(t *testing.T) {
	for _, forget := range []bool{false, true} {
		srv := gitserver.Start(t, gitserver.Options{})
		url, err := srv.CreateRepo("app", map[string]string{"a": "a\n"})
		if err != nil {
			t.Fatal(err)
		}
		open := func() *gitsync.Writer {
			repo := openRepo(t, gitsync.Options{URL: url, RetryBackoff: time.Millisecond})
			return newWriter(t, repo, gitsync.WriterOptions{})
		}
		first, second := open(), open()
		first.Enqueue(state("demo", "moved", 1))
		first.Enqueue(state("demo", "stays", 1))
		if _, err := first.Flush(ctx(t)); err != nil {
			t.Fatal(err)
		}
		// The Rollout moves: the second Writer writes it at step 2.
		if forget {
			first.Forget("demo", "moved")
		}
		second.Enqueue(state("demo", "moved", 2))
		if _, err := second.Flush(ctx(t)); err != nil {
			t.Fatal(err)
		}
		// The first Writer's other Rollout changes.
		first.Enqueue(state("demo", "stays", 2))
		if _, err := first.Flush(ctx(t)); err != nil {
			t.Fatal(err)
		}
		data, err := srv.ReadFile("app", gitsync.DefaultStatusBranch, "demo/moved.yaml")
		if err != nil {
			t.Fatal(err)
		}
		st, ok, err := gitsync.ParseStatus([]byte(data))
		if err != nil || !ok {
			t.Fatalf("demo/moved.yaml: %v %v", ok, err)
		}
		switch {
		case forget && st.Step.Current != 2:
			t.Errorf("after Forget, the first Writer put the moved Rollout back at step %d over the second Writer's step 2", st.Step.Current)
		case !forget && st.Step.Current != 1:
			t.Errorf("without Forget the first Writer still writes its last state (step 1), found step %d: this test no longer shows why Forget exists", st.Step.Current)
		}
	}
}
