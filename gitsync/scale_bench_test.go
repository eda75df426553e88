package gitsync_test

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/test/gitserver"
)

// BenchmarkWriteBack1000 is P3 of docs/benchmarks.md: 1,000 Rollouts
// change status at once while another client pushes unrelated commits to
// the same status branch at 10 Hz. The Writer runs as the controller runs
// it (Start: one flush per window, sooner for a burst). It prints the time from the changes
// until every new state is in Git (Writer.Written for all 1,000), the
// status commits that took, the foreign commits pushed and kept, and the
// states missing or wrong in Git read back by an independent client.
func BenchmarkWriteBack1000(b *testing.B) {
	for _, window := range []time.Duration{time.Second, gitsync.DefaultWindow} {
		b.Run("window="+window.String(), func(b *testing.B) {
			for range b.N {
				writeBack(b, 1000, window)
			}
		})
	}
}

func writeBack(b *testing.B, rollouts int, window time.Duration) {
	// Only the wait for Git is timed, summed over the iterations. (A
	// ResetTimer here cleared the earlier iterations' time, so the
	// framework, which stops once b.N iterations took -benchtime, saw
	// every b.N take one wait of 0.6 s and raised b.N without end: make
	// bench ran hundreds of iterations until its 90 min timeout.)
	b.StopTimer()
	const branch = gitsync.DefaultStatusBranch
	srv := gitserver.Start(b, gitserver.Options{})
	url, err := srv.CreateRepo("app", map[string]string{"apps/a.yaml": "a: 1\n"})
	if err != nil {
		b.Fatal(err)
	}
	// Every exchange with the server is timed: a retry wins only if its
	// fetch, build and push take less than the 100 ms between foreign
	// pushes, so these times explain a miss.
	ex := &exchanges{by: map[gitsync.Operation][]time.Duration{}}
	repo := openRepo(b, gitsync.Options{URL: url, RetryBackoff: 10 * time.Millisecond, Observe: ex.observe})
	var flushes, failed atomic.Int64
	var lastErr atomic.Value
	w, err := gitsync.NewWriter(repo, gitsync.WriterOptions{Window: window, OnFlush: func(res gitsync.FlushResult, err error) {
		flushes.Add(1)
		if err != nil {
			failed.Add(1)
			lastErr.Store(err.Error())
		}
	}})
	if err != nil {
		b.Fatal(err)
	}
	last := make([]gitsync.RolloutState, rollouts)
	for i := range rollouts {
		last[i] = stressState(i, 0)
		w.Enqueue(last[i])
	}
	base, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := w.Flush(base); err != nil {
		b.Fatal(err)
	}
	before, err := srv.Head("app", branch)
	if err != nil {
		b.Fatal(err)
	}
	startCtx, stopWriter := context.WithCancel(base)
	writerDone := make(chan error, 1)
	go func() { writerDone <- w.Start(startCtx) }()

	var foreign []string
	pushCtx, stopPushing := context.WithCancel(base)
	pusherDone := make(chan error, 1)
	go func() { pusherDone <- pushForeign(pushCtx, srv, branch, &foreign) }()

	// Somewhere inside a window, every Rollout changes at once.
	time.Sleep(window / 3)
	b.StartTimer()
	t0 := time.Now()
	var wg sync.WaitGroup
	for i := range rollouts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last[i] = stressState(i, 1)
			w.Enqueue(last[i])
		}()
	}
	wg.Wait()
	// Give up after a minute: what is not in Git by then counts as lost.
	for time.Since(t0) < time.Minute && !allWritten(w, last) {
		time.Sleep(5 * time.Millisecond)
	}
	inGit := time.Since(t0)
	b.StopTimer()
	stopPushing()
	if err := <-pusherDone; err != nil {
		b.Fatalf("foreign pusher: %v", err)
	}
	stopWriter()
	if err := <-writerDone; err != nil {
		b.Fatal(err)
	}
	fmt.Printf("P3 write-back, window %v: flushes %d, failed %d\n", window, flushes.Load(), failed.Load())
	if e, ok := lastErr.Load().(string); ok {
		fmt.Printf("P3 write-back, window %v: last flush error: %s\n", window, e)
	}

	ex.print(fmt.Sprintf("P3 write-back, window %v", window))

	lost := lostStates(b, url, branch, last)
	kept := keptForeign(b, srv, repo, branch, foreign)
	commits := 0
	for _, s := range strings.Split(mustBareGit(b, srv, "log", "--format=%s", before+"..refs/heads/"+branch), "\n") {
		if strings.HasPrefix(s, "rollgate: status") {
			commits++
		}
	}
	fmt.Printf("P3 write-back, %d Rollouts at once, window %v, foreign pushes at 10 Hz: every state in Git after %.2f s\n", rollouts, window, inGit.Seconds())
	if !isAncestor(b, srv, before, branch) {
		b.Errorf("the status branch lost its history")
	}
	fmt.Printf("P3 write-back, window %v: status commits %d\n", window, commits)
	fmt.Printf("P3 write-back, window %v: foreign commits kept %d of %d\n", window, kept, len(foreign))
	fmt.Printf("P3 write-back, window %v: states lost %d of %d\n", window, lost, rollouts)
	b.ReportMetric(inGit.Seconds(), "s-to-git")
	b.ReportMetric(float64(commits), "status-commits")
	b.ReportMetric(float64(lost), "states-lost")
	b.ReportMetric(float64(len(foreign)-kept), "foreign-lost")
}

