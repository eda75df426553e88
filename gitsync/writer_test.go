package gitsync_test

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rollgate/rollgate/gitsync"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func state(ns, name string, step int) gitsync.RolloutState {
	return gitsync.RolloutState{
		Namespace: ns, Name: name, Phase: "Progressing",
		Step:   gitsync.StepState{Current: step, Total: 3, State: "Paused"},
		Stable: gitsync.VersionState{Revision: "6d4f9c", Replicas: 9, ReadyReplicas: 9, TrafficPercent: 95},
		Canary: gitsync.VersionState{Revision: "7b1e2a", Replicas: 1, ReadyReplicas: 1, TrafficPercent: 5},
		AwaitingApproval: &gitsync.AwaitingApproval{
			Revision: "7b1e2a", Step: step, Branch: gitsync.ApprovalBranch(ns, name, gitsync.Approval{Revision: "7b1e2a", Step: step}), Since: t0,
		},
		LastTransitionTime: t0.Add(time.Duration(step) * time.Minute),
		Message:            "waiting for approval",
		Analysis: []gitsync.Measurement{
			{Name: "success-rate", Phase: "Successful", Value: "0.998", Time: t0},
		},
		Git: gitsync.GitInfo{Repository: "https://git.example.com/app.git", Branch: "main", Path: "apps/echo/rollout.yaml", Revision: "abc123"},
	}
}

