package traffic_test

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/traffic"
)

// gatewayRef routes through the HTTPRoute "web". A grace of 0 takes the
// CRD's default (3s): the tests' clock jumps over it.
func gatewayRef(grace int32) v1alpha1.TrafficRoutingRef {
	return v1alpha1.TrafficRoutingRef{
		Service: "web", GracePeriodSeconds: &grace,
		Gateway: &v1alpha1.GatewayTrafficRouting{HTTPRouteName: ptr.To("web")},
	}
}

func backend(name string, weight *int32) gatewayv1.HTTPBackendRef {
	return gatewayv1.HTTPBackendRef{BackendRef: gatewayv1.BackendRef{
		BackendObjectReference: gatewayv1.BackendObjectReference{
			Name: gatewayv1.ObjectName(name), Port: ptr.To[gatewayv1.PortNumber](80),
		},
		Weight: weight,
	}}
}

func prefix(p string) *gatewayv1.HTTPPathMatch {
	return &gatewayv1.HTTPPathMatch{Type: ptr.To(gatewayv1.PathMatchPathPrefix), Value: ptr.To(p)}
}

// createRoute declares an HTTPRoute with three rules: everything to "web";
// /static to "assets"; /api for tenant a split 3:1 between "web" and
// "assets", with a declared header filter. It returns the route as stored
// (with the API server's defaults).
func (f *fixture) createRoute() *gatewayv1.HTTPRoute {
	f.t.Helper()
	f.createService("assets", corev1.ServiceTypeClusterIP)
	route := &gatewayv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: f.ns},
		Spec: gatewayv1.HTTPRouteSpec{
			CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "gw"}}},
			Hostnames:       []gatewayv1.Hostname{"web.example.com"},
			Rules: []gatewayv1.HTTPRouteRule{
				{BackendRefs: []gatewayv1.HTTPBackendRef{backend("web", nil)}},
				{Matches: []gatewayv1.HTTPRouteMatch{{Path: prefix("/static")}},
					BackendRefs: []gatewayv1.HTTPBackendRef{backend("assets", nil)}},
				{
					Matches: []gatewayv1.HTTPRouteMatch{{Path: prefix("/api"),
						Headers: []gatewayv1.HTTPHeaderMatch{{Name: "x-tenant", Value: "a"}}}},
					Filters: []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterRequestHeaderModifier,
						RequestHeaderModifier: &gatewayv1.HTTPHeaderFilter{Set: []gatewayv1.HTTPHeader{{Name: "x-from", Value: "gw"}}}}},
					BackendRefs: []gatewayv1.HTTPBackendRef{backend("web", ptr.To[int32](3)), backend("assets", ptr.To[int32](1))},
				},
			},
		},
	}
	must(f.t, k8s.Create(f.ctx, route))
	return f.route()
}

func (f *fixture) route() *gatewayv1.HTTPRoute {
	f.t.Helper()
	return f.get("web", &gatewayv1.HTTPRoute{}).(*gatewayv1.HTTPRoute)
}

func rulesJSON(t *testing.T, rules []gatewayv1.HTTPRouteRule) string {
	t.Helper()
	b, err := json.Marshal(rules)
	must(t, err)
	return string(b)
}

// weights lists "name=weight" of a rule's backendRefs.
func weights(r gatewayv1.HTTPRouteRule) []string {
	var out []string
	for _, b := range r.BackendRefs {
		out = append(out, string(b.Name)+"="+itoa(ptr.Deref(b.Weight, -1)))
	}
	return out
}

