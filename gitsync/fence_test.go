package gitsync_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/test/gitserver"
)

const testLease = "rollgate-system/rollgate.dev"

// flushes records what OnFlush is told.
type flushes struct {
	mu   sync.Mutex
	errs []error
	got  chan error
}

func newFlushes() *flushes { return &flushes{got: make(chan error, 100)} }

func (f *flushes) on(_ gitsync.FlushResult, err error) {
	f.mu.Lock()
	f.errs = append(f.errs, err)
	f.mu.Unlock()
	f.got <- err
}

func (f *flushes) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.errs)
}

// fencedWriter opens a Writer of its own on url with epoch (0: no fence).
func fencedWriter(t *testing.T, url string, epoch uint64, window time.Duration, obs *observed, f *flushes) *gitsync.Writer {
	t.Helper()
	o := gitsync.Options{URL: url, RetryBackoff: time.Millisecond}
	if obs != nil {
		o.Observe = obs.observe
	}
	repo := openRepo(t, o)
	opts := gitsync.WriterOptions{Window: window, Burst: -1}
	if epoch > 0 {
		opts.Fence = gitsync.Fence{Epoch: epoch, Lease: testLease, Holder: "replica-" + string(rune('a'+epoch))}
	}
	if f != nil {
		opts.OnFlush = f.on
	}
	return newWriter(t, repo, opts)
}

func branchEpoch(t *testing.T, srv *gitserver.Server) uint64 {
	t.Helper()
	data, err := srv.ReadFile("app", gitsync.DefaultStatusBranch, gitsync.LeaderPath("", testLease))
	if err != nil {
		t.Fatalf("leader file: %v", err)
	}
	e, err := gitsync.ParseLeaderEpoch([]byte(data))
	if err != nil {
		t.Fatalf("leader file: %v\n%s", err, data)
	}
	return e
}

