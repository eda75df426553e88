package realtraffic

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// The load and what each window must show.
const (
	rate      = 150  // requests per second through the gateway
	perWindow = 1000 // requests measured after each step is reported done
	tolerance = 3.0  // percentage points around the declared weight
)

// Steps of the release: a gate at 20% (approved by merging its branch in Git)
// then 60% for long enough to change the controller's leader and measure
// the step, then 100%.
const steps = `
      - traffic: "20%"
        replicas: 1
        pause: {}
      - traffic: "60%"
        replicas: "60%"
        pause: {duration: 60}
      - traffic: "100%"
        replicas: "100%"`

// figure is one measured window, printed at the end.
type figure struct {
	window   string
	declared float64
	tally    tally
	version  string
}

// TestReleaseUnderLoad: v1 of the sample app serves through Traefik under
// continuous load. v2 is applied as Flux applies a commit; rollgate (a pod
// installed from its chart) holds it at 20% until its approval branch is
// merged in Git (the controller reads the repository from its pod),
// then 60% (there the leader's pod is deleted: the other of the chart's two
// replicas answers every webhook call and takes over), then 100%
// and completion. Then v3 is released, rollgate itself is upgraded with
// helm at the 20% gate, and v3 is aborted and rolled back. Every window of
// 1,000 requests after a step is reported done shows the declared share
// within 3 points; no request fails over the whole story; no request is
// answered by v1 after completion, nor by v3 after the rollback.
func TestReleaseUnderLoad(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	// The Repository fetches every 10 minutes: the approval's merge is
	// seen through the push webhook.
	w := newWorldOf(t, ctx, worldOptions{rollout: rollout(steps), fetchInterval: "10m"})
	l := startLoad(w.url, rate, nil)
	t0 := time.Now()
	at := func(what string) { t.Logf("+%.2fs %s", time.Since(t0).Seconds(), what) }
	stopped := false
	defer func() {
		if !stopped {
			l.stop()
		}
	}()
	var figures []figure
	measure := func(window, version string, declared float64) {
		t.Helper()
		m := l.mark()
		ans := l.since(ctx, m, perWindow)
		tl := count(ans, false)
		figures = append(figures, figure{window: window, declared: declared, tally: tl, version: version})
		got := tl.share(version)
		t.Logf("%-34s %5d requests (%.0f/s), %s %.1f%% (declared %.0f%%), failed %d", window, tl.total, tl.rate, version, got, declared, tl.failed)
		if tl.total < perWindow {
			t.Errorf("%s: %d requests measured, want >= %d", window, tl.total, perWindow)
		}
		if got < declared-tolerance || got > declared+tolerance {
			t.Errorf("%s: %s answered %.1f%% of %d requests, declared %.0f%% (±%.0f)", window, version, got, tl.total, declared, tolerance)
		}
	}
	measure("v1 before the release", "v2", 0)

	// Release v2.
	start := time.Now()
	stable := w.rollout(ctx).Status.StableRevision
	at("apply v2")
	w.ApplyYAML(app("localhost/verserver:v2", w.port()))
	ro := w.waitStep(ctx, 1, 20)
	at("step 1 reported done")
	canary := ro.Status.CanaryRevision
	t.Logf("step 1 (20%%) reported done %s after the image bump", time.Since(start).Round(time.Millisecond))
	measure("v2 step 1, declared 20%", "v2", 20)

	// The approval: the approval branch merged in Git, and the forge's
	// push delivered to the replica that does not lead; it forwards the
	// call to the leader, which fetches at once. Without the push the
	// merge would be seen at the next fetch, 10 minutes on; 45 s leaves
	// room for a loaded node and stays under the Repository's 1-minute
	// status check.
	w.mergeApproval(ctx)
	at("approval merged in Git")
	pushed := w.pushToFollower(ctx)
	w.waitStepWithin(ctx, 2, 60, 45*time.Second)
	at("step 2 reported done")
	t.Logf("step 2 done %s after the push reached the replica that does not lead", time.Since(pushed).Round(time.Millisecond))
	w.applyDeclared(ctx)
	t.Logf("step 2 (60%%) reported done %s after the image bump", time.Since(start).Round(time.Millisecond))
	// The controller's leader loses its pod in the middle of the step; the
	// other replica serves the webhooks throughout and takes over.
	w.changeLeader(ctx)
	at("leader changed")
	measure("v2 step 2, declared 60%", "v2", 60)

	at("waiting for completion")
	w.waitHealthy(ctx, stable, canary)
	at("v2 release complete")
	t.Logf("release of v2 completed %s after the image bump", time.Since(start).Round(time.Millisecond))
	measure("v2 after completion", "v2", 100)

	// Release v3, upgrade rollgate at its gate, then abort it.
	start = time.Now()
	at("apply v3")
	w.ApplyYAML(app("localhost/verserver:v3", w.port()) + "---" + rollout(steps))
	ro = w.waitStep(ctx, 1, 20)
	at("v3 step 1 reported done")
	v3 := ro.Status.CanaryRevision
	measure("v3 step 1, declared 20%", "v3", 20)
	w.helmRun(ctx, "upgrade", release, w.chart(), "-n", releaseNS, "--reuse-values", "--set", "logLevel=debug", "--wait", "--timeout=3m")
	at("helm upgrade of rollgate at v3's gate done")
	w.waitStep(ctx, 1, 20)
	measure("v3 step 1 after helm upgrade", "v3", 20)
	w.ApplyYAML(rollout(steps) + fmt.Sprintf(`  abort: {revision: %q, reason: realtraffic aborts v3}
`, v3))
	at("abort applied")
	w.waitRolledBack(ctx, v3)
	at("v3 rolled back")
	t.Logf("v3 rolled back %s after its image bump", time.Since(start).Round(time.Millisecond))
	measure("after v3's rollback", "v3", 0)

	l.stop()
	stopped = true
	all := count(l.all(), false)
	t.Logf("whole story: %d requests, %d failed, by version %v", all.total, all.failed, all.byVersion)
	if all.failed > 0 {
		t.Errorf("%d of %d requests failed: %v\nwhen:%s", all.failed, all.total, topErrors(all.errs), bursts(l.all(), t0))
	}
	for _, f := range figures {
		if strings.HasPrefix(f.window, "v2 after completion") && f.tally.byVersion["v1"] > 0 {
			t.Errorf("%d requests answered by v1 after the release completed", f.tally.byVersion["v1"])
		}
		if strings.HasPrefix(f.window, "after v3's rollback") && f.tally.byVersion["v3"] > 0 {
			t.Errorf("%d requests answered by v3 after the rollback completed", f.tally.byVersion["v3"])
		}
	}
	fmt.Println(report(figures, all))
}

