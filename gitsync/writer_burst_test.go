package gitsync_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/rollgate/rollgate/gitsync"
)

// With a window of a minute, a trickle of changes waits for the window,
// while a burst (Burst Rollouts waiting) is written at once, in one
// commit; a second burst right after waits for the gap of a fifth of the
// window, so a storm cannot make a commit per change.
func TestWriterFlushesABurstBeforeTheWindowEnds(t *testing.T) {
	srv, repo := newRepo(t, map[string]string{"a": "a\n"})
	const burst = 5
	w := newWriter(t, repo, gitsync.WriterOptions{Window: time.Minute, Burst: burst})
	c, cancel := contextWithCancel(t)
	done := make(chan error)
	go func() { done <- w.Start(c) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	for i := range burst - 1 {
		w.Enqueue(state("demo", fmt.Sprintf("r%d", i), 1))
	}
	stillPending(t, w, time.Second, "a trickle of changes")
	w.Enqueue(state("demo", fmt.Sprintf("r%d", burst-1), 1))
	deadline := time.Now().Add(30 * time.Second)
	for w.Pending() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	for i := range burst {
		if w.Written("demo", fmt.Sprintf("r%d", i)) == "" {
			t.Fatalf("demo/r%d not written within half the window after a burst", i)
		}
	}
	if log := gitLog(t, srv, gitsync.DefaultStatusBranch); len(log) != 1 {
		t.Fatalf("status branch history = %v, want one commit for the burst", log)
	}

	for i := range burst {
		w.Enqueue(state("demo", fmt.Sprintf("r%d", i), 2))
	}
	stillPending(t, w, time.Second, "a second burst right after the first")
}

// stillPending fails unless w holds pending states for all of d: nothing
// may be written in that time.
func stillPending(t *testing.T, w *gitsync.Writer, d time.Duration, what string) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if !w.Pending() {
			t.Fatalf("%s was written early", what)
		}
	}
}
