package traffic_test

import (
	"encoding/json"
	"maps"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/luascripts"
	"github.com/rollgate/rollgate/traffic"
)

func istioRefs() v1alpha1.TrafficRoutingRef {
	return v1alpha1.TrafficRoutingRef{Service: "web", CustomNetworkRefs: []v1alpha1.ObjectRef{
		{APIVersion: "networking.istio.io/v1", Kind: "DestinationRule", Name: "web"},
		{APIVersion: "networking.istio.io/v1", Kind: "VirtualService", Name: "web"},
	}}
}

// createIstio declares a DestinationRule and a VirtualService for "web"
// and returns them as stored.
func (f *fixture) createIstio() (dr, vs *unstructured.Unstructured) {
	f.t.Helper()
	dr = f.unstructured("DestinationRule", `{"host": "web", "trafficPolicy": {"tls": {"mode": "ISTIO_MUTUAL"}}}`)
	vs = f.unstructured("VirtualService", `{"hosts": ["web.example.com"], "http": [
		{"name": "main", "route": [{"destination": {"host": "web", "port": {"number": 80}}}]},
		{"name": "docs", "route": [{"destination": {"host": "docs", "port": {"number": 80}}}]}]}`)
	return dr, vs
}

func (f *fixture) unstructured(kind, spec string) *unstructured.Unstructured {
	f.t.Helper()
	obj := &unstructured.Unstructured{Object: map[string]any{}}
	obj.SetAPIVersion("networking.istio.io/v1")
	obj.SetKind(kind)
	obj.SetName("web")
	obj.SetNamespace(f.ns)
	obj.SetLabels(map[string]string{"app": "web"})
	obj.SetAnnotations(map[string]string{"owner": "team-a"})
	var s map[string]any
	must(f.t, json.Unmarshal([]byte(spec), &s))
	obj.Object["spec"] = s
	must(f.t, k8s.Create(f.ctx, obj))
	return f.getUnstructured(kind)
}

func (f *fixture) getUnstructured(kind string) *unstructured.Unstructured {
	f.t.Helper()
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion("networking.istio.io/v1")
	obj.SetKind(kind)
	return f.get("web", obj).(*unstructured.Unstructured)
}

func specJSON(t *testing.T, obj *unstructured.Unstructured) string {
	t.Helper()
	b, err := json.Marshal(obj.Object["spec"])
	must(t, err)
	return string(b)
}

// vsDestinations lists "host=weight" of the VirtualService's http routes.
func vsDestinations(t *testing.T, vs *unstructured.Unstructured) []string {
	t.Helper()
	var spec struct {
		HTTP []struct {
			Route []struct {
				Destination struct{ Host string }
				Weight      *int
			}
		}
	}
	b, _ := json.Marshal(vs.Object["spec"])
	must(t, json.Unmarshal(b, &spec))
	var out []string
	for _, h := range spec.HTTP {
		for _, r := range h.Route {
			w := "-"
			if r.Weight != nil {
				b, _ := json.Marshal(*r.Weight)
				w = string(b)
			}
			out = append(out, r.Destination.Host+"="+w)
		}
	}
	return out
}

