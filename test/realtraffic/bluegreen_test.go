package realtraffic

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/prom"
	"github.com/rollgate/rollgate/test/realnode"
)

// blueGreenRollout: step 1 brings up every new (preview) pod beside the old
// ones with no traffic, analyses the gateway and waits at a gate; step 2
// switches all traffic, analyses again and waits at a second gate, where a
// release can still be aborted.
func blueGreenRollout() string {
	return echoserverRollout(true, `      steps:
      - {replicas: "100%", traffic: "0%", analysis: {templates: [gateway-errors]}, pause: {}}
      - {replicas: "100%", traffic: "100%", analysis: {templates: [gateway-errors]}, pause: {}}
`+echoserverRoute)
}

// gatewayErrorsQuery is the share of requests through Traefik's web entry
// point answered with a 5xx over the last 20 s, as Traefik counted them.
const gatewayErrorsQuery = `(sum(rate(traefik_entrypoint_requests_total{entrypoint="web",code=~"5.."}[20s])) or vector(0))` +
	` / sum(rate(traefik_entrypoint_requests_total{entrypoint="web"}[20s]))`

// gatewayErrors is the AnalysisTemplate of blueGreenRollout: the gateway's
// error rate, from a real Prometheus scraping Traefik, queried by the
// controller's pod.
func gatewayErrors(promURL string) string {
	return fmt.Sprintf(`
apiVersion: rollgate.dev/v1alpha1
kind: AnalysisTemplate
metadata: {name: gateway-errors, namespace: demo}
spec:
  metrics:
  - name: gateway-errors
    interval: 2s
    initialDelay: 2s
    count: 2
    failureLimit: 0
    successCondition: "result[0] < 0.01"
    provider:
      prometheus:
        address: %q
        query: %q
        timeout: 5s
`, promURL, gatewayErrorsQuery)
}

// TestBlueGreenUnderLoad: a blue-green release on the real node under 150
// requests/s through Traefik, its analysis reading Traefik's own metrics
// from a real Prometheus. v2's preview pods come up beside v1's with no
// traffic (the preview Service answers with v2 only); the analysis passes;
// the approval merged in Git switches all traffic at once; the second gate
// is approved and the release completes. Then v3 is switched to and
// aborted after the switch: traffic returns to v2, whose pods never left.
// Every 1,000-request window after a step is reported done shows exactly
// the declared version; no request fails over the whole story.
func TestBlueGreenUnderLoad(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	var p *prom.Server
	w := newWorldOf(t, ctx, worldOptions{rollout: blueGreenRollout(), extra: func(w *world) string {
		p = prom.Start(t, prom.Options{Targets: []string{fmt.Sprintf("127.0.0.1:%d", w.metricsPort)}, Host: realnode.NodeIP})
		return gatewayErrors(p.URL)
	}})
	l := startLoad(w.url, rate, nil)
	defer l.stop()
	w.waitQuery(ctx, p.URL, gatewayErrorsQuery)
	measure := func(name, version string, declared float64) {
		t.Helper()
		tl := count(l.since(ctx, l.mark(), perWindow), false)
		got := tl.share(version)
		t.Logf("%-34s %5d requests, %s %.1f%% (declared %.0f%%), by version %v, failed %d", name, tl.total, version, got, declared, tl.byVersion, tl.failed)
		if got != declared {
			t.Errorf("%s: %s answered %.1f%% of %d requests, declared %.0f%% (blue-green is all or nothing)", name, version, got, tl.total, declared)
		}
	}

	// Release v2: the preview at the gate of step 1.
	stable := w.rollout(ctx).Status.StableRevision
	w.ApplyYAML(app("localhost/verserver:v2", w.port()))
	ro := w.atBlueGreenGate(ctx, 1, map[string]int32{"v1": 5, "v2": 5})
	v2 := ro.Status.CanaryRevision
	measure("v2 preview (step 1), declared 0%", "v2", 0)
	w.assertPreview(ctx, "v2")

	// The approval merged in Git switches all traffic to v2.
	w.approveInGit(ctx)
	w.atBlueGreenGate(ctx, 2, map[string]int32{"v1": 5, "v2": 5})
	switched := l.mark()
	measure("v2 switched (step 2), declared 100%", "v2", 100)

	// The second approval completes the release. Once switched, v1 gets
	// no request again: not while its pods shut down, not when the
	// declared routes come back.
	w.approveInGit(ctx)
	w.waitHealthy(ctx, stable, v2)
	w.waitPods(ctx, "v2 on the 5 pods, v1's gone", map[string]int32{"v2": 5})
	measure("v2 after completion", "v2", 100)
	if after := count(l.since(ctx, switched, 0), false); after.byVersion["v1"] > 0 {
		t.Errorf("v1 answered %d of %d requests after the switch to v2, while the release finished", after.byVersion["v1"], after.total)
	}

	// Release v3, switched to, then aborted after the switch.
	w.ApplyYAML(app("localhost/verserver:v3", w.port()))
	ro = w.atBlueGreenGate(ctx, 1, map[string]int32{"v2": 5, "v3": 5})
	v3 := ro.Status.CanaryRevision
	measure("v3 preview (step 1), declared 0%", "v3", 0)
	w.approveInGit(ctx)
	w.atBlueGreenGate(ctx, 2, map[string]int32{"v2": 5, "v3": 5})
	measure("v3 switched (step 2), declared 100%", "v3", 100)
	declared, err := w.git.ReadFile("app", "main", rolloutPath)
	if err != nil {
		t.Fatal(err)
	}
	w.ApplyYAML(declared + fmt.Sprintf("  abort: {revision: %q, reason: realtraffic aborts v3 after the switch}\n", v3))
	w.Until(ctx, 3*time.Minute, "v3 rolled back to v2", func() (bool, string) {
		ro := w.rollout(ctx)
		pods, _, err := w.census(ctx)
		return err == nil && ro.Status.Phase == v1alpha1.PhaseFailed && ro.Status.CanaryWeight == 0 && fmt.Sprint(pods) == fmt.Sprint(map[string]int32{"v2": 5}),
			fmt.Sprintf("pods %v; %s", pods, describe(ro))
	})
	measure("after v3's abort", "v3", 0)

	l.stop()
	all := count(l.all(), false)
	t.Logf("whole story: %d requests, %d failed, by version %v; Traefik's services: %s", all.total, all.failed, all.byVersion, traefikServices(ctx, p.URL))
	if all.failed > 0 {
		t.Errorf("%d of %d requests failed: %v; when (UTC, to read beside the controller's log):%s",
			all.failed, all.total, topErrors(all.errs), burstsAt(l.all()))
	}
}