func newWriter(t *testing.T, repo *gitsync.Repository, opts gitsync.WriterOptions) *gitsync.Writer {
	t.Helper()
	w, err := gitsync.NewWriter(repo, opts)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestWriterCoalescesIntoOneCommitOnAnOrphanBranch(t *testing.T) {
	srv, repo := newRepo(t, map[string]string{"apps/x.yaml": "x: 1\n"})
	w := newWriter(t, repo, gitsync.WriterOptions{Author: gitsync.Signature{Name: "bot", Email: "bot@example.com"}})
	const n = 25
	for i := range n {
		// Several updates per rollout: only the latest is written.
		for step := 1; step <= 3; step++ {
			w.Enqueue(state("team"+fmt.Sprint(i%3), fmt.Sprintf("app-%02d", i), step))
		}
	}
	res, err := w.Flush(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Changed) != n {
		t.Fatalf("changed %d rollouts, want %d", len(res.Changed), n)
	}
	if log := gitLog(t, srv, gitsync.DefaultStatusBranch); len(log) != 1 {
		t.Fatalf("status branch history = %v, want exactly one (orphan) commit", log)
	}
	if _, err := srv.ReadFile("app", gitsync.DefaultStatusBranch, "apps/x.yaml"); err == nil {
		t.Fatal("status branch shares main's files; want an orphan branch")
	}
	readme, err := srv.ReadFile("app", gitsync.DefaultStatusBranch, "README.md")
	if err != nil || strings.Count(readme, "| [team") != n {
		t.Fatalf("README has %d rows (err %v):\n%s", strings.Count(readme, "| [team"), err, readme)
	}
	if w.Written("team0", "app-00") != res.Commit || w.Pending() {
		t.Fatalf("Written = %q, Pending = %v after flush", w.Written("team0", "app-00"), w.Pending())
	}

	// Identical states make no commit.
	w.Enqueue(state("team0", "app-00", 3))
	again, err := w.Flush(ctx(t))
	if err != nil || again.Commit != res.Commit || len(again.Changed) != 0 {
		t.Fatalf("re-flush of identical state = %+v, %v", again, err)
	}
	if log := gitLog(t, srv, gitsync.DefaultStatusBranch); len(log) != 1 {
		t.Fatalf("identical flush committed: %v", log)
	}
	gitFsck(t, srv)
}

func TestWriterKeepsConcurrentCommits(t *testing.T) {
	srv, repo := newRepo(t, map[string]string{"a": "a\n"})
	w := newWriter(t, repo, gitsync.WriterOptions{})
	w.Enqueue(state("demo", "one", 1))
	if _, err := w.Flush(ctx(t)); err != nil {
		t.Fatal(err)
	}
	// Another controller (another shard) writes its file; our repository
	// still has the old head, so our next push is rejected once.
	other, err := gitsync.RenderStatus(state("other", "theirs", 2))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Commit("app", gitsync.DefaultStatusBranch, "other writer", map[string]string{
		"other/theirs.yaml": string(other), "notes.txt": "keep me\n",
	}); err != nil {
		t.Fatal(err)
	}
	w.Enqueue(state("demo", "one", 2))
	w.Enqueue(state("demo", "two", 1))
	res, err := w.Flush(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"demo/one", "demo/two"}; !reflect.DeepEqual(res.Changed, want) {
		t.Fatalf("Changed = %v, want %v", res.Changed, want)
	}
	for _, f := range []string{"other/theirs.yaml", "notes.txt", "demo/one.yaml", "demo/two.yaml"} {
		if _, err := srv.ReadFile("app", gitsync.DefaultStatusBranch, f); err != nil {
			t.Errorf("%s missing after the race: %v", f, err)
		}
	}
	readme, _ := srv.ReadFile("app", gitsync.DefaultStatusBranch, "README.md")
	if !strings.Contains(readme, "other/theirs") || !strings.Contains(readme, "demo/two") {
		t.Fatalf("README does not list both writers' rollouts:\n%s", readme)
	}
	log := gitLog(t, srv, gitsync.DefaultStatusBranch)
	if len(log) != 3 || log[1] != "other writer" {
		t.Fatalf("history = %v", log)
	}

	states, err := gitsync.ReadStatus(ctx(t), repo, gitsync.DefaultStatusBranch)
	if err != nil {
		t.Fatal(err)
	}
	if len(states) != 3 || states[0].Name != "one" || states[2].Namespace != "other" {
		t.Fatalf("ReadStatus = %+v", states)
	}
}

func TestReadStatusRoundTrip(t *testing.T) {
	_, repo := newRepo(t, map[string]string{"a": "a\n"})
	w := newWriter(t, repo, gitsync.WriterOptions{})
	want := []gitsync.RolloutState{state("a", "x", 1), state("b", "y", 2)}
	want[1].AwaitingApproval = nil
	want[1].Analysis = nil
	// A gate of a retried release carries its attempt, which
	// `rollgate approve --repo` must put into the approval.
	retried := gitsync.Approval{Revision: "7b1e2a", Step: 1, Attempt: 2}
	want[0].AwaitingApproval.Attempt, want[0].AwaitingApproval.Branch = 2, gitsync.ApprovalBranch("a", "x", retried)
	want[0].Approvals = []gitsync.Approval{{Revision: "7b1e2a", Step: 1}, retried}
	for _, s := range want {
		w.Enqueue(s)
	}
	if _, err := w.Flush(ctx(t)); err != nil {
		t.Fatal(err)
	}
	got, err := gitsync.ReadStatus(ctx(t), repo, gitsync.DefaultStatusBranch)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ReadStatus =\n%+v\nwant\n%+v", got, want)
	}
	// Removing a rollout deletes its file and its README row.
	w.Remove("a", "x")
	res, err := w.Flush(ctx(t))
	if err != nil || !reflect.DeepEqual(res.Changed, []string{"a/x"}) {
		t.Fatalf("remove flush = %+v, %v", res, err)
	}
	got, err = gitsync.ReadStatus(ctx(t), repo, gitsync.DefaultStatusBranch)
	if err != nil || len(got) != 1 || got[0].Name != "y" {
		t.Fatalf("after remove: %+v, %v", got, err)
	}
}