func TestCustomVirtualServiceThroughLua(t *testing.T) {
	f := newFixture(t, istioRefs())
	dr, vs := f.createIstio()
	r := f.router()

	f.ensure(r, desired(20))
	if got, want := vsDestinations(t, f.getUnstructured("VirtualService")), []string{"web=80", "web-canary=20", "docs=-"}; !equalStrings(got, want) {
		t.Errorf("20%%: destinations %v, want %v", got, want)
	}
	if !strings.Contains(specJSON(t, f.getUnstructured("DestinationRule")), `"canary"`) {
		t.Error("DestinationRule has no canary subset")
	}
	for _, kind := range []string{"DestinationRule", "VirtualService"} {
		u := f.getUnstructured(kind)
		if held, err := traffic.ParseHeld(u.GetAnnotations()); err != nil || held == nil || u.GetLabels()[traffic.LabelHeld] == "" {
			t.Errorf("%s: the step is not recorded for the route webhook: labels %v, held %+v, %v", kind, u.GetLabels(), held, err)
		}
	}
	f.ensure(r, desired(50))
	at50 := f.getUnstructured("VirtualService")
	if got, want := vsDestinations(t, at50), []string{"web=50", "web-canary=50", "docs=-"}; !equalStrings(got, want) {
		t.Errorf("50%% (computed from the original): %v, want %v", got, want)
	}
	f.ensure(f.router(), desired(50))
	if rv := f.getUnstructured("VirtualService").GetResourceVersion(); rv != at50.GetResourceVersion() {
		t.Errorf("same step written again: %s -> %s", at50.GetResourceVersion(), rv)
	}

	d := desired(0)
	d.Matches = []v1alpha1.HttpRouteMatch{{Headers: []gatewayv1.HTTPHeaderMatch{{Name: "X-Canary", Value: "yes"}}}}
	f.ensure(r, d)
	if got, want := vsDestinations(t, f.getUnstructured("VirtualService")), []string{"web-canary=-", "web=-", "docs=-"}; !equalStrings(got, want) {
		t.Errorf("matches: destinations %v, want %v", got, want)
	}

	// Argo CD starts tracking the VirtualService mid-release.
	tracked := f.getUnstructured("VirtualService")
	tracked.SetAnnotations(map[string]string{"owner": "team-a", "argocd.argoproj.io/tracking-id": "apps:x",
		v1alpha1.AnnotationOriginal: tracked.GetAnnotations()[v1alpha1.AnnotationOriginal]})
	must(t, k8s.Update(f.ctx, tracked))

	f.restore(r)
	if id := f.getUnstructured("VirtualService").GetAnnotations()["argocd.argoproj.io/tracking-id"]; id != "apps:x" {
		t.Errorf("Restore dropped the tracking id Argo CD set mid-release: %q", id)
	}
	vs.SetAnnotations(map[string]string{"owner": "team-a", "argocd.argoproj.io/tracking-id": "apps:x"})
	for _, before := range []*unstructured.Unstructured{dr, vs} {
		after := f.getUnstructured(before.GetKind())
		if a, b := specJSON(t, after), specJSON(t, before); a != b {
			t.Errorf("%s restored spec:\n got %s\nwant %s", before.GetKind(), a, b)
		}
		if !maps.Equal(after.GetAnnotations(), before.GetAnnotations()) {
			t.Errorf("%s restored annotations %v, want %v", before.GetKind(), after.GetAnnotations(), before.GetAnnotations())
		}
		if !maps.Equal(after.GetLabels(), before.GetLabels()) {
			t.Errorf("%s restored labels %v, want %v", before.GetKind(), after.GetLabels(), before.GetLabels())
		}
	}
}

func TestCustomScriptErrorLeavesObjectUntouched(t *testing.T) {
	f := newFixture(t, istioRefs())
	f.createIstio()
	f.opts.LuaOverrides = map[string]string{
		"lua.traffic.routing.VirtualService.networking.istio.io": "local spec = obj.data.spec\nlocal broken = nil\nreturn broken.spec\n",
	}
	before := f.getUnstructured("VirtualService")
	_, err := f.step(f.router(), desired(20))
	wantErr(t, err, traffic.ErrScript)
	if msg := err.Error(); !strings.Contains(msg, "lua.traffic.routing.VirtualService.networking.istio.io") || !strings.Contains(msg, "line 3") {
		t.Errorf("error does not name the script and line: %v", err)
	}
	if rv := f.getUnstructured("VirtualService").GetResourceVersion(); rv != before.GetResourceVersion() {
		t.Errorf("VirtualService written despite the script error: %s -> %s", before.GetResourceVersion(), rv)
	}
}