func itoa(i int32) string { b, _ := json.Marshal(i); return string(b) }

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestGatewayWeightsThenRestoreGivesDeclaredRules(t *testing.T) {
	f := newFixture(t, gatewayRef(0))
	declared := f.createRoute()
	r := f.router()
	for _, step := range []struct {
		weight     int32
		rule0      []string
		rule2      []string
		unchanged1 bool
	}{
		{5, []string{"web=95", "web-canary=5"}, []string{"web=285", "web-canary=15", "assets=100"}, true},
		{40, []string{"web=60", "web-canary=40"}, []string{"web=180", "web-canary=120", "assets=100"}, true},
		{100, []string{"web=0", "web-canary=100"}, []string{"web=0", "web-canary=300", "assets=100"}, true},
	} {
		f.ensure(r, desired(step.weight))
		got := f.route()
		if len(got.Spec.Rules) != 3 {
			t.Fatalf("%d%%: %d rules, want 3", step.weight, len(got.Spec.Rules))
		}
		if w := weights(got.Spec.Rules[0]); !equalStrings(w, step.rule0) {
			t.Errorf("%d%%: rule 0 weights %v, want %v", step.weight, w, step.rule0)
		}
		if w := weights(got.Spec.Rules[2]); !equalStrings(w, step.rule2) {
			t.Errorf("%d%%: rule 2 weights %v, want %v", step.weight, w, step.rule2)
		}
		if rulesJSON(t, got.Spec.Rules[1:2]) != rulesJSON(t, declared.Spec.Rules[1:2]) {
			t.Errorf("%d%%: the rule without the stable Service changed", step.weight)
		}
		if _, ok := got.Annotations[v1alpha1.AnnotationOriginal]; !ok {
			t.Errorf("%d%%: no %s annotation", step.weight, v1alpha1.AnnotationOriginal)
		}
		if held, err := traffic.ParseHeld(got.Annotations); err != nil || held == nil || held.CanaryWeight != step.weight ||
			got.Labels[traffic.LabelHeld] == "" {
			t.Errorf("%d%%: the step is not recorded for the route webhook: label %q, held %+v, %v",
				step.weight, got.Labels[traffic.LabelHeld], held, err)
		}
	}
	f.restore(r)
	got := f.route()
	if a, b := rulesJSON(t, got.Spec.Rules), rulesJSON(t, declared.Spec.Rules); a != b {
		t.Errorf("restored rules differ from the declared ones:\n got %s\nwant %s", a, b)
	}
	if _, ok := got.Annotations[v1alpha1.AnnotationOriginal]; ok {
		t.Error("Restore left the original annotation")
	}
	if _, ok := got.Annotations[traffic.AnnotationHeld]; ok || got.Labels[traffic.LabelHeld] != "" {
		t.Errorf("Restore left the held step: labels %v", got.Labels)
	}
	f.absent("web-canary", &corev1.Service{})
}

func TestGatewayMatchesAndHeaderModifier(t *testing.T) {
	f := newFixture(t, gatewayRef(0))
	declared := f.createRoute()
	d := desired(30) // ignored: matches take precedence
	d.Matches = []v1alpha1.HttpRouteMatch{
		{Headers: []gatewayv1.HTTPHeaderMatch{{Name: "x-canary", Value: "yes"}}},
		{QueryParams: []gatewayv1.HTTPQueryParamMatch{{Name: "canary", Value: "1"}}},
		{Path: prefix("/beta")},
	}
	d.RequestHeaderModifier = &gatewayv1.HTTPHeaderFilter{Set: []gatewayv1.HTTPHeader{{Name: "x-canary-by", Value: "rollgate"}}}
	f.ensure(f.router(), d)
	got := f.route().Spec.Rules
	if len(got) != 5 {
		t.Fatalf("%d rules, want 2 canary rules before the 3 declared ones:\n%s", len(got), rulesJSON(t, got))
	}
	if a, b := rulesJSON(t, got[2:]), rulesJSON(t, declared.Spec.Rules); a != b {
		t.Errorf("declared rules changed with matches:\n got %s\nwant %s", a, b)
	}
	all := got[0]
	if w := weights(all); !equalStrings(w, []string{"web-canary=1"}) {
		t.Errorf("canary rule backends %v", w)
	}
	if len(all.Matches) != 3 {
		t.Fatalf("canary rule has %d matches, want 3", len(all.Matches))
	}
	if h := all.Matches[0].Headers; len(h) != 1 || h[0].Name != "x-canary" || *h[0].Type != gatewayv1.HeaderMatchExact {
		t.Errorf("header match %+v", h)
	}
	if q := all.Matches[1].QueryParams; len(q) != 1 || q[0].Name != "canary" {
		t.Errorf("query match %+v", q)
	}
	if p := all.Matches[2].Path; p == nil || *p.Value != "/beta" {
		t.Errorf("path match %+v", p)
	}
	if len(all.Filters) != 1 || all.Filters[0].RequestHeaderModifier.Set[0].Name != "x-canary-by" {
		t.Errorf("canary rule filters %+v", all.Filters)
	}
	api := got[1] // from the declared /api rule: its conditions and filter kept
	if w := weights(api); !equalStrings(w, []string{"web-canary=3"}) {
		t.Errorf("api canary rule backends %v", w)
	}
	if len(api.Matches) != 2 {
		t.Errorf("api canary rule has %d matches, want 2 (a path under /beta is never under /api)", len(api.Matches))
	}
	m := api.Matches[0]
	if *m.Path.Value != "/api" || len(m.Headers) != 2 || m.Headers[0].Name != "x-canary" || m.Headers[1].Name != "x-tenant" {
		t.Errorf("api canary match %+v", m)
	}
	set := api.Filters[0].RequestHeaderModifier.Set
	if len(api.Filters) != 1 || len(set) != 2 {
		t.Errorf("api canary rule filter not merged: %+v", api.Filters)
	}
}

