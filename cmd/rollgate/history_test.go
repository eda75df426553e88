package main

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/test/gitserver"
)

// writeStatusHistory writes the versions of one status file through the
// real status Writer, each committed at its time, and returns the
// repository URL.
func writeStatusHistory(t *testing.T, versions []gitsync.StatusVersion) string {
	t.Helper()
	url, _ := writeStatusHistoryOn(t, versions)
	return url
}

// writeStatusHistoryOn is writeStatusHistory returning the Git server too.
func writeStatusHistoryOn(t *testing.T, versions []gitsync.StatusVersion) (string, *gitserver.Server) {
	t.Helper()
	srv := gitserver.Start(t, gitserver.Options{})
	url, err := srv.CreateRepo("app", map[string]string{"apps/web/deploy.yaml": "image: web:1\n"})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var now time.Time
	repo, err := gitsync.Open(gitsync.Options{URL: url, RetryBackoff: time.Millisecond,
		Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }})
	if err != nil {
		t.Fatal(err)
	}
	w, err := gitsync.NewWriter(repo, gitsync.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, v := range versions {
		mu.Lock()
		now = v.Time
		mu.Unlock()
		w.Enqueue(v.State)
		if _, err := w.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return url, srv
}

// TestHistoryCommand: release b2 is rolled back at step 1, release a1 is
// released through two gates, release c3 waits at its gate; `rollgate
// history` prints them and the DORA figures of the day, as text and JSON.
func TestHistoryCommand(t *testing.T) {
	at := func(h float64) time.Time {
		return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).Add(time.Duration(h * float64(time.Hour)))
	}
	var versions []gitsync.StatusVersion
	add := func(h float64, phase, stable, canary string, step int, state string, awaiting int, approved ...int) {
		s := gitsync.RolloutState{Namespace: "shop", Name: "web", Phase: phase,
			Step:   gitsync.StepState{Current: step, Total: 3, State: state},
			Stable: gitsync.VersionState{Revision: stable}, Canary: gitsync.VersionState{Revision: canary, Images: []string{"web=web:" + canary}},
			LastTransitionTime: at(h)}
		if awaiting > 0 {
			s.AwaitingApproval = &gitsync.AwaitingApproval{Revision: canary, Step: awaiting,
				Branch: gitsync.ApprovalBranch("shop", "web", gitsync.Approval{Revision: canary, Step: awaiting}), Since: at(h)}
		}
		for _, a := range approved {
			s.Approvals = append(s.Approvals, gitsync.Approval{Revision: canary, Step: a})
		}
		versions = append(versions, gitsync.StatusVersion{Time: at(h), State: s})
	}
	add(1, "Progressing", "s0", "b2", 1, "StepUpgrade", 0)
	add(2, "Failed", "s0", "b2", 1, "RollingBack", 0)
	add(3, "Progressing", "s0", "a1", 1, "StepUpgrade", 0)
	add(4, "Progressing", "s0", "a1", 2, "StepPaused", 2)
	add(5, "Progressing", "s0", "a1", 2, "StepReady", 0, 2)
	add(6, "Progressing", "s0", "a1", 3, "StepPaused", 3, 2)
	add(7, "Healthy", "a1", "a1", 3, "Completed", 0, 2, 3)
	add(8, "Progressing", "a1", "c3", 2, "StepPaused", 2)
	url := writeStatusHistory(t, versions)

	args := []string{"history", "shop/web", "--repo", url, "--since", "24h", "--until", "2026-03-02T12:00:00Z"}
	out, code := run(t, "", args...)
	if code != exitOK {
		t.Fatalf("history: exit %d\n%s", code, out)
	}
	for _, want := range []string{
		"Rollout shop/web: 8 versions of its status file in 8 commits of rollgate/status at ",
		"RELEASE b2 (stable s0): RolledBack 2026-03-01T14:00:00Z",
		"revert: no revert branch on the remote (the status file does not record it)",
		"RELEASE a1 (stable s0): Released 2026-03-01T19:00:00Z",
		"  images: web=web:a1\n  first seen 2026-03-01T15:00:00Z; source commit not recorded\n",
		"  2/3   2026-03-01T16:00:00Z  2026-03-01T18:00:00Z  StepPaused > StepReady\n",
		"  2     2026-03-01T16:00:00Z  2026-03-01T17:00:00Z  2026-03-01T17:00:00Z  approval in spec.approvals; branch rollgate/approve/shop/web/",
		"approver: not recorded",
		"RELEASE c3 (stable a1): InProgress\n",
		"DORA from 2026-03-01T12:00:00Z to 2026-03-02T12:00:00Z (1.0 days):",
		"deployment frequency  1.00 releases/day",
		"lead time             4.00 hours (median)",
		"from 1 releases (0 from the source commit's time, 1 from the first status version)",
		"change failure rate   50.00 % of finished releases",
		"from 2 releases",
		"time to restore       5.00 hours (median)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text output lacks %q:\n%s", want, out)
		}
	}

	out, code = run(t, "", append(args, "-o", "json")...)
	if code != exitOK {
		t.Fatalf("history -o json: exit %d\n%s", code, out)
	}
	var got historyOutput
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("history -o json: %v\n%s", err, out)
	}
	rels := got.History.Releases
	if len(rels) != 3 || rels[0].Outcome != gitsync.OutcomeRolledBack || rels[1].Outcome != gitsync.OutcomeReleased ||
		rels[2].Outcome != gitsync.OutcomeInProgress || len(rels[1].Gates) != 2 || rels[2].Gates[0].How != "waiting; branch "+rels[2].Gates[0].Branch+"; approver: not recorded" {
		t.Fatalf("history -o json releases:\n%s", out)
	}
	if f := got.DORA.ChangeFailureRate; f.Value == nil || *f.Value != 50 || f.Count != 2 || f.Unit != "% of finished releases" {
		t.Fatalf("change failure rate = %+v", f)
	}
	for _, key := range []string{`"history": {`, `"releases": [`, `"dora": {`, `"deploymentFrequency": {`, `"leadTime": {`, `"timeToRestore": {`} {
		if !strings.Contains(out, key) {
			t.Errorf("json lacks %s", key)
		}
	}

	if out, code := run(t, "", "history", "shop/nope", "--repo", url, "--since", "0"); code != exitNotFound || !strings.Contains(out, "no status for Rollout shop/nope in Git") {
		t.Errorf("history of an unknown Rollout: exit %d, want %d\n%s", code, exitNotFound, out)
	}
	if _, code := run(t, "", "history", "web", "--repo", url); code != exitUsage {
		t.Errorf("history web: exit %d, want %d", code, exitUsage)
	}
	if _, code := run(t, "", "history", "shop/web", "--repo", url, "-o", "yaml"); code != exitUsage {
		t.Errorf("history -o yaml: exit %d, want %d", code, exitUsage)
	}
}
