package realtraffic

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/repo"
)

// The Lua stories: requests through Traefik's own resources (an
// IngressRoute, a TraefikService), which no Gateway API router knows and
// rollgate shifts only through Lua scripts: the built-in ones, and a
// user's own from the controller's ConfigMap.

// traefikServiceApp routes every request through an IngressRoute to the
// weighted TraefikService echoserver-wrr, whose one entry is the
// application's Service: the TraefikService is what the release shifts.
func traefikServiceApp(image string, _ int) string {
	return workload(image) + `
---
apiVersion: traefik.io/v1alpha1
kind: TraefikService
metadata: {name: echoserver-wrr, namespace: demo}
spec:
  weighted:
    services:
    - {name: echoserver, port: 80}
---` + ingressRoute("{name: echoserver-wrr, kind: TraefikService}")
}

// ingressRouteApp routes every request through an IngressRoute straight to
// the application's Service: the IngressRoute is what the release shifts.
func ingressRouteApp(image string, _ int) string {
	return workload(image) + "\n---" + ingressRoute("{name: echoserver, port: 80}")
}

// ingressRoute is IngressRoute echoserver, sending every request of the
// web entry point to service, a YAML flow mapping. It starts with a
// newline.
func ingressRoute(service string) string {
	return `
apiVersion: traefik.io/v1alpha1
kind: IngressRoute
metadata: {name: echoserver, namespace: demo}
spec:
  entryPoints: [web]
  routes:
  - match: PathPrefix(` + "`/`" + `)
    kind: Rule
    services:
    - ` + service + `
`
}

// luaRollout is rollout routing through the custom resource kind/name (a
// customNetworkRefs entry) instead of the HTTPRoute.
func luaRollout(steps, kind, name string) string {
	return strings.Replace(rollout(steps), "        gateway: {httpRouteName: echoserver}\n",
		"        customNetworkRefs:\n        - {apiVersion: traefik.io/v1alpha1, kind: "+kind+", name: "+name+"}\n", 1)
}

// window measures perWindow requests (with or without the load's header)
// from now on, prints them, and checks version's share against declared
// within tolerance.
func window(t *testing.T, ctx context.Context, l *load, withHeader bool, name, version string, declared float64) tally {
	t.Helper()
	tl := count(sinceWindow(ctx, l, l.mark(), withHeader), withHeader)
	got := tl.share(version)
	t.Logf("%-46s %5d requests (%.0f/s), %s %.1f%% (declared %.0f%%), failed %d", name, tl.total, tl.rate, version, got, declared, tl.failed)
	if tl.total < perWindow {
		t.Errorf("%s: %d requests measured, want >= %d", name, tl.total, perWindow)
	}
	if got < declared-tolerance || got > declared+tolerance {
		t.Errorf("%s: %s answered %.1f%% of %d requests, declared %.0f%% (±%.0f)", name, version, got, tl.total, declared, tolerance)
	}
	return tl
}

// sinceWindow waits for perWindow answers of the kind asked after mark
// (with the header or without; see sinceCounts) and returns every answer
// recorded after mark.
func sinceWindow(ctx context.Context, l *load, mark int, withHeader bool) []answer {
	if withHeader {
		return l.sinceCounts(ctx, mark, perWindow, 0)
	}
	return l.sinceCounts(ctx, mark, 0, perWindow)
}

// traefikServiceScript orders the stories by the script that shifts their
// TraefikService. The controller's ConfigMap of user scripts is one for
// the whole package, and TestTraefikServiceThroughLua puts a user's own
// TraefikService script in it: a story beside it that meant the built-in
// script would run the user's. On 2026-12-02 the sticky story's step 2 ran
// the Kruise-style user script, which sets no sticky cookie, and was
// refused ("split requests without spec.weighted.sticky.cookie"). The
// stories that rely on the built-in script hold it for reading
// (builtInTraefikServiceScript); the story that replaces it holds it alone
// for its whole length, before its context starts, so that no story's
// deadline runs while it waits.
var traefikServiceScript sync.RWMutex