// exchanges collects the durations of a Repository's exchanges with the
// remote, by operation.
type exchanges struct {
	mu sync.Mutex
	by map[gitsync.Operation][]time.Duration
}

func (e *exchanges) observe(op gitsync.Operation, d time.Duration, _ error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.by[op] = append(e.by[op], d)
}

// print writes one line per operation: count, p50, p90 and max.
func (e *exchanges) print(prefix string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, op := range []gitsync.Operation{gitsync.OpList, gitsync.OpFetch, gitsync.OpPush} {
		ds := e.by[op]
		if len(ds) == 0 {
			continue
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		at := func(q float64) time.Duration { return ds[int(q*float64(len(ds)-1))] }
		fmt.Printf("%s: %s exchanges %d, p50 %d ms, p90 %d ms, max %d ms\n", prefix, op, len(ds),
			at(0.5).Milliseconds(), at(0.9).Milliseconds(), ds[len(ds)-1].Milliseconds())
	}
}

// pushForeign commits an unrelated file to branch every 100 ms until ctx
// ends, appending each commit to foreign.
func pushForeign(ctx context.Context, srv *gitserver.Server, branch string, foreign *[]string) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		h, err := commitRetrying(ctx, srv, branch, fmt.Sprintf("foreign %d", n),
			map[string]string{fmt.Sprintf("other/%d.txt", n): fmt.Sprintf("foreign %d\n", n)})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		*foreign = append(*foreign, h)
	}
}

func allWritten(w *gitsync.Writer, states []gitsync.RolloutState) bool {
	for _, s := range states {
		if w.Written(s.Namespace, s.Name) == "" {
			return false
		}
	}
	return true
}

// lostStates counts the Rollouts whose state in Git, read by an
// independent client, is not their last one.
func lostStates(b *testing.B, url, branch string, last []gitsync.RolloutState) int {
	reader := openRepo(b, gitsync.Options{URL: url})
	got, err := gitsync.ReadStatus(context.Background(), reader, branch)
	if err != nil {
		b.Fatal(err)
	}
	want := append([]gitsync.RolloutState(nil), last...)
	sort.Slice(want, func(i, j int) bool {
		return want[i].Namespace+"/"+want[i].Name < want[j].Namespace+"/"+want[j].Name
	})
	byKey := map[string]gitsync.RolloutState{}
	for _, s := range got {
		byKey[s.Namespace+"/"+s.Name] = s
	}
	lost := 0
	for _, s := range want {
		if g, ok := byKey[s.Namespace+"/"+s.Name]; !ok || !reflect.DeepEqual(g, s) {
			lost++
		}
	}
	return lost
}