func statusHead(t *testing.T, srv *gitserver.Server) string {
	t.Helper()
	h, err := srv.Head("app", gitsync.DefaultStatusBranch)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func stepOnBranch(t *testing.T, srv *gitserver.Server, ns, name string) int {
	t.Helper()
	data, err := srv.ReadFile("app", gitsync.DefaultStatusBranch, gitsync.StatusPath("", ns, name))
	if err != nil {
		t.Fatalf("status file of %s/%s: %v", ns, name, err)
	}
	s, ok, err := gitsync.ParseStatus([]byte(data))
	if !ok || err != nil {
		t.Fatalf("status file of %s/%s: ok=%v err=%v", ns, name, ok, err)
	}
	return s.Step.Current
}

// quietFor fails t when obs sees a Git exchange or f a flush within d: the
// Writer is expected to have stopped writing.
func quietFor(t *testing.T, d time.Duration, obs *observed, f *flushes) {
	t.Helper()
	before := f.count()
	deadline := time.After(d)
	for {
		select {
		case <-deadline:
			return
		case <-time.After(d / 10):
			if ops := obs.take(); ops != "" || f.count() != before {
				t.Fatalf("the fenced writer still talks to Git: %q, %d more flushes", ops, f.count()-before)
			}
		}
	}
}

func TestAFormerLeaderIsFencedByTheNewLeadersEpoch(t *testing.T) {
	srv := gitserver.Start(t, gitserver.Options{})
	url, err := srv.CreateRepo("app", map[string]string{"apps/x.yaml": "x: 1\n"})
	if err != nil {
		t.Fatal(err)
	}
	obsA, fa := &observed{}, newFlushes()
	a := fencedWriter(t, url, 1, time.Hour, obsA, fa)
	b := fencedWriter(t, url, 2, time.Hour, nil, nil)

	// A leads first.
	a.Enqueue(state("team", "app", 1))
	if _, err := a.Flush(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if e := branchEpoch(t, srv); e != 1 {
		t.Fatalf("epoch on the branch after A's flush = %d, want 1", e)
	}
	if got := <-fa.got; got != nil {
		t.Fatalf("A's flush reported %v", got)
	}

	// B takes over: its first flush claims the branch with nothing else to write.
	claim, err := b.Flush(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if e := branchEpoch(t, srv); e != 2 {
		t.Fatalf("epoch on the branch after B's first flush = %d, want 2 (commit %s)", e, claim.Commit)
	}
	b.Enqueue(state("team", "app", 2))
	bs, err := b.Flush(ctx(t))
	if err != nil {
		t.Fatal(err)
	}

	// A, paused while B took over, flushes its later state: refused.
	a.Enqueue(state("team", "app", 3))
	obsA.take()
	_, err = a.Flush(ctx(t))
	if !errors.Is(err, gitsync.ErrFenced) {
		t.Fatalf("A's flush after B's = %v, want ErrFenced", err)
	}
	for _, want := range []string{"epoch 2", "is 1", testLease, "another replica leads"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("fencing error %q does not say %q", err, want)
		}
	}
	if got := <-fa.got; !errors.Is(got, gitsync.ErrFenced) {
		t.Fatalf("OnFlush got %v, want the fencing error", got)
	}
	if head := statusHead(t, srv); head != bs.Commit {
		t.Fatalf("status branch moved to %s after the fenced flush, want B's %s", head, bs.Commit)
	}
	if step := stepOnBranch(t, srv, "team", "app"); step != 2 {
		t.Fatalf("status file holds step %d, want B's 2", step)
	}
	if _, _, last := a.LastFlush(); !errors.Is(last, gitsync.ErrFenced) {
		t.Fatalf("A's LastFlush = %v, want the fencing error", last)
	}

	// A writes nothing more and does not try: no Git exchange, no flush.
	obsA.take()
	a.Enqueue(state("team", "app", 4))
	if _, err := a.Flush(ctx(t)); !errors.Is(err, gitsync.ErrFenced) {
		t.Fatalf("A's next flush = %v, want ErrFenced", err)
	}
	if ops := obsA.take(); ops != "" {
		t.Fatalf("a fenced flush talked to Git: %s", ops)
	}
	if fa.count() != 2 {
		t.Fatalf("OnFlush called %d times, want twice (A's write, then its refusal once)", fa.count())
	}
}

func TestAStartedFormerLeaderStopsWithoutALoop(t *testing.T) {
	srv := gitserver.Start(t, gitserver.Options{})
	url, err := srv.CreateRepo("app", map[string]string{"apps/x.yaml": "x: 1\n"})
	if err != nil {
		t.Fatal(err)
	}
	b := fencedWriter(t, url, 2, time.Hour, nil, nil)
	b.Enqueue(state("team", "app", 2))
	bs, err := b.Flush(ctx(t))
	if err != nil {
		t.Fatal(err)
	}

	// A starts with a short window and a Rollout of its own: its first
	// flush (the claim of epoch 1) is refused, and it stops.
	obs, fa := &observed{}, newFlushes()
	a := fencedWriter(t, url, 1, 5*time.Millisecond, obs, fa)
	a.Enqueue(state("other", "app2", 1))
	c, cancel := context.WithCancel(ctx(t))
	done := make(chan struct{})
	go func() { _ = a.Start(c); close(done) }()
	if got := <-fa.got; !errors.Is(got, gitsync.ErrFenced) {
		t.Fatalf("A's first flush = %v, want ErrFenced", got)
	}
	obs.take()
	for i := range 5 {
		a.Enqueue(state("other", "app2", 2+i))
	}
	quietFor(t, 100*time.Millisecond, obs, fa) // 20 windows
	cancel()
	<-done
	if ops := obs.take(); ops != "" {
		t.Fatalf("the fenced writer flushed on stop: %s", ops)
	}
	if head := statusHead(t, srv); head != bs.Commit {
		t.Fatalf("status branch moved to %s, want B's %s", head, bs.Commit)
	}
	if _, err := srv.ReadFile("app", gitsync.DefaultStatusBranch, gitsync.StatusPath("", "other", "app2")); err == nil {
		t.Fatal("the fenced writer wrote another Rollout's file")
	}
}

func TestEpochZeroFencesNothing(t *testing.T) {
	srv := gitserver.Start(t, gitserver.Options{})
	url, err := srv.CreateRepo("app", map[string]string{"apps/x.yaml": "x: 1\n"})
	if err != nil {
		t.Fatal(err)
	}
	single := fencedWriter(t, url, 0, time.Hour, nil, nil)
	single.Enqueue(state("team", "app", 1))
	if _, err := single.Flush(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.ReadFile("app", gitsync.DefaultStatusBranch, gitsync.LeaderPath("", testLease)); err == nil {
		t.Fatal("a writer without an epoch wrote a leader file")
	}
	// Nothing new to write: no commit, as before fencing existed.
	head := statusHead(t, srv)
	if res, err := single.Flush(ctx(t)); err != nil || res.Commit != head || len(res.Changed) != 0 {
		t.Fatalf("flush of written states = %+v, %v; want no commit on %s", res, err, head)
	}
	// A branch with an epoch on it does not stop a writer without one.
	leader := fencedWriter(t, url, 3, time.Hour, nil, nil)
	if _, err := leader.Flush(ctx(t)); err != nil {
		t.Fatal(err)
	}
	single.Enqueue(state("team", "app", 2))
	if _, err := single.Flush(ctx(t)); err != nil {
		t.Fatalf("epoch-0 flush on a branch holding epoch 3: %v", err)
	}
	if step := stepOnBranch(t, srv, "team", "app"); step != 2 {
		t.Fatalf("status file holds step %d, want 2", step)
	}
	if e := branchEpoch(t, srv); e != 3 {
		t.Fatalf("epoch-0 writer changed the leader file to %d", e)
	}
}