// builtInTraefikServiceScript holds traefikServiceScript for reading
// until t ends: no user's TraefikService script is installed meanwhile.
func builtInTraefikServiceScript(t *testing.T) {
	traefikServiceScript.RLock()
	t.Cleanup(traefikServiceScript.RUnlock)
}

// setUserScript puts script under key in the controller's Lua ConfigMap
// (the chart's luaConfigMap), creating it; the test's cleanup deletes the
// ConfigMap.
func (w *world) setUserScript(ctx context.Context, key, script string) {
	w.T.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "rollgate-lua", Namespace: releaseNS}}
	err := w.C.Get(ctx, types.NamespacedName{Namespace: releaseNS, Name: cm.Name}, cm)
	switch {
	case apierrors.IsNotFound(err):
		cm.Data = map[string]string{key: script}
		err = w.C.Create(ctx, cm)
		w.T.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = w.C.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "rollgate-lua", Namespace: releaseNS}})
		})
	case err == nil:
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[key] = script
		err = w.C.Update(ctx, cm)
	}
	if err != nil {
		w.T.Fatalf("ConfigMap %s/rollgate-lua: %v", releaseNS, err)
	}
}

// kruiseScript reads a Kruise-style user script of luascripts/kruise.
func kruiseScript(t *testing.T, dir, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo.Root(), "luascripts", "kruise", dir, file))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// weightedServices reads the live TraefikService's weighted services as
// "name:weight" pairs.
func (w *world) weightedServices(ctx context.Context, name string) string {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("traefik.io/v1alpha1")
	u.SetKind("TraefikService")
	if err := w.C.Get(ctx, types.NamespacedName{Namespace: w.NS, Name: name}, u); err != nil {
		return err.Error()
	}
	services, _, _ := unstructured.NestedSlice(u.Object, "spec", "weighted", "services")
	var out []string
	for _, s := range services {
		m, _ := s.(map[string]any)
		out = append(out, fmt.Sprintf("%v:%v", m["name"], m["weight"]))
	}
	return strings.Join(out, " ")
}