// keptForeign counts the foreign commits still in the branch's history
// with their file.
func keptForeign(b *testing.B, srv *gitserver.Server, repo *gitsync.Repository, branch string, foreign []string) int {
	have, history := foreignOnBranch(b, srv, repo, branch)
	kept := 0
	for n, h := range foreign {
		if history[h] && have[fmt.Sprintf("other/%d.txt", n)] {
			kept++
		}
	}
	return kept
}

// A change of many files is uploaded through the staging ref first; the
// branch gets every file in one commit and no staging ref is left behind.
func TestLargeChangeLeavesNoStagingRef(t *testing.T) {
	srv := gitserver.Start(t, gitserver.Options{})
	url, err := srv.CreateRepo("app", map[string]string{"a": "a\n"})
	if err != nil {
		t.Fatal(err)
	}
	var pushes atomic.Int64
	repo, err := gitsync.Open(gitsync.Options{URL: url, Observe: func(op gitsync.Operation, _ time.Duration, err error) {
		if op == gitsync.OpPush && err == nil {
			pushes.Add(1)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for i := range 100 {
		files[fmt.Sprintf("many/%03d.txt", i)] = fmt.Appendf(nil, "file %d\n", i)
	}
	res, err := repo.Update(ctx(t), gitsync.UpdateRequest{Branch: "main"}, func(*gitsync.Snapshot) (*gitsync.Change, error) {
		return &gitsync.Change{Files: files, Message: "many files"}, nil
	})
	if err != nil || len(res.Changed) != 100 {
		t.Fatalf("update = %+v, %v", res, err)
	}
	if head, err := srv.Head("app", "main"); err != nil || head != res.Commit {
		t.Fatalf("main at %s (%v), want %s", head, err, res.Commit)
	}
	if n := pushes.Load(); n != 2 {
		t.Fatalf("%d pushes, want 2 (the staging ref, then the branch)", n)
	}
	if refs := mustBareGit(t, srv, "for-each-ref", "refs/rollgate/"); refs != "" {
		t.Fatalf("staging refs left behind: %s", refs)
	}
	if n := len(strings.Fields(mustBareGit(t, srv, "ls-tree", "--name-only", "main", "many/"))); n != 100 {
		t.Fatalf("%d files under many/ on main, want 100", n)
	}
}

// The Writer's large flush pushes its branch on a head fetched after the
// upload to the staging ref (an extra fetch, not an attempt) and, once
// written, leaves no staging ref behind.
func TestWriterLargeFlushLeavesNoStagingRef(t *testing.T) {
	srv := gitserver.Start(t, gitserver.Options{})
	url, err := srv.CreateRepo("app", map[string]string{"a": "a\n"})
	if err != nil {
		t.Fatal(err)
	}
	var pushes, fetches atomic.Int64
	repo, err := gitsync.Open(gitsync.Options{URL: url, Observe: func(op gitsync.Operation, _ time.Duration, err error) {
		switch {
		case op == gitsync.OpPush && err == nil:
			pushes.Add(1)
		case op == gitsync.OpFetch && err == nil:
			fetches.Add(1)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	w, err := gitsync.NewWriter(repo, gitsync.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.Enqueue(stressState(0, 0))
	if _, err := w.Flush(ctx(t)); err != nil {
		t.Fatal(err)
	}
	pushes.Store(0)
	fetches.Store(0)
	for i := range 100 {
		w.Enqueue(stressState(i, 1))
	}
	res, err := w.Flush(ctx(t))
	if err != nil || len(res.Changed) != 100 || res.Attempts != 1 {
		t.Fatalf("flush = %+v, %v; want 100 Rollouts in one attempt", res, err)
	}
	if head, err := srv.Head("app", gitsync.DefaultStatusBranch); err != nil || head != res.Commit {
		t.Fatalf("status branch at %s (%v), want %s", head, err, res.Commit)
	}
	// The head was already here from the first flush: the one fetch is
	// the one after the upload.
	if p, f := pushes.Load(), fetches.Load(); p != 2 || f != 1 {
		t.Fatalf("%d pushes, %d fetches; want 2 pushes (the staging ref, then the branch) and a fetch after the upload", p, f)
	}
	if refs := mustBareGit(t, srv, "for-each-ref", "refs/rollgate/"); refs != "" {
		t.Fatalf("staging refs left behind: %s", refs)
	}
}