func TestCustomScriptSyntaxError(t *testing.T) {
	ref := v1alpha1.TrafficRoutingRef{Service: "web", CustomNetworkRefs: []v1alpha1.ObjectRef{
		{APIVersion: "networking.istio.io/v1", Kind: "DestinationRule", Name: "web"},
	}}
	f := newFixture(t, ref)
	f.createIstio()
	f.opts.LuaOverrides = map[string]string{"lua.traffic.routing.DestinationRule.networking.istio.io": "return {"}
	_, err := f.step(f.router(), desired(20))
	wantErr(t, err, traffic.ErrScript)
}

// TestCustomKruiseScriptMisrouteRefused: a ConfigMap script written the
// way Kruise Rollout's own VirtualService script is (-1 read as "all
// traffic") would send every request to the canary on a match step. The
// routing guard refuses the step and the VirtualService stays as it is;
// the weight step it gets right is written.
func TestCustomKruiseScriptMisrouteRefused(t *testing.T) {
	f := newFixture(t, v1alpha1.TrafficRoutingRef{Service: "web", CustomNetworkRefs: []v1alpha1.ObjectRef{
		{APIVersion: "networking.istio.io/v1", Kind: "VirtualService", Name: "web"},
	}})
	f.createIstio()
	f.opts.LuaOverrides = map[string]string{"lua.traffic.routing.VirtualService.networking.istio.io": `
spec = obj.data.spec
if obj.canaryWeight == -1 then
  obj.canaryWeight = 100
  obj.stableWeight = 0
end
` + splitRoutes("obj.stableWeight", "obj.canaryWeight")}
	d := desired(0)
	d.Matches = []v1alpha1.HttpRouteMatch{{Headers: []gatewayv1.HTTPHeaderMatch{{Name: "X-Canary", Value: "yes"}}}}
	before := f.getUnstructured("VirtualService")
	_, err := f.step(f.router(), d)
	wantErr(t, err, traffic.ErrScript)
	wantErr(t, err, luascripts.ErrMisroute)
	if msg := err.Error(); !strings.Contains(msg, `http route "main" sends 100% of its requests to the canary`) {
		t.Errorf("error does not name the route and the share: %v", err)
	}
	if rv := f.getUnstructured("VirtualService").GetResourceVersion(); rv != before.GetResourceVersion() {
		t.Errorf("VirtualService written despite the refusal: %s -> %s", before.GetResourceVersion(), rv)
	}
	f.ensure(f.router(), desired(20))
	if got, want := vsDestinations(t, f.getUnstructured("VirtualService")), []string{"web=80", "web-canary=20", "docs=-"}; !equalStrings(got, want) {
		t.Errorf("20%%: destinations %v, want %v", got, want)
	}
}

// TestCustomObjectDeletedMidStep: a customNetworkRefs object deleted in
// the middle of a release holds the step with an error naming the object
// (nothing is created in its place), and restoring (an abort) does not
// wait for it: there is nothing to put back.
func TestCustomObjectDeletedMidStep(t *testing.T) {
	f := newFixture(t, istioRefs())
	f.createIstio()
	f.ensure(f.router(), desired(20))
	must(t, k8s.Delete(f.ctx, f.getUnstructured("VirtualService")))
	_, err := f.step(f.router(), desired(40))
	wantErr(t, err, traffic.ErrRouteNotFound)
	if msg := err.Error(); !strings.Contains(msg, "VirtualService "+f.ns+"/web") {
		t.Errorf("error does not name the object: %v", err)
	}
	f.restore(f.router())
	if got := specJSON(t, f.getUnstructured("DestinationRule")); got != `{"host":"web","trafficPolicy":{"tls":{"mode":"ISTIO_MUTUAL"}}}` {
		t.Errorf("DestinationRule after restore: %s, want it as declared", got)
	}
}