// TestTraefikServiceThroughLua: under continuous load through Traefik, the
// route is a TraefikService that only the Lua script shifts. v2 is released
// by the built-in script (20% at a gate approved in Git, 60%, 100%); v3 by
// a user's own script from the controller's ConfigMap, written as a Kruise
// Rollout user writes one (luascripts/kruise/good), with the same figures;
// then v4 with a user script that swaps the weights
// (luascripts/kruise/misroute): the routing guard refuses its first step
// before anything is written, so not one request reaches v4 while its pod
// is up, and v4 is aborted and rolled back. Every window of 1,000 requests
// after a step is reported done shows the declared share within 3 points;
// no request fails over the whole story.
func TestTraefikServiceThroughLua(t *testing.T) {
	t.Parallel()
	// Its user scripts replace the built-in one for every story: none that
	// relies on it runs meanwhile. Registered first, the unlock runs after
	// setUserScript's cleanup has deleted the ConfigMap.
	traefikServiceScript.Lock()
	t.Cleanup(traefikServiceScript.Unlock)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	const ref = "echoserver-wrr"
	rollout := luaRollout(steps, "TraefikService", ref)
	w := newWorldOf(t, ctx, worldOptions{rollout: rollout, app: traefikServiceApp})
	l := startLoad(w.url, rate, nil)
	defer l.stop()
	window(t, ctx, l, false, "v1 before the release", "v2", 0)

	// release goes through the steps of steps with image, measuring each.
	release := func(version, by string) {
		t.Helper()
		stable := w.rollout(ctx).Status.StableRevision
		w.ApplyYAML(traefikServiceApp("localhost/verserver:"+version, w.port()))
		ro := w.waitStep(ctx, 1, 20)
		t.Logf("%s step 1: TraefikService %s", version, w.weightedServices(ctx, ref))
		window(t, ctx, l, false, version+" step 1, declared 20% ("+by+")", version, 20)
		w.approveInGit(ctx)
		w.waitStep(ctx, 2, 60)
		t.Logf("%s step 2: TraefikService %s", version, w.weightedServices(ctx, ref))
		window(t, ctx, l, false, version+" step 2, declared 60% ("+by+")", version, 60)
		w.waitHealthy(ctx, stable, ro.Status.CanaryRevision)
		window(t, ctx, l, false, version+" after completion ("+by+")", version, 100)
	}
	release("v2", "built-in script")

	key := "lua.traffic.routing.TraefikService.traefik.io"
	w.setUserScript(ctx, key, kruiseScript(t, "good", "TraefikService.traefik.io.lua"))
	release("v3", "user's script")

	// A user script that sends 80% to the canary at a 20% step.
	w.setUserScript(ctx, key, kruiseScript(t, "misroute", "TraefikService.traefik.io.lua"))
	w.ApplyYAML(traefikServiceApp("localhost/verserver:v4", w.port()))
	var ro *v1alpha1.Rollout
	w.Until(ctx, 3*time.Minute, "v4's first step is refused by the routing guard with its canary pod ready", func() (bool, string) {
		ro = w.rollout(ctx)
		msg := conditions.GetMessage(ro, v1alpha1.TrafficShiftedCondition)
		return conditions.IsFalse(ro, v1alpha1.TrafficShiftedCondition) && strings.Contains(msg, "refused before writing") &&
			ro.Status.CanaryReadyReplicas >= 1, describe(ro) + " | TrafficShifted: " + msg
	})
	v4 := ro.Status.CanaryRevision
	t.Logf("v4 step 1 refused: %s", conditions.GetMessage(ro, v1alpha1.TrafficShiftedCondition))
	if got := w.weightedServices(ctx, ref); got != "echoserver:<nil>" {
		t.Errorf("TraefikService %s after the refused step: %s, want it as declared (echoserver:<nil>)", ref, got)
	}
	refused := window(t, ctx, l, false, "v4 step 1 refused by the guard", "v4", 0)
	if refused.byVersion["v4"] != 0 {
		t.Errorf("%d requests reached v4 while its step was refused", refused.byVersion["v4"])
	}
	w.ApplyYAML(rollout + fmt.Sprintf("  abort: {revision: %q, reason: realtraffic aborts v4}\n", v4))
	w.waitRolledBack(ctx, v4)
	window(t, ctx, l, false, "after v4's rollback", "v4", 0)

	l.stop()
	all := wholeStory(t, "whole story", l)
	if all.byVersion["v4"] > 0 {
		t.Errorf("%d requests answered by v4, whose only step was refused", all.byVersion["v4"])
	}
}

// Steps of an A/B release through an IngressRoute: requests with
// x-canary: yes go to the canary until the approval, then 40% of all, then
// 100%.
const ingressRouteSteps = `
      - matches: [{headers: [{name: x-canary, value: "yes"}]}]
        replicas: 1
        pause: {}
      - traffic: "40%"
        replicas: "60%"
        pause: {duration: 30}
      - traffic: "100%"
        replicas: "100%"`