func TestWriterIntoTrackedBranchWithPrefixAndTemplate(t *testing.T) {
	srv, repo := newRepo(t, map[string]string{"apps/echo/rollout.yaml": "kind: Rollout\n"})
	w := newWriter(t, repo, gitsync.WriterOptions{
		Branch: "main", PathPrefix: ".rollgate/status",
		MessageTemplate: "status:{{range .Changed}} {{.Namespace}}/{{.Name}}{{end}} [skip ci]",
	})
	w.Enqueue(state("demo", "echo", 1))
	w.Enqueue(state("demo", "web", 2))
	if _, err := w.Flush(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if log := gitLog(t, srv, "main"); log[0] != "status: demo/echo demo/web [skip ci]" || len(log) != 2 {
		t.Fatalf("history = %v", log)
	}
	if _, err := srv.ReadFile("app", "main", "apps/echo/rollout.yaml"); err != nil {
		t.Fatal("manifest lost")
	}
	got, err := gitsync.ReadStatusAt(ctx(t), repo, "main", ".rollgate/status")
	if err != nil || len(got) != 2 {
		t.Fatalf("ReadStatusAt = %+v, %v", got, err)
	}
	if _, err := gitsync.NewWriter(repo, gitsync.WriterOptions{MessageTemplate: "{{"}); err == nil {
		t.Fatal("invalid template accepted")
	}
}

func TestWriterBoundsMeasurements(t *testing.T) {
	_, repo := newRepo(t, map[string]string{"a": "a\n"})
	w := newWriter(t, repo, gitsync.WriterOptions{MaxMeasurements: 3})
	s := state("demo", "m", 1)
	s.Analysis = nil
	for i := range 8 {
		s.Analysis = append(s.Analysis, gitsync.Measurement{Name: "rate", Phase: "Successful", Value: fmt.Sprint(i)})
	}
	w.Enqueue(s)
	if _, err := w.Flush(ctx(t)); err != nil {
		t.Fatal(err)
	}
	got, err := gitsync.ReadStatus(ctx(t), repo, gitsync.DefaultStatusBranch)
	if err != nil || len(got) != 1 {
		t.Fatal(got, err)
	}
	if m := got[0].Analysis; len(m) != 3 || m[0].Value != "5" || m[2].Value != "7" {
		t.Fatalf("measurements = %+v, want the newest 3", m)
	}
}

func TestWriterStartFlushesPeriodicallyAndOnStop(t *testing.T) {
	srv, repo := newRepo(t, map[string]string{"a": "a\n"})
	w := newWriter(t, repo, gitsync.WriterOptions{Window: 20 * time.Millisecond})
	c, cancel := contextWithCancel(t)
	done := make(chan error)
	go func() { done <- w.Start(c) }()
	w.Enqueue(state("demo", "tick", 1))
	deadline := time.Now().Add(10 * time.Second)
	for w.Pending() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := srv.ReadFile("app", gitsync.DefaultStatusBranch, "demo/tick.yaml"); err != nil {
		t.Fatalf("periodic flush did not write: %v", err)
	}
	w.Enqueue(state("demo", "tick", 2))
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s, _ := srv.ReadFile("app", gitsync.DefaultStatusBranch, "demo/tick.yaml"); !strings.Contains(s, "current: 2") {
		t.Fatalf("final flush on stop missing:\n%s", s)
	}
}

// TestRenderStatusGolden pins the status file and overview formats, which
// users read and the CLI parses.
func TestRenderStatusGolden(t *testing.T) {
	s := state("demo", "echoserver", 1)
	file, err := gitsync.RenderStatus(s)
	if err != nil {
		t.Fatal(err)
	}
	overview := gitsync.RenderOverview([]gitsync.RolloutState{state("demo", "web", 2), s})
	for name, got := range map[string][]byte{"testdata/status/echoserver.yaml": file, "testdata/status/README.md": overview} {
		want, err := os.ReadFile(name)
		if os.Getenv("UPDATE_GOLDEN") != "" {
			if err := os.WriteFile(name, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err != nil || string(got) != string(want) {
			t.Errorf("%s differs (UPDATE_GOLDEN=1 to accept):\n%s", name, got)
		}
	}
	parsed, ok, err := gitsync.ParseStatus(file)
	if err != nil || !ok || !reflect.DeepEqual(parsed, s) {
		t.Fatalf("ParseStatus round trip = %+v, %v, %v", parsed, ok, err)
	}
	if _, ok, _ := gitsync.ParseStatus([]byte("kind: Deployment\n")); ok {
		t.Fatal("a Deployment parsed as a status file")
	}
}

// TestConcurrentUse runs enqueues, flushes, reads and approvals on one
// Repository at once (meaningful under -race).
func TestConcurrentUse(t *testing.T) {
	before, _ := os.ReadFile("testdata/approve-create-list/before.yaml")
	srv, repo := newRepo(t, map[string]string{rolloutPath: string(before)})
	w := newWriter(t, repo, gitsync.WriterOptions{})
	done := make(chan error, 4)
	go func() {
		for i := range 50 {
			w.Enqueue(state("demo", fmt.Sprintf("r%d", i%7), 1+i%3))
		}
		done <- nil
	}()
	go func() {
		for range 3 {
			if _, err := w.Flush(ctx(t)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	go func() {
		_, err := gitsync.ProposeApproval(ctx(t), repo, "main", rolloutPath, "demo", "echoserver", gitsync.Approval{Revision: "7b1e2a9f", Step: 2}, "")
		done <- err
	}()
	go func() {
		for range 3 {
			if _, err := gitsync.ApprovalsOnBranch(ctx(t), repo, "main", rolloutPath, "demo", "echoserver"); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for range 4 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Flush(ctx(t)); err != nil {
		t.Fatal(err)
	}
	states, err := gitsync.ReadStatus(ctx(t), repo, gitsync.DefaultStatusBranch)
	if err != nil || len(states) != 7 {
		t.Fatalf("ReadStatus = %d states, %v", len(states), err)
	}
	gitFsck(t, srv)
}

// TestWriterNeverOverwritesForeignFiles guards the tracked branch against a
// Writer configured without a PathPrefix.
func TestWriterNeverOverwritesForeignFiles(t *testing.T) {
	srv, repo := newRepo(t, map[string]string{"README.md": "# My app\n", "demo/echo.yaml": "kind: Deployment\n"})
	w := newWriter(t, repo, gitsync.WriterOptions{Branch: "main"})
	w.Enqueue(state("demo", "echo", 1))
	if _, err := w.Flush(ctx(t)); !errors.Is(err, gitsync.ErrNotOwned) {
		t.Fatalf("overwriting a manifest: err = %v, want ErrNotOwned", err)
	}
	w = newWriter(t, repo, gitsync.WriterOptions{Branch: "main"})
	w.Enqueue(state("other", "x", 1))
	if _, err := w.Flush(ctx(t)); !errors.Is(err, gitsync.ErrNotOwned) {
		t.Fatalf("overwriting README.md: err = %v, want ErrNotOwned", err)
	}
	if log := gitLog(t, srv, "main"); len(log) != 1 {
		t.Fatalf("a refused flush committed: %v", log)
	}
}

// TestWrittenOnlyForTheLatestState: Written names a commit only while the
// Rollout's latest enqueued state is in Git. An equal state changes
// nothing; a newer one is pending (Written "") until a flush writes it.
func TestWrittenOnlyForTheLatestState(t *testing.T) {
	srv, repo := newRepo(t, map[string]string{"a": "a\n"})
	w := newWriter(t, repo, gitsync.WriterOptions{})
	w.Enqueue(state("demo", "echo", 1))
	if got := w.Written("demo", "echo"); got != "" || !w.Pending() {
		t.Fatalf("before any flush: Written = %q, Pending = %v; want \"\", true", got, w.Pending())
	}
	first, err := w.Flush(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := w.Written("demo", "echo"); got != first.Commit || !reflect.DeepEqual(first.Written, []string{"demo/echo"}) {
		t.Fatalf("after the flush: Written = %q, result %+v; want %s and [demo/echo]", got, first, first.Commit)
	}

	// The same state again: still written, nothing to flush.
	w.Enqueue(state("demo", "echo", 1))
	if got := w.Written("demo", "echo"); got != first.Commit || w.Pending() {
		t.Fatalf("equal state enqueued: Written = %q, Pending = %v; want %s, false", got, w.Pending(), first.Commit)
	}

	// A newer state: pending until flushed, even though Git still holds
	// the older one.
	w.Enqueue(state("demo", "echo", 2))
	if got := w.Written("demo", "echo"); got != "" || !w.Pending() {
		t.Fatalf("newer state enqueued: Written = %q, Pending = %v; want \"\", true", got, w.Pending())
	}
	// Another Rollout's change does not move the commit of one that is
	// already in Git.
	w.Enqueue(state("demo", "web", 1))
	second, err := w.Flush(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	head, _ := srv.Head("app", gitsync.DefaultStatusBranch)
	if got := w.Written("demo", "echo"); got != second.Commit || got != head || !reflect.DeepEqual(second.Written, []string{"demo/echo", "demo/web"}) {
		t.Fatalf("after the second flush: Written = %q, head %s, result %+v", got, head, second)
	}
	w.Enqueue(state("demo", "web", 2))
	third, err := w.Flush(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := w.Written("demo", "echo"); got != second.Commit || !reflect.DeepEqual(third.Written, []string{"demo/web"}) {
		t.Fatalf("echo unchanged: Written = %q (want %s), result %+v (want only demo/web)", got, second.Commit, third)
	}
	if s, _ := srv.ReadFile("app", gitsync.DefaultStatusBranch, "demo/echo.yaml"); !strings.Contains(s, "current: 2") {
		t.Fatalf("echo's file lost its latest state:\n%s", s)
	}
}

// TestOnFlushReportsWhatReachedGit drives the Writer through Start: each
// periodic flush calls OnFlush with the Rollouts whose latest state it put
// in Git, after Written already says so; a failed flush reports its error.
func TestOnFlushReportsWhatReachedGit(t *testing.T) {
	srv, repo := newRepo(t, map[string]string{"a": "a\n"})
	type call struct {
		res     gitsync.FlushResult
		err     error
		written map[string]string // Written of each reported key, read in the callback
	}
	calls := make(chan call, 10)
	var w *gitsync.Writer
	w = newWriter(t, repo, gitsync.WriterOptions{Window: 20 * time.Millisecond, OnFlush: func(res gitsync.FlushResult, err error) {
		c := call{res: res, err: err, written: map[string]string{}}
		for _, k := range res.Written {
			ns, name, _ := strings.Cut(k, "/")
			c.written[k] = w.Written(ns, name)
		}
		calls <- c
	}})
	c, cancel := contextWithCancel(t)
	done := make(chan error)
	go func() { done <- w.Start(c) }()
	next := func(what string) call {
		t.Helper()
		select {
		case got := <-calls:
			return got
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no OnFlush call within 10s", what)
			return call{}
		}
	}

	w.Enqueue(state("demo", "echo", 1))
	w.Enqueue(state("demo", "web", 1))
	got := next("two new Rollouts")
	head, _ := srv.Head("app", gitsync.DefaultStatusBranch)
	want := map[string]string{"demo/echo": head, "demo/web": head}
	if got.err != nil || got.res.Commit != head || !reflect.DeepEqual(got.written, want) {
		t.Fatalf("OnFlush(%+v, %v), Written in the callback %v; want commit %s and %v", got.res, got.err, got.written, head, want)
	}

	w.Enqueue(state("demo", "web", 1)) // unchanged: no flush
	w.Enqueue(state("demo", "echo", 2))
	got = next("one changed Rollout")
	head, _ = srv.Head("app", gitsync.DefaultStatusBranch)
	if want := map[string]string{"demo/echo": head}; got.err != nil || !reflect.DeepEqual(got.written, want) {
		t.Fatalf("OnFlush(%+v, %v), Written in the callback %v; want %v", got.res, got.err, got.written, want)
	}
	if w.Pending() {
		t.Fatal("pending after the flush")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	select {
	case extra := <-calls:
		t.Fatalf("OnFlush called with nothing to write: %+v", extra)
	default:
	}

	// A flush that fails is reported too, with nothing written.
	_, repo = newRepo(t, map[string]string{"demo/echo.yaml": "kind: Deployment\n"})
	w = newWriter(t, repo, gitsync.WriterOptions{Branch: "main", OnFlush: func(res gitsync.FlushResult, err error) {
		calls <- call{res: res, err: err}
	}})
	w.Enqueue(state("demo", "echo", 1))
	if _, err := w.Flush(ctx(t)); !errors.Is(err, gitsync.ErrNotOwned) {
		t.Fatalf("Flush = %v, want ErrNotOwned", err)
	}
	if got := next("a failed flush"); !errors.Is(got.err, gitsync.ErrNotOwned) || len(got.res.Written) != 0 {
		t.Fatalf("OnFlush(%+v, %v) after a failed flush; want ErrNotOwned and nothing written", got.res, got.err)
	}
}

// TestClustersShareOneStatusBranch: the controllers of two clusters write
// the same Rollout under their own cluster directory of one status branch,
// which the first one creates; neither loses the other's file, and
// ClusterStates reads both, keyed by cluster.
func TestClustersShareOneStatusBranch(t *testing.T) {
	srv, repo := newRepo(t, map[string]string{"apps/echo/rollout.yaml": "kind: Rollout\n"})
	url := strings.TrimSuffix(repo.String(), "/")
	other := openRepo(t, gitsync.Options{URL: url, RetryBackoff: time.Millisecond})
	staging := newWriter(t, repo, gitsync.WriterOptions{PathPrefix: "staging", CreateBranch: true})
	prod := newWriter(t, other, gitsync.WriterOptions{PathPrefix: "prod", CreateBranch: true})
	a, b := state("demo", "echo", 1), state("demo", "echo", 2)
	a.Stable.Images = []string{"echo=echo:2"}
	staging.Enqueue(a)
	if _, err := staging.Flush(ctx(t)); err != nil {
		t.Fatalf("the first cluster creates the status branch: %v", err)
	}
	prod.Enqueue(b)
	if _, err := prod.Flush(ctx(t)); err != nil {
		t.Fatal(err)
	}
	a.Step.Current = 3
	staging.Enqueue(a)
	if _, err := staging.Flush(ctx(t)); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"staging/demo/echo.yaml", "prod/demo/echo.yaml", "staging/README.md", "prod/README.md"} {
		if _, err := srv.ReadFile("app", gitsync.DefaultStatusBranch, f); err != nil {
			t.Fatalf("%s missing from the shared status branch: %v", f, err)
		}
	}
	snap, err := repo.Snapshot(ctx(t), gitsync.DefaultStatusBranch)
	if err != nil {
		t.Fatal(err)
	}
	got, err := gitsync.ClusterStates(snap, "")
	if err != nil || len(got) != 2 {
		t.Fatalf("ClusterStates = %v, %v; want staging/demo/echo and prod/demo/echo", got, err)
	}
	if s := got["staging/demo/echo"]; s.Step.Current != 3 || !reflect.DeepEqual(s.Stable.Images, a.Stable.Images) {
		t.Fatalf("staging's file = %+v", s)
	}
	if s := got["prod/demo/echo"]; s.Step.Current != 2 {
		t.Fatalf("prod's file = %+v", s)
	}
}
