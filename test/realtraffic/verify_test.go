package realtraffic

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/prom"
	"github.com/rollgate/rollgate/test/realnode"
)

// canaryShareQuery is the canary's share of the requests Traefik sent to
// the release's two Services over the last 20 s, in percent, from Traefik's
// own per-service counters (service label <namespace>-<service>-<port
// name>-<port>@kubernetesgateway). A canary Service that is not in the
// route has no series: 0%.
const canaryShareQuery = `100 * (sum(rate(traefik_service_requests_total{service=~"{{rollout.namespace}}-{{rollout.canaryService}}-http-.+"}[20s])) or vector(0))` +
	` / sum(rate(traefik_service_requests_total{service=~"{{rollout.namespace}}-({{rollout.stableService}}|{{rollout.canaryService}})-http-.+"}[20s]))`

// verifiedRollout routes through HTTPRoute route and verifies each step's
// share from Traefik's metrics in Prometheus at promURL.
func verifiedRollout(route, promURL string) string {
	return echoserverRollout(false, fmt.Sprintf(`      steps:
      - {traffic: "25%%", replicas: 2, pause: {}}
      - {traffic: "100%%", replicas: "100%%"}
      trafficRoutings:
      - service: echoserver
        gateway: {httpRouteName: %s}
        verify:
          prometheus: {address: %q, query: %q}
          tolerance: 5
          initialDelay: 25s
          interval: 5s
          count: 3
          failureLimit: 1
`, route, promURL, canaryShareQuery))
}

// orphanRoute is an HTTPRoute attached to a Gateway that does not exist
// (a typo, say): no data plane serves it, and none reports on it, so the
// route object takes any weight while no request follows it. (A parent
// that rejects a route says so in the route's status, which the router
// already reads: the step would hold at its traffic.)
func orphanRoute() string { return route("orphan", "pubilc") }

// TestTrafficVerifiedFromTheDataPlane: each step's share of the canary is
// measured from Traefik's own request counters (a real Prometheus scraping
// Traefik, queried by the controller's pod). Release v2 through the real
// route: the measured share matches the declared 25%, the gate opens for
// approval, the approval merged in Git lets 100% pass its verification,
// and the release completes. Release v3 through a route attached to a
// Gateway that does not exist: the route object says 25% but the data
// plane sends the canary nothing; the step holds (never reaching its gate), then fails
// with a message giving the declared and the measured share, and the
// release rolls back. No request fails.
func TestTrafficVerifiedFromTheDataPlane(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	var p *prom.Server
	w := newWorldOf(t, ctx, worldOptions{
		extra: func(w *world) string {
			p = prom.Start(t, prom.Options{Targets: []string{fmt.Sprintf("127.0.0.1:%d", w.metricsPort)}, Host: realnode.NodeIP})
			return orphanRoute()
		},
		rolloutOf: func(*world) string { return verifiedRollout("echoserver", p.URL) },
	})
	l := startLoad(w.url, rate, nil)
	defer l.stop()

	// Release v2 through the real route: verified at 25%, then 100%.
	stable := w.rollout(ctx).Status.StableRevision
	w.ApplyYAML(app("localhost/verserver:v2", w.port()))
	ro := w.waitStep(ctx, 1, 25)
	v2 := ro.Status.CanaryRevision
	share := measuredShare(t, ro, 1)
	t.Logf("v2 step 1: declared 25%%, measured by the data plane %s", share)
	tl := count(l.since(ctx, l.mark(), perWindow), false)
	t.Logf("v2 step 1: %d requests, v2 %.1f%%", tl.total, tl.share("v2"))
	w.approveInGit(ctx)
	w.waitHealthy(ctx, stable, v2)
	t.Logf("v2 step 2: declared 100%%, measured %s", measuredShare(t, w.rollout(ctx), 2))

	// Release v3 through a route no data plane serves.
	w.ApplyYAML(verifiedRollout("orphan", p.URL))
	w.ApplyYAML(app("localhost/verserver:v3", w.port()))
	var gated bool
	w.Until(ctx, 4*time.Minute, "v3's step fails its traffic verification and rolls back", func() (bool, string) {
		ro = w.rollout(ctx)
		gated = gated || ro.Status.AwaitingApproval != nil && ro.Status.AwaitingApproval.Revision != v2
		return ro.Status.Phase == v1alpha1.PhaseFailed && ro.Status.CanaryReplicas == 0 && ro.Status.CanaryWeight == 0, describe(ro)
	})
	msg := conditions.GetMessage(ro, v1alpha1.StalledCondition) + " | " + ro.Status.Message
	t.Logf("v3: %s", msg)
	if gated {
		t.Error("v3's step reached its gate before its traffic was verified")
	}
	for _, want := range []string{"declared 25%", "value 0"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the failure says %q, want it to contain %q", msg, want)
		}
	}

	l.stop()
	all := wholeStory(t, "whole story", l)
	if all.byVersion["v3"] > 0 {
		t.Errorf("%d requests answered by v3 through a route no data plane serves", all.byVersion["v3"])
	}
}

// measuredShare returns the values the step's traffic verification
// measured, failing unless it passed.
func measuredShare(t *testing.T, ro *v1alpha1.Rollout, step int32) string {
	t.Helper()
	for _, r := range ro.Status.Analysis {
		if r.Step != step || r.Template != "traffic-verification" {
			continue
		}
		if r.Phase != "Successful" {
			t.Fatalf("step %d's traffic verification is %s: %+v", step, r.Phase, r)
		}
		var vals []string
		for _, m := range r.Measurements {
			vals = append(vals, m.Value)
		}
		return strings.Join(vals, ", ") + " (" + r.Metric + ")"
	}
	t.Fatalf("step %d has no traffic verification in status.analysis: %+v", step, ro.Status.Analysis)
	return ""
}