func TestGatewayEnsureTwiceWritesOnce(t *testing.T) {
	f := newFixture(t, gatewayRef(0))
	f.createRoute()
	r := f.router()
	f.ensure(r, desired(20))
	route, stable, canary := f.route(), f.service("web"), f.service("web-canary")
	for i := 0; i < 2; i++ {
		done, err := r.EnsureRoutes(f.ctx, desired(20))
		if err != nil || !done {
			t.Fatalf("EnsureRoutes again = %v, %v", done, err)
		}
	}
	if rv := f.route().ResourceVersion; rv != route.ResourceVersion {
		t.Errorf("HTTPRoute written again: resourceVersion %s -> %s", route.ResourceVersion, rv)
	}
	if rv := f.service("web").ResourceVersion; rv != stable.ResourceVersion {
		t.Errorf("stable Service written again: %s -> %s", stable.ResourceVersion, rv)
	}
	if rv := f.service("web-canary").ResourceVersion; rv != canary.ResourceVersion {
		t.Errorf("canary Service written again: %s -> %s", canary.ResourceVersion, rv)
	}
}

func TestGatewayNewRouterContinuesFromSavedOriginal(t *testing.T) {
	f := newFixture(t, gatewayRef(0))
	declared := f.createRoute()
	f.ensure(f.router(), desired(40))
	at40 := f.route()

	// A restarted controller builds a new Router: same step, no write.
	f.ensure(f.router(), desired(40))
	if rv := f.route().ResourceVersion; rv != at40.ResourceVersion {
		t.Errorf("a new Router rewrote the same step: %s -> %s", at40.ResourceVersion, rv)
	}
	// The next step is computed from the declared rules, not from 40%.
	f.ensure(f.router(), desired(10))
	if w := weights(f.route().Spec.Rules[0]); !equalStrings(w, []string{"web=90", "web-canary=10"}) {
		t.Errorf("10%% after 40%% gives %v", w)
	}
	f.restore(f.router())
	if a, b := rulesJSON(t, f.route().Spec.Rules), rulesJSON(t, declared.Spec.Rules); a != b {
		t.Errorf("restore from a new Router:\n got %s\nwant %s", a, b)
	}
}

func TestGatewayTakesRulesReappliedFromGitAsDeclared(t *testing.T) {
	f := newFixture(t, gatewayRef(0))
	declared := f.createRoute()
	f.ensure(f.router(), desired(40))

	// A GitOps sync writes the rules from Git, with a new timeout on rule 0.
	route := f.route()
	route.Spec.Rules = declared.DeepCopy().Spec.Rules
	route.Spec.Rules[0].Timeouts = &gatewayv1.HTTPRouteTimeouts{Request: ptr.To[gatewayv1.Duration]("10s")}
	must(t, k8s.Update(f.ctx, route))
	fromGit := f.route().Spec.Rules

	f.ensure(f.router(), desired(40))
	got := f.route().Spec.Rules
	if got[0].Timeouts == nil || w(got[0]) != "web=60,web-canary=40" {
		t.Errorf("step not re-asserted on the rules from Git: %s", rulesJSON(t, got[:1]))
	}
	f.restore(f.router())
	if a, b := rulesJSON(t, f.route().Spec.Rules), rulesJSON(t, fromGit); a != b {
		t.Errorf("restore did not keep the rules from Git:\n got %s\nwant %s", a, b)
	}
}

