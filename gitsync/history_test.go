package gitsync_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/test/gitserver"
)

// historyClock is the commit time of the fixture's writes.
type historyClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *historyClock) set(t time.Time) { c.mu.Lock(); c.now = t; c.mu.Unlock() }
func (c *historyClock) get() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

// hAt is hour h of the fixture's day.
func hAt(h float64) time.Time {
	return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).Add(time.Duration(h * float64(time.Hour)))
}

// historyFixture writes, through the real status Writer, the history of
// Rollout shop/web: release b2 fails at step 1 and is rolled back (its
// revert branch is on the remote); release a1 is released through two
// gates; release c3 waits at its gate. It returns the server, the
// repository URL and the source commit of a1 (on main, at hour 2.75).
func historyFixture(t *testing.T) (*gitserver.Server, string, string) {
	t.Helper()
	srv := gitserver.Start(t, gitserver.Options{})
	url, err := srv.CreateRepo("app", map[string]string{"apps/web/deploy.yaml": "image: web:1\n"})
	if err != nil {
		t.Fatal(err)
	}
	clock := &historyClock{}
	repo := openRepo(t, gitsync.Options{URL: url, RetryBackoff: time.Millisecond, Now: clock.get})
	w := newWriter(t, repo, gitsync.WriterOptions{})
	git := gitsync.GitInfo{Repository: url, Branch: "main", Path: "apps/web/rollout.yaml", Revision: "1111111111111111111111111111111111111111"}
	base := func(phase, stable, canary string, step int, st string, ltt time.Time) gitsync.RolloutState {
		return gitsync.RolloutState{Namespace: "shop", Name: "web", Phase: phase,
			Step:               gitsync.StepState{Current: step, Total: 3, State: st},
			Stable:             gitsync.VersionState{Revision: stable, Replicas: 4, ReadyReplicas: 4},
			Canary:             gitsync.VersionState{Revision: canary, Replicas: 1, ReadyReplicas: 1},
			LastTransitionTime: ltt, Git: git}
	}
	write := func(h float64, s gitsync.RolloutState) {
		t.Helper()
		clock.set(hAt(h))
		w.Enqueue(s)
		if _, err := w.Flush(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	ok := gitsync.Measurement{Name: "success/rate", Phase: "Successful", Value: "0.999", Time: hAt(1.25)}
	bad := gitsync.Measurement{Name: "success/rate", Phase: "Failed", Value: "0.71", Time: hAt(1.4)}

	// Release b2: fails its analysis at step 1.
	b := base("Progressing", "s0", "b2", 1, "StepUpgrade", hAt(1))
	b.Canary.Images = []string{"web=web:2"}
	write(1, b)
	b.Step.State, b.Analysis = "StepMetricsAnalysis", []gitsync.Measurement{ok, bad}
	write(1.5, b)
	b.Phase, b.Step.State = "Failed", "RollingBack"
	write(2, b)
	b.Step.State = "RolledBack"
	write(2.5, b)
	if _, err := srv.Commit("app", gitsync.RevertBranch("shop", "web", "b2"), "revert b2", map[string]string{"apps/web/deploy.yaml": "image: web:1\n"}); err != nil {
		t.Fatal(err)
	}

	// The image bump of a1 on the tracked branch.
	clock.set(hAt(2.75))
	res, err := repo.Update(ctx(t), gitsync.UpdateRequest{Branch: "main"}, func(*gitsync.Snapshot) (*gitsync.Change, error) {
		return &gitsync.Change{Files: map[string][]byte{"apps/web/deploy.yaml": []byte("image: web:3\n")}, Message: "web 3"}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	src := res.Commit

	// Release a1: two gates, released.
	a := base("Progressing", "s0", "a1", 1, "StepUpgrade", hAt(3))
	a.Canary.Images, a.Git.Revision, a.Analysis = []string{"web=web:3"}, src, []gitsync.Measurement{ok, bad}
	write(3, a)
	a.Step, a.LastTransitionTime = gitsync.StepState{Current: 2, Total: 3, State: "StepPaused"}, hAt(4)
	a.AwaitingApproval = &gitsync.AwaitingApproval{Revision: "a1", Step: 2, Branch: "rollgate/approve/shop/web/a1/2",
		PullRequestURL: "https://git.example.com/app/pulls/7", Since: hAt(4)}
	write(4, a)
	a.AwaitingApproval, a.Step.State = nil, "StepReady"
	a.Approvals = []gitsync.Approval{{Revision: "a1", Step: 2}}
	write(5, a)
	a.Step, a.LastTransitionTime = gitsync.StepState{Current: 3, Total: 3, State: "StepPaused"}, hAt(6)
	a.AwaitingApproval = &gitsync.AwaitingApproval{Revision: "a1", Step: 3, Branch: "rollgate/approve/shop/web/a1/3", Since: hAt(6)}
	write(6, a)
	a.AwaitingApproval, a.Phase, a.Step.State = nil, "Healthy", "Completed"
	a.Approvals = append(a.Approvals, gitsync.Approval{Revision: "a1", Step: 3})
	a.Stable.Revision, a.Stable.Images = "a1", a.Canary.Images
	write(7, a)

	// Release c3: waits at its gate.
	c := base("Progressing", "a1", "c3", 1, "StepUpgrade", hAt(8))
	c.Canary.Images, c.Approvals, c.Analysis = []string{"web=web:4"}, a.Approvals, a.Analysis
	write(8, c)
	c.Step, c.LastTransitionTime = gitsync.StepState{Current: 2, Total: 3, State: "StepPaused"}, hAt(9)
	c.AwaitingApproval = &gitsync.AwaitingApproval{Revision: "c3", Step: 2, Branch: "rollgate/approve/shop/web/c3/2", Since: hAt(9)}
	write(9, c)
	return srv, url, src
}

func openHistoryRepo(t *testing.T, url string) *gitsync.Repository {
	t.Helper()
	repo := openRepo(t, gitsync.Options{URL: url})
	return repo
}

func TestHistoryFoldsReleasesFromTheStatusBranch(t *testing.T) {
	_, url, src := historyFixture(t)
	h, err := gitsync.ReadHistory(ctx(t), openHistoryRepo(t, url), gitsync.HistoryOptions{Namespace: "shop", Name: "web", SourceTimes: true})
	if err != nil {
		t.Fatal(err)
	}
	if h.Commits != 11 || h.Versions != 11 || h.Incomplete || !h.Until.Equal(hAt(9)) {
		t.Fatalf("walked %d commits, %d versions, incomplete %v, until %s; want 11, 11, false, %s", h.Commits, h.Versions, h.Incomplete, h.Until, hAt(9))
	}
	ok := gitsync.Measurement{Name: "success/rate", Phase: "Successful", Value: "0.999", Time: hAt(1.25)}
	bad := gitsync.Measurement{Name: "success/rate", Phase: "Failed", Value: "0.71", Time: hAt(1.4)}
	how := "; approver: " + gitsync.NotRecorded
	want := []gitsync.Release{{
		Revision: "b2", Stable: "s0", Images: []string{"web=web:2"}, FirstSeen: hAt(1),
		SourceCommit: "1111111111111111111111111111111111111111",
		Steps:        []gitsync.StepSpan{{Step: 1, Total: 3, Start: hAt(1), End: hAt(2), States: []string{"StepUpgrade", "StepMetricsAnalysis", "RollingBack"}}},
		Analysis:     []gitsync.Measurement{ok, bad},
		Outcome:      gitsync.OutcomeRolledBack, Ended: hAt(2), Revert: "rollgate/revert/shop/web/b2",
	}, {
		Revision: "a1", Stable: "s0", Images: []string{"web=web:3"}, FirstSeen: hAt(3),
		SourceCommit: src, SourceCommitTime: hAt(2.75),
		Steps: []gitsync.StepSpan{
			{Step: 1, Total: 3, Start: hAt(3), End: hAt(4), States: []string{"StepUpgrade"}},
			{Step: 2, Total: 3, Start: hAt(4), End: hAt(6), States: []string{"StepPaused", "StepReady"}},
			{Step: 3, Total: 3, Start: hAt(6), End: hAt(7), States: []string{"StepPaused", "Completed"}},
		},
		Gates: []gitsync.Gate{
			{Step: 2, Waiting: hAt(4), Branch: "rollgate/approve/shop/web/a1/2", PullRequestURL: "https://git.example.com/app/pulls/7",
				Approved: hAt(5), Opened: hAt(5), How: "approval in spec.approvals; pull request https://git.example.com/app/pulls/7" + how},
			{Step: 3, Waiting: hAt(6), Branch: "rollgate/approve/shop/web/a1/3",
				Approved: hAt(7), Opened: hAt(7), How: "approval in spec.approvals; branch rollgate/approve/shop/web/a1/3" + how},
		},
		Outcome: gitsync.OutcomeReleased, Ended: hAt(7),
	}, {
		Revision: "c3", Stable: "a1", Images: []string{"web=web:4"}, FirstSeen: hAt(8),
		SourceCommit: "1111111111111111111111111111111111111111",
		Steps: []gitsync.StepSpan{
			{Step: 1, Total: 3, Start: hAt(8), End: hAt(9), States: []string{"StepUpgrade"}},
			{Step: 2, Total: 3, Start: hAt(9), States: []string{"StepPaused"}},
		},
		Gates:   []gitsync.Gate{{Step: 2, Waiting: hAt(9), Branch: "rollgate/approve/shop/web/c3/2", How: "waiting; branch rollgate/approve/shop/web/c3/2" + how}},
		Outcome: gitsync.OutcomeInProgress,
	}}
	if !reflect.DeepEqual(h.Releases, want) {
		got, _ := json.MarshalIndent(h.Releases, "", "  ")
		t.Fatalf("releases:\n%s", got)
	}

	d := gitsync.ComputeDORA(h.Releases, hAt(0), hAt(24))
	figures := []struct {
		name  string
		f     gitsync.Figure
		value float64
		count int
	}{
		{"deployment frequency", d.DeploymentFrequency, 1, 1}, // one release in one day
		{"lead time", d.LeadTime, 4.25, 1},                    // a1: source commit 2.75 -> released 7
		{"change failure rate", d.ChangeFailureRate, 50, 2},   // b2 of b2, a1
		{"time to restore", d.TimeToRestore, 5, 1},            // b2 rolled back at 2 -> a1 released at 7
	}
	for _, x := range figures {
		if x.f.Value == nil || *x.f.Value != x.value || x.f.Count != x.count {
			t.Errorf("%s = %+v, want %v from %d", x.name, x.f, x.value, x.count)
		}
	}
	if d.LeadTime.Note != "1 from the source commit's time, 0 from the first status version" {
		t.Errorf("lead time note = %q", d.LeadTime.Note)
	}
}

func TestHistoryStopsAtSince(t *testing.T) {
	_, url, _ := historyFixture(t)
	// The walk stops at the first commit before hour 6.5: the version of
	// hour 6 gives the state at the start of the window.
	h, err := gitsync.ReadHistory(ctx(t), openHistoryRepo(t, url), gitsync.HistoryOptions{Namespace: "shop", Name: "web", Since: hAt(6.5)})
	if err != nil {
		t.Fatal(err)
	}
	if h.Commits != 4 || h.Versions != 4 || len(h.Releases) != 2 {
		t.Fatalf("walked %d commits, %d versions, %d releases; want 4, 4, 2", h.Commits, h.Versions, len(h.Releases))
	}
	a := h.Releases[0]
	if a.Revision != "a1" || !a.StartedBeforeWindow || a.Outcome != gitsync.OutcomeReleased || !a.SourceCommitTime.IsZero() {
		t.Fatalf("first release = %+v; want a1 started before the window, released, no source time", a)
	}
	d := gitsync.ComputeDORA(h.Releases, hAt(6.5), hAt(9))
	if d.LeadTime.Count != 0 || d.LeadTime.Value != nil || d.DeploymentFrequency.Count != 1 {
		t.Fatalf("DORA = %+v; want no lead time (a1 started before the window) and one release", d)
	}

	if _, err := gitsync.ReadHistory(ctx(t), openHistoryRepo(t, url), gitsync.HistoryOptions{Namespace: "shop", Name: "nope"}); !errors.Is(err, gitsync.ErrFileNotFound) {
		t.Fatalf("history of a Rollout without a status file: %v, want ErrFileNotFound", err)
	}
}