// TestIngressRouteThroughLua: under continuous load through Traefik, a
// quarter of it with x-canary: yes, the route is an IngressRoute that only
// the built-in Lua script shifts. At v2's header step every request with
// the header is answered by v2 and none without it; after the approval in
// Git, 40% then 100%. v3's header step is measured the same way, then v3 is
// aborted and rolled back, and nothing reaches it any more. No request
// fails over the whole story.
func TestIngressRouteThroughLua(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rollout := luaRollout(ingressRouteSteps, "IngressRoute", "echoserver")
	w := newWorldOf(t, ctx, worldOptions{rollout: rollout, app: ingressRouteApp})
	l := startLoad(w.url, rate, http.Header{"X-Canary": []string{"yes"}})
	defer l.stop()

	headerStep := func(version string) *v1alpha1.Rollout {
		t.Helper()
		w.ApplyYAML(ingressRouteApp("localhost/verserver:"+version, w.port()))
		ro := w.waitStep(ctx, 1, 0)
		with := window(t, ctx, l, true, version+" header step, with x-canary: yes", version, 100)
		without := window(t, ctx, l, false, version+" header step, without the header", version, 0)
		if with.byVersion[version] != with.total-with.failed {
			t.Errorf("with the header: %v, want every answer from %s", with.byVersion, version)
		}
		if without.byVersion[version] != 0 {
			t.Errorf("without the header: %v, want no answer from %s", without.byVersion, version)
		}
		return ro
	}

	stable := w.rollout(ctx).Status.StableRevision
	ro := headerStep("v2")
	w.approveInGit(ctx)
	w.waitStep(ctx, 2, 40)
	window(t, ctx, l, false, "v2 step 2, declared 40%, without the header", "v2", 40)
	w.waitHealthy(ctx, stable, ro.Status.CanaryRevision)
	window(t, ctx, l, false, "v2 after completion", "v2", 100)

	ro = headerStep("v3")
	v3 := ro.Status.CanaryRevision
	w.ApplyYAML(rollout + fmt.Sprintf("  abort: {revision: %q, reason: realtraffic aborts v3}\n", v3))
	w.waitRolledBack(ctx, v3)
	window(t, ctx, l, true, "after v3's rollback, with the header", "v3", 0)

	l.stop()
	all, allWith := count(l.all(), false), count(l.all(), true)
	t.Logf("whole story: %d requests without the header, %d with, failed %d", all.total, allWith.total, all.failed+allWith.failed)
	if all.failed+allWith.failed > 0 {
		t.Errorf("%d requests failed: %v%v\nwhen (UTC, to read beside the controller's log):%s", all.failed+allWith.failed, topErrors(all.errs), topErrors(allWith.errs), burstsAt(l.all()))
	}
}

// stickyRollout is luaRollout through the TraefikService echoserver-wrr
// with trafficRoutings[].sticky: the built-in script writes the sticky
// cookie on the weighted TraefikService at each weight step.
func stickyRollout() string {
	return strings.Replace(luaRollout(steps, "TraefikService", "echoserver-wrr"), "        customNetworkRefs:\n",
		"        sticky: {cookieName: rollgate-sticky}\n        customNetworkRefs:\n", 1)
}

// stickyCookie reads the live TraefikService's sticky cookie name.
func (w *world) stickyCookie(ctx context.Context, name string) string {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("traefik.io/v1alpha1")
	u.SetKind("TraefikService")
	if err := w.C.Get(ctx, types.NamespacedName{Namespace: w.NS, Name: name}, u); err != nil {
		return err.Error()
	}
	cookie, _, _ := unstructured.NestedString(u.Object, "spec", "weighted", "sticky", "cookie", "name")
	return cookie
}

// stickyClients sends n fresh clients (each with its own cookie jar) to
// url: every client's first request in turn, so that the weighted round
// robin hands out first answers in its exact proportions, then each
// client's other perClient-1 requests, 8 clients at a time; all at the
// stories' rate (an unthrottled burst of 20,000 requests starved the
// controller's pod of CPU beside the other stories). It returns the
// share of clients whose first answer came from version, the number of
// clients that were answered by more than one version, the failed
// requests, and the clients with the version each got first.
func stickyClients(t *testing.T, url, version string, n, perClient int) (share float64, switched, failed int, clients []*http.Client, first []string) {
	t.Helper()
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	clients = make([]*http.Client, n)
	first = make([]string, n)
	for i := range clients {
		<-tick.C
		jar, err := cookiejar.New(nil)
		if err != nil {
			t.Fatal(err)
		}
		clients[i] = &http.Client{Jar: jar, Timeout: 5 * time.Second}
		body, err := getWith(clients[i], url)
		if err != nil {
			failed++
			continue
		}
		first[i], _, _ = strings.Cut(body, " ")
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				bad, errs := false, 0
				for range perClient - 1 {
					<-tick.C
					body, err := getWith(clients[i], url)
					if err != nil {
						errs++
						continue
					}
					v, _, _ := strings.Cut(body, " ")
					bad = bad || v != first[i]
				}
				mu.Lock()
				failed += errs
				if bad {
					switched++
				}
				mu.Unlock()
			}
		}()
	}
	on := 0
	for i := range clients {
		if first[i] == version {
			on++
		}
		next <- i
	}
	close(next)
	wg.Wait()
	return 100 * float64(on) / float64(n), switched, failed, clients, first
}