func topErrors(errs map[string]int) string {
	var keys []string
	for k := range errs {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return errs[keys[i]] > errs[keys[j]] })
	var b strings.Builder
	for i, k := range keys {
		if i == 5 {
			break
		}
		fmt.Fprintf(&b, "\n  %d× %s", errs[k], k)
	}
	return b.String()
}

func report(figures []figure, all tally) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nreal traffic through Traefik (Gateway API), %d requests in all, %d failed\n", all.total, all.failed)
	fmt.Fprintf(&b, "%-34s %8s %8s %10s %10s %s\n", "window", "requests", "req/s", "declared", "measured", "by version")
	for _, f := range figures {
		fmt.Fprintf(&b, "%-34s %8d %8.0f %9.0f%% %9.1f%% %v\n", f.window, f.tally.total, f.tally.rate, f.declared, f.tally.share(f.version), f.tally.byVersion)
	}
	return b.String()
}

// waitStep waits until the Rollout reports step n paused (its traffic and
// pods in place) at weight.
func (w *world) waitStep(ctx context.Context, n, weight int32) *v1alpha1.Rollout {
	w.T.Helper()
	return w.waitStepWithin(ctx, n, weight, 3*time.Minute)
}

// waitStepWithin is waitStep failing past limit.
func (w *world) waitStepWithin(ctx context.Context, n, weight int32, limit time.Duration) *v1alpha1.Rollout {
	w.T.Helper()
	var ro *v1alpha1.Rollout
	w.Until(ctx, limit, fmt.Sprintf("step %d at %d%% reported done", n, weight), func() (bool, string) {
		ro = w.rollout(ctx)
		st := ro.Status
		if st.Phase == v1alpha1.PhaseFailed {
			w.T.Fatalf("the release failed: %s", st.Message)
		}
		return st.CurrentStepIndex == n && st.CurrentStepState == v1alpha1.StepPaused && st.CanaryWeight == weight,
			describe(ro)
	})
	return ro
}

func (w *world) waitHealthy(ctx context.Context, stable, canary string) {
	w.T.Helper()
	w.Until(ctx, 3*time.Minute, "the release completes", func() (bool, string) {
		ro := w.rollout(ctx)
		st := ro.Status
		if st.Phase == v1alpha1.PhaseFailed {
			w.T.Fatalf("the release failed: %s", st.Message)
		}
		return st.Phase == v1alpha1.PhaseHealthy && st.StableRevision == canary && st.StableRevision != stable, describe(ro)
	})
}

func (w *world) waitRolledBack(ctx context.Context, canary string) {
	w.T.Helper()
	w.Until(ctx, 3*time.Minute, "the rollback completes", func() (bool, string) {
		ro := w.rollout(ctx)
		st := ro.Status
		return st.Phase == v1alpha1.PhaseFailed && st.CanaryWeight == 0 && st.CanaryReplicas == 0, describe(ro)
	})
}

func describe(ro *v1alpha1.Rollout) string {
	st := ro.Status
	return fmt.Sprintf("phase %s step %d/%d %s weight %d replicas stable %d canary %d, stable %s canary %s: %s", st.Phase, st.CurrentStepIndex, st.StepCount,
		st.CurrentStepState, st.CanaryWeight, st.StableReplicas, st.CanaryReplicas, st.StableRevision, st.CanaryRevision, st.Message)
}