func w(r gatewayv1.HTTPRouteRule) string {
	out := ""
	for i, s := range weights(r) {
		if i > 0 {
			out += ","
		}
		out += s
	}
	return out
}

func TestGatewayDoneWhenParentsAccept(t *testing.T) {
	f := newFixture(t, gatewayRef(0))
	f.createRoute()
	route := f.route()
	f.setAccepted(route, metav1.ConditionTrue, route.Generation)
	r := f.router()

	done, err := f.step(r, desired(10))
	must(t, err)
	if done {
		t.Fatal("done before the Gateway accepted the new generation")
	}
	route = f.route()
	f.setAccepted(route, metav1.ConditionTrue, route.Generation)
	if done, err := f.step(r, desired(10)); err != nil || !done {
		t.Fatalf("after acceptance: done=%v err=%v", done, err)
	}
	f.setAccepted(f.route(), metav1.ConditionFalse, route.Generation)
	_, err = f.step(r, desired(10))
	wantErr(t, err, traffic.ErrRejected)

	// Accepted, but a backend (the canary Service) cannot be resolved: its
	// share of requests would fail, so the step is not done.
	route = f.route()
	f.setAccepted(route, metav1.ConditionTrue, route.Generation)
	route = f.route()
	meta.SetStatusCondition(&route.Status.Parents[0].Conditions, metav1.Condition{
		Type: string(gatewayv1.RouteConditionResolvedRefs), Status: metav1.ConditionFalse, ObservedGeneration: route.Generation,
		Reason: string(gatewayv1.RouteReasonBackendNotFound), Message: "service web-canary not found",
	})
	must(t, k8s.Status().Update(f.ctx, route))
	_, err = f.step(r, desired(10))
	wantErr(t, err, traffic.ErrRejected)
	if !strings.Contains(err.Error(), "BackendNotFound") {
		t.Errorf("the error must name the reason: %v", err)
	}
	// Resolved again: done.
	route = f.route()
	meta.SetStatusCondition(&route.Status.Parents[0].Conditions, metav1.Condition{
		Type: string(gatewayv1.RouteConditionResolvedRefs), Status: metav1.ConditionTrue, ObservedGeneration: route.Generation,
		Reason: string(gatewayv1.RouteReasonResolvedRefs), Message: "ok",
	})
	must(t, k8s.Status().Update(f.ctx, route))
	if done, err := f.step(r, desired(10)); err != nil || !done {
		t.Fatalf("after the backend resolved: done=%v err=%v", done, err)
	}
}

func (f *fixture) setAccepted(route *gatewayv1.HTTPRoute, status metav1.ConditionStatus, gen int64) {
	f.t.Helper()
	route.Status.Parents = []gatewayv1.RouteParentStatus{{
		ParentRef:      gatewayv1.ParentReference{Name: "gw"},
		ControllerName: "example.com/gateway",
	}}
	meta.SetStatusCondition(&route.Status.Parents[0].Conditions, metav1.Condition{
		Type: string(gatewayv1.RouteConditionAccepted), Status: status, ObservedGeneration: gen,
		Reason: "Test", Message: "set by the test",
	})
	must(f.t, k8s.Status().Update(f.ctx, route))
}

func TestGatewayErrors(t *testing.T) {
	f := newFixture(t, gatewayRef(0))
	_, err := f.step(f.router(), desired(10))
	wantErr(t, err, traffic.ErrRouteNotFound)

	route := &gatewayv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: f.ns},
		Spec: gatewayv1.HTTPRouteSpec{Rules: []gatewayv1.HTTPRouteRule{
			{BackendRefs: []gatewayv1.HTTPBackendRef{backend("other", nil)}},
		}},
	}
	must(t, k8s.Create(f.ctx, route))
	_, err = f.step(f.router(), desired(10))
	wantErr(t, err, traffic.ErrInvalid)
}
