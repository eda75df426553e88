package realtraffic

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// Steps of an A/B release: requests with x-canary: yes go to the canary,
// the others stay on stable, until the approval; then 100%.
const headerSteps = `
      - matches: [{headers: [{name: x-canary, value: "yes"}]}]
        replicas: 1
        pause: {}
      - traffic: "100%"
        replicas: "100%"`

// TestHeaderMatchUnderLoad: at a header-match step, every request carrying
// the header is answered by the canary and none without it, under
// continuous load through Traefik, also while the application is re-applied
// from Git every second (Argo CD's server-side apply, then full-object
// updates); after the approval the release completes
// without a failed request.
func TestHeaderMatchUnderLoad(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	w := newWorld(t, ctx, headerSteps)
	l := startLoad(w.url, rate, http.Header{"X-Canary": []string{"yes"}})
	defer l.stop()

	w.ApplyYAML(app("localhost/verserver:v2", w.port()))
	ro := w.waitStep(ctx, 1, 0)
	m := l.mark()
	// At the gate, a GitOps tool re-applies the application as Git
	// declares it (the route without the canary rule, the Service without
	// the revision selector, the Deployment unpaused) once a second: 15 s
	// as Argo CD's server-side apply with force, 15 s as a client-side
	// full-object Update. The admission webhook keeps the release's state:
	// no request may reach a version the step does not allow.
	route := w.sampleRoute(ctx)
	writes, refused := w.reapplyFromGit(ctx, app("localhost/verserver:v2", w.port()), 15*time.Second)
	samples, flat, gap := route.stop()
	t.Logf("re-applied from Git during the gate: %d writes (%d refused); HTTPRoute sampled every 50 ms: %d samples, %d without the canary rule, at most %v between two",
		writes, refused, samples, flat, gap.Round(time.Millisecond))
	// The samples must cover the whole window: how many a loaded API
	// server answers in 30 s varies (97 at load 23, fresh-clone run at
	// e19de4c), a hole of seconds would hide a re-apply.
	if gap > 3*time.Second {
		t.Errorf("the HTTPRoute went %v without a sample (%d samples in all): the re-applies were not watched throughout", gap, samples)
	}
	if flat > 0 {
		t.Errorf("%d of %d samples of the HTTPRoute lost the step's canary rule to a re-apply", flat, samples)
	}
	if refused > 0 {
		t.Errorf("%d of %d re-applies were refused: a GitOps tool would report errors", refused, writes)
	}
	// A quarter of the workers send the header: at least 1,000 of each.
	ans := l.sinceCounts(ctx, m, perWindow, perWindow)
	with, without := count(ans, true), count(ans, false)
	t.Logf("header step, with x-canary: yes:    %5d requests, v2 %.1f%%, failed %d", with.total, with.share("v2"), with.failed)
	t.Logf("header step, without the header:    %5d requests, v2 %.1f%%, failed %d", without.total, without.share("v2"), without.failed)
	if with.total < perWindow || without.total < perWindow {
		t.Errorf("measured %d requests with the header and %d without, want >= %d each", with.total, without.total, perWindow)
	}
	if with.byVersion["v2"] != with.total-with.failed {
		t.Errorf("with the header: %v, want every answer from v2", with.byVersion)
	}
	if without.byVersion["v2"] != 0 {
		t.Errorf("without the header: %v, want no answer from v2", without.byVersion)
	}

	w.approveInGit(ctx)
	w.waitHealthy(ctx, ro.Status.StableRevision, ro.Status.CanaryRevision)
	m = l.mark()
	after := count(l.since(ctx, m, perWindow*4/3+10), false)
	t.Logf("after completion, without the header: %5d requests, v2 %.1f%%", after.total, after.share("v2"))
	if after.byVersion["v1"] != 0 {
		t.Errorf("%d requests answered by v1 after completion", after.byVersion["v1"])
	}
	l.stop()
	all := count(l.all(), false)
	allWith := count(l.all(), true)
	t.Logf("whole story: %d requests without the header, %d with, failed %d", all.total, allWith.total, all.failed+allWith.failed)
	if all.failed+allWith.failed > 0 {
		t.Errorf("%d requests failed: %v%v\nwhen (UTC, to read beside the controller's log):%s", all.failed+allWith.failed, topErrors(all.errs), topErrors(allWith.errs), burstsAt(l.all()))
	}
}
