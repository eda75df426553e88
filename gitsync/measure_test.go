package gitsync_test

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/test/gitserver"
)

// latencies summarizes durations as "min / median / max".
func latencies(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	r := func(d time.Duration) time.Duration { return d.Round(100 * time.Microsecond) }
	return fmt.Sprintf("%v / %v / %v (n=%d)", r(s[0]), r(s[len(s)/2]), r(s[len(s)-1]), len(s))
}

// TestMeasureMergeToSeen measures, on loopback, the time from a merge of
// an approval branch on the server to ApprovalsIn seeing the approval in
// a LocalSnapshot after a Fetch: the Git part of how fast an approval
// releases a gate (the reconciler adds its fetch interval, or nothing
// after a push webhook).
func TestMeasureMergeToSeen(t *testing.T) {
	manifest, err := os.ReadFile("testdata/approve-create-list/before.yaml")
	if err != nil {
		t.Fatal(err)
	}
	srv := gitserver.Start(t, gitserver.Options{})
	url, err := srv.CreateRepo("app", map[string]string{rolloutPath: string(manifest)})
	if err != nil {
		t.Fatal(err)
	}
	repo := openRepo(t, gitsync.Options{URL: url})
	if err := repo.Fetch(ctx(t), "main"); err != nil {
		t.Fatal(err)
	}
	const rounds = 8
	var seen, polls, merges []time.Duration
	for step := 1; step <= rounds; step++ {
		p, err := gitsync.ProposeApproval(ctx(t), repo, "main", rolloutPath, "demo", "echoserver", gitsync.Approval{Revision: faultRev, Step: step}, "")
		if err != nil || !p.Pushed {
			t.Fatalf("proposal = %+v, %v", p, err)
		}
		if approvedLocally(t, repo, step) {
			t.Fatal("approved before the merge")
		}
		m0 := time.Now()
		if _, err := srv.Merge("app", "main", p.Branch, "Merge approval"); err != nil {
			t.Fatal(err)
		}
		merged := time.Now()
		merges = append(merges, merged.Sub(m0))
		for n := 0; ; n++ {
			p0 := time.Now()
			if err := repo.Fetch(ctx(t), "main"); err != nil {
				t.Fatal(err)
			}
			ok := approvedLocally(t, repo, step)
			polls = append(polls, time.Since(p0))
			if ok {
				seen = append(seen, time.Since(merged))
				if n != 0 {
					t.Errorf("approval seen only after %d fetches", n+1)
				}
				break
			}
			if n > 100 {
				t.Fatal("merged approval never seen")
			}
		}
	}
	t.Logf("merge-to-seen (Fetch + LocalSnapshot + ApprovalsIn, min/median/max): %s", latencies(seen))
	t.Logf("one Fetch + LocalSnapshot + ApprovalsIn: %s; the server-side merge itself: %s", latencies(polls), latencies(merges))
}

// TestMeasureFlushLatency measures Writer.Flush with 200 Rollouts on
// loopback: every file changed, one changed, none changed.
func TestMeasureFlushLatency(t *testing.T) {
	const rollouts, rounds = 200, 5
	srv := gitserver.Start(t, gitserver.Options{})
	url, err := srv.CreateRepo("app", map[string]string{"a": "a\n"})
	if err != nil {
		t.Fatal(err)
	}
	repo := openRepo(t, gitsync.Options{URL: url})
	w := newWriter(t, repo, gitsync.WriterOptions{})
	k := 0
	flush := func(changed int) time.Duration {
		t.Helper()
		k++
		for i := range changed {
			w.Enqueue(stressState(i, k))
		}
		if changed == 0 {
			w.Enqueue(stressState(0, k-1)) // identical: pending, nothing to write
			k--
		}
		t0 := time.Now()
		res, err := w.Flush(ctx(t))
		d := time.Since(t0)
		if err != nil || len(res.Changed) != changed {
			t.Fatalf("flush of %d changed = %+v, %v", changed, res, err)
		}
		return d
	}
	for i := range rollouts {
		w.Enqueue(stressState(i, 0))
	}
	t0 := time.Now()
	if _, err := w.Flush(ctx(t)); err != nil {
		t.Fatal(err)
	}
	t.Logf("flush, %d rollouts, first (creates the branch): %v", rollouts, time.Since(t0).Round(100*time.Microsecond))
	for _, changed := range []int{rollouts, 1, 0} {
		var ds []time.Duration
		for range rounds {
			ds = append(ds, flush(changed))
		}
		t.Logf("flush, %d rollouts, %d changed (min/median/max): %s", rollouts, changed, latencies(ds))
	}
	gitFsck(t, srv)
}