func getWith(c *http.Client, url string) (string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s", resp.Status)
	}
	return strings.TrimSpace(string(body)), nil
}

// TestStickyCanaryThroughTraefikService: a Rollout with
// trafficRoutings[].sticky shifts a weighted TraefikService that Git
// declares without a cookie; the built-in script writes the sticky cookie
// with each weight step (one declared in Git would be kept, as the golden
// cases show): at the 20% gate, of 250 new
// clients sending 20 requests each, 20% get the canary first (±3 points)
// and not one is answered by both versions; after the approval, at 60%,
// 200 more new clients the same (4,000 requests at 150/s, within the
// step's 40 s pause); and the clients of the gate stay on the version they
// had. No request fails.
func TestStickyCanaryThroughTraefikService(t *testing.T) {
	t.Parallel()
	builtInTraefikServiceScript(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	w := newWorldOf(t, ctx, worldOptions{rollout: stickyRollout(), app: traefikServiceApp})
	check := func(step string, declared float64, n int) ([]*http.Client, []string) {
		t.Helper()
		share, switched, failed, clients, first := stickyClients(t, w.url, "v2", n, 20)
		t.Logf("%-28s %5d clients x 20 requests: %.1f%% of the clients on v2 (declared %.0f%%), %d answered by both versions, %d failed requests",
			step, n, share, declared, switched, failed)
		if share < declared-tolerance || share > declared+tolerance {
			t.Errorf("%s: %.1f%% of the clients on v2, declared %.0f%% (±%.0f)", step, share, declared, tolerance)
		}
		if switched > 0 || failed > 0 {
			t.Errorf("%s: %d clients answered by both versions, %d failed requests; want none", step, switched, failed)
		}
		return clients, first
	}
	stable := w.rollout(ctx).Status.StableRevision
	w.ApplyYAML(traefikServiceApp("localhost/verserver:v2", w.port()))
	ro := w.waitStep(ctx, 1, 20)
	cookie := w.stickyCookie(ctx, "echoserver-wrr")
	t.Logf("step 1: TraefikService %s, sticky cookie %q", w.weightedServices(ctx, "echoserver-wrr"), cookie)
	if cookie != "rollgate-sticky" {
		t.Errorf("TraefikService echoserver-wrr at step 1: sticky cookie %q, want rollgate-sticky (trafficRoutings[].sticky)", cookie)
	}
	gateClients, gateFirst := check("step 1 (gate), declared 20%", 20, 250)
	w.approveInGit(ctx)
	w.waitStep(ctx, 2, 60)
	check("step 2, declared 60%", 60, 200)
	moved := 0
	for i, c := range gateClients {
		body, err := getWith(c, w.url)
		if v, _, _ := strings.Cut(body, " "); err != nil || v != gateFirst[i] {
			moved++
		}
	}
	t.Logf("step 2: %d of the gate's %d clients answered by another version than at the gate (or failed)", moved, len(gateClients))
	if moved > 0 {
		t.Errorf("%d of the gate's clients left the version they had at the gate", moved)
	}
	w.waitHealthy(ctx, stable, ro.Status.CanaryRevision)
}