// atBlueGreenGate waits until the release waits for approval at step with
// pods running (ready, by version) and the step's analysis passed.
func (w *world) atBlueGreenGate(ctx context.Context, step int32, pods map[string]int32) *v1alpha1.Rollout {
	w.T.Helper()
	var ro *v1alpha1.Rollout
	w.Until(ctx, 3*time.Minute, fmt.Sprintf("the gate of step %d with pods %v", step, pods), func() (bool, string) {
		ro = w.rollout(ctx)
		got, _, err := w.census(ctx)
		if ro.Status.Phase == v1alpha1.PhaseFailed {
			w.T.Fatalf("the release failed: %s", describe(ro))
		}
		return err == nil && ro.Status.AwaitingApproval != nil && ro.Status.CurrentStepIndex == step && fmt.Sprint(got) == fmt.Sprint(pods),
			fmt.Sprintf("pods %v; %s", got, describe(ro))
	})
	var passed bool
	for _, r := range ro.Status.Analysis {
		if r.Step == step && r.Phase == "Successful" && r.Successful >= 2 {
			passed = true
		}
	}
	if !passed {
		w.T.Fatalf("the gate of step %d opened before its analysis passed: %+v", step, ro.Status.Analysis)
	}
	return ro
}

// assertPreview sends 50 requests to the preview Service's ClusterIP (the
// node's kube-proxy routes it from the host): all answered by version.
func (w *world) assertPreview(ctx context.Context, version string) {
	w.T.Helper()
	var svc corev1.Service
	if err := w.C.Get(ctx, types.NamespacedName{Namespace: w.NS, Name: "echoserver-canary"}, &svc); err != nil {
		w.T.Fatalf("the preview Service: %v", err)
	}
	by := map[string]int{}
	for range 50 {
		body, err := get(fmt.Sprintf("http://%s:80/", svc.Spec.ClusterIP))
		if err != nil {
			w.T.Fatalf("the preview Service: %v", err)
		}
		by[strings.Fields(body)[0]]++
	}
	w.T.Logf("preview Service %s: 50 requests by version %v", svc.Spec.ClusterIP, by)
	if by[version] != 50 {
		w.T.Errorf("the preview Service answered %v, want %s only", by, version)
	}
}

// waitQuery waits until Prometheus answers query with a number (Traefik
// scraped twice, with load).
func (w *world) waitQuery(ctx context.Context, promURL, query string) {
	w.T.Helper()
	w.Until(ctx, time.Minute, "Prometheus answers "+query, func() (bool, string) {
		res, err := promQuery(ctx, promURL, query)
		return err == nil && len(res) > 0, fmt.Sprintf("%v %v", res, err)
	})
}

// traefikServices lists the service labels of Traefik's request counter,
// as Prometheus has them.
func traefikServices(ctx context.Context, promURL string) string {
	res, err := promQuery(ctx, promURL, `sum by (service) (traefik_service_requests_total)`)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, r := range res {
		out = append(out, fmt.Sprintf("%s=%s", r.Metric["service"], r.Value[1]))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

func promQuery(ctx context.Context, promURL, query string) ([]promSample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, promURL+"/api/v1/query?query="+url.QueryEscape(query), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Data   struct {
			Result []promSample `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, err
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("status %s", body.Status)
	}
	return body.Data.Result, nil
}