// TestCustomBrokenScriptDoesNotHoldARollback: a user script that swaps
// the weights is refused by the routing guard at a 20% step; at weight 0
// (the step of a rollback or an abort) it would send everything to the
// canary, so the declared VirtualService is written instead and the
// rollback goes on.
func TestCustomBrokenScriptDoesNotHoldARollback(t *testing.T) {
	f, declared := vsWithScript(t, `
local spec = obj.data.spec
`+splitRoutes("obj.canaryWeight", "obj.stableWeight"))
	_, err := f.step(f.router(), desired(20))
	wantErr(t, err, luascripts.ErrMisroute)
	f.ensure(f.router(), desired(0))
	if got := specJSON(t, f.getUnstructured("VirtualService")); got != declared {
		t.Errorf("VirtualService at weight 0 with the broken script: %s, want the declared %s", got, declared)
	}
	f.restore(f.router())
}

// TestCustomZeroWeightWritesTheDeclaredState: at weight 0 without matches
// no script runs and the declared object is what the router writes. A
// Kruise-style script names the canary with weight 0 there, and a gateway
// such as Traefik drops a whole weighted service while one of its Services
// has no ready endpoint (the canary's, at the start of a release); at 20%
// the same script runs.
func TestCustomZeroWeightWritesTheDeclaredState(t *testing.T) {
	f, declared := vsWithScript(t, `
local spec = obj.data.spec
`+splitRoutes("obj.stableWeight", "obj.canaryWeight"))
	f.ensure(f.router(), desired(0))
	if got := specJSON(t, f.getUnstructured("VirtualService")); got != declared {
		t.Errorf("VirtualService at weight 0: %s, want the declared %s (no canary named)", got, declared)
	}
	f.ensure(f.router(), desired(20))
	if got, want := vsDestinations(t, f.getUnstructured("VirtualService")), []string{"web=80", "web-canary=20", "docs=-"}; !equalStrings(got, want) {
		t.Errorf("20%%: destinations %v, want %v", got, want)
	}
	f.restore(f.router())
}

// TestCustomZeroWeightGoesInReverse: from a weighted step back to weight 0
// (a rollback), the VirtualService goes back to its declared routes before
// the DestinationRule loses the subsets they use.
func TestCustomZeroWeightGoesInReverse(t *testing.T) {
	f := newFixture(t, istioRefs())
	f.createIstio()
	f.ensure(f.router(), desired(20))
	f.ensure(f.router(), desired(0))
	rv := func(kind string) int {
		n, err := strconv.Atoi(f.getUnstructured(kind).GetResourceVersion())
		must(t, err)
		return n
	}
	if vs, dr := rv("VirtualService"), rv("DestinationRule"); vs > dr {
		t.Errorf("at weight 0 the DestinationRule was written (resourceVersion %d) before the VirtualService (%d)", dr, vs)
	}
	f.restore(f.router())
}

// vsWithScript declares Istio's objects for "web", routes through the
// VirtualService alone and runs script (a ConfigMap override) for it; it
// returns the VirtualService's declared spec as JSON.
func vsWithScript(t *testing.T, script string) (*fixture, string) {
	f := newFixture(t, v1alpha1.TrafficRoutingRef{Service: "web", CustomNetworkRefs: []v1alpha1.ObjectRef{
		{APIVersion: "networking.istio.io/v1", Kind: "VirtualService", Name: "web"},
	}})
	f.createIstio()
	declared := specJSON(t, f.getUnstructured("VirtualService"))
	f.opts.LuaOverrides = map[string]string{"lua.traffic.routing.VirtualService.networking.istio.io": script}
	return f, declared
}

// splitRoutes is the end of a Kruise-style VirtualService script, after
// it has set spec: every route whose first destination is the stable
// Service gets stable (a Lua expression) as that destination's weight and
// a canary destination of weight canary.
func splitRoutes(stable, canary string) string {
	return `for _, rule in ipairs(spec.http) do
  if rule.route[1].destination.host == obj.stableService then
    rule.route[1].weight = ` + stable + `
    table.insert(rule.route, {destination = {host = obj.canaryService}, weight = ` + canary + `})
  end
end
return obj.data
`
}
