package traffic_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/envtest"
	"github.com/rollgate/rollgate/test/repo"
	"github.com/rollgate/rollgate/traffic"
)

// sessions describes a rule's sessionPersistence as "type:name".
func sessions(r gatewayv1.HTTPRouteRule) string {
	if r.SessionPersistence == nil {
		return ""
	}
	return fmt.Sprintf("%s:%s", ptr.Deref(r.SessionPersistence.Type, ""), ptr.Deref(r.SessionPersistence.SessionName, ""))
}

// TestHTTPRouteRulesSticky: with a sticky cookie, every rule a weight step
// splits gets a cookie-based sessionPersistence of that name; a rule that
// declares its own keeps it; rules the step does not split, a match step
// and a step of 0% get none.
func TestHTTPRouteRulesSticky(t *testing.T) {
	own := ruleTo(backend("web", nil))
	own.SessionPersistence = &gatewayv1.SessionPersistence{SessionName: ptr.To("mine"), Type: ptr.To(gatewayv1.HeaderBasedSessionPersistence)}
	declared := []gatewayv1.HTTPRouteRule{ruleTo(backend("web", nil)), ruleTo(backend("assets", nil)), own}
	d := traffic.Desired{CanaryWeight: 20, StableService: "web", CanaryService: "web-canary", StickyCookie: "rg"}
	got, err := traffic.HTTPRouteRules(declared, "ns", d)
	if err != nil {
		t.Fatal(err)
	}
	if s := []string{sessions(got[0]), sessions(got[1]), sessions(got[2])}; fmt.Sprint(s) != "[Cookie:rg  Header:mine]" {
		t.Errorf("sessionPersistence of the rules at 20%%: %q, want [Cookie:rg, none, Header:mine]", s)
	}
	for _, other := range []traffic.Desired{
		{CanaryWeight: 0, StableService: "web", CanaryService: "web-canary", StickyCookie: "rg"},
		{Matches: []v1alpha1.HttpRouteMatch{{Path: prefix("/beta")}}, StableService: "web", CanaryService: "web-canary", StickyCookie: "rg"},
	} {
		got, err := traffic.HTTPRouteRules(declared[:1], "ns", other)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range got {
			if r.SessionPersistence != nil {
				t.Errorf("weight %d, %d matches: rule %d got sessionPersistence %s", other.CanaryWeight, len(other.Matches), i, sessions(r))
			}
		}
	}
}

// stickyGatewayRef is gatewayRef with sticky sessions.
func stickyGatewayRef() v1alpha1.TrafficRoutingRef {
	ref := gatewayRef(0)
	ref.Sticky = &v1alpha1.StickySessions{CookieName: "rg"}
	return ref
}

// TestGatewayStickyRefusedWhereTheCRDDropsSessions: the suite's HTTPRoute
// CRD is Gateway API's standard channel, which has no sessionPersistence
// (the API server would drop it without a word). A sticky weight step is
// refused, naming the field and the fix, before any weight moves.
func TestGatewayStickyRefusedWhereTheCRDDropsSessions(t *testing.T) {
	f := newFixture(t, stickyGatewayRef())
	declared := f.createRoute()
	_, err := f.step(f.router(), desired(20))
	if !errors.Is(err, traffic.ErrInvalid) || !strings.Contains(fmt.Sprint(err), "sessionPersistence") ||
		!strings.Contains(fmt.Sprint(err), "remove sticky") {
		t.Fatalf("a sticky step on the standard channel's CRD: %v, want ErrInvalid naming sessionPersistence and sticky", err)
	}
	t.Logf("refused: %v", err)
	if a, b := rulesJSON(t, f.route().Spec.Rules), rulesJSON(t, declared.Spec.Rules); a != b {
		t.Errorf("the refused step changed the rules:\n got %s\nwant %s", a, b)
	}
}

// TestStickyRefusedByRoutersWithoutSessions: an Ingress, or custom
// resources without a TraefikService, cannot keep sessions: the router is
// refused, naming sticky.
func TestStickyRefusedByRoutersWithoutSessions(t *testing.T) {
	vs := v1alpha1.TrafficRoutingRef{Service: "web", CustomNetworkRefs: []v1alpha1.ObjectRef{
		{APIVersion: "networking.istio.io/v1", Kind: "VirtualService", Name: "web"}}}
	for name, ref := range map[string]v1alpha1.TrafficRoutingRef{"ingress": ingressRef("nginx"), "VirtualService": vs} {
		ref.Sticky = &v1alpha1.StickySessions{CookieName: "rg"}
		f := newFixture(t, ref)
		_, err := traffic.New(k8s, f.ro, f.opts)
		if !errors.Is(err, traffic.ErrInvalid) || !strings.Contains(fmt.Sprint(err), "sticky") {
			t.Errorf("%s with sticky: %v, want ErrInvalid naming sticky", name, err)
		}
	}
}

// TestGatewayStickyOnTheExperimentalCRD: on an API server with Gateway
// API's experimental HTTPRoute CRD (v1.6.3, which has sessionPersistence),
// a sticky weight step writes a cookie-based sessionPersistence on the
// rules it splits, records the cookie for the route webhook, and Restore
// gives the declared rules back.
func TestGatewayStickyOnTheExperimentalCRD(t *testing.T) {
	env, err := envtest.New(envtest.WithScheme(k8s.Scheme()), envtest.WithExtraCRDDirs(repo.HTTPRouteCRD("experimental")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	shared := k8s
	k8s = env.Client
	t.Cleanup(func() { k8s = shared })

	f := newFixture(t, stickyGatewayRef())
	declared := f.createRoute()
	r := f.router()
	f.ensure(r, desired(20))
	got := f.route()
	for i, want := range []string{"Cookie:rg", "", "Cookie:rg"} {
		if s := sessions(got.Spec.Rules[i]); s != want {
			t.Errorf("rule %d (%s): sessionPersistence %q, want %q", i, w(got.Spec.Rules[i]), s, want)
		}
	}
	if held, err := traffic.ParseHeld(got.Annotations); err != nil || held == nil || held.Sticky != "rg" {
		t.Errorf("held step %+v (%v), want sticky rg", held, err)
	}
	f.restore(r)
	if a, b := rulesJSON(t, f.route().Spec.Rules), rulesJSON(t, declared.Spec.Rules); a != b {
		t.Errorf("restored rules differ from the declared ones:\n got %s\nwant %s", a, b)
	}
}
