package traffic_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/rollgate/rollgate/traffic"
)

// mirrored is desired with percent of requests copied to the canary.
func mirrored(percent int32) traffic.Desired {
	d := desired(0)
	d.MirrorPercent = percent
	return d
}

// mirrors describes the RequestMirror filters of a rule as
// "service:port/percent".
func mirrors(r gatewayv1.HTTPRouteRule) string {
	var out []string
	for _, f := range r.Filters {
		if f.Type == gatewayv1.HTTPRouteFilterRequestMirror && f.RequestMirror != nil {
			m := f.RequestMirror
			out = append(out, fmt.Sprintf("%s:%d/%d", m.BackendRef.Name, ptr.Deref(m.BackendRef.Port, 0), ptr.Deref(m.Percent, -1)))
		}
	}
	return strings.Join(out, ",")
}

// TestGatewayMirrorStepThenAbortAndRestore: a mirror step keeps every
// rule's backendRefs as declared (stable answers every request) and adds
// to each rule that reaches the stable Service a RequestMirror filter
// copying 30% of its requests to the canary Service on the stable port;
// the held step records the mirror for the route webhook. Going back to
// stable (an abort) removes the filters, and Restore gives the declared
// rules back and deletes the canary Service.
func TestGatewayMirrorStepThenAbortAndRestore(t *testing.T) {
	f := newFixture(t, gatewayRef(0))
	declared := f.createRoute()
	r := f.router()
	f.ensure(r, mirrored(30))
	got := f.route()
	if len(got.Spec.Rules) != 3 {
		t.Fatalf("%d rules, want the 3 declared", len(got.Spec.Rules))
	}
	for i, want := range []struct{ weights, mirrors string }{
		{"web=1", "web-canary:80/30"},
		{"assets=1", ""},
		{"web=3,assets=1", "web-canary:80/30"},
	} {
		rule := got.Spec.Rules[i]
		if w(rule) != want.weights || mirrors(rule) != want.mirrors {
			t.Errorf("rule %d: backendRefs %s, mirrors %q; want backendRefs %s (as declared), mirrors %q",
				i, w(rule), mirrors(rule), want.weights, want.mirrors)
		}
	}
	if n := len(got.Spec.Rules[2].Filters); n != 2 {
		t.Errorf("rule 2 has %d filters, want its declared header filter and the mirror", n)
	}
	if held, err := traffic.ParseHeld(got.Annotations); err != nil || held == nil || held.Mirror != 30 || held.CanaryWeight != 0 {
		t.Errorf("held step %+v (%v), want mirror 30 and weight 0", held, err)
	}
	f.get("web-canary", &corev1.Service{})

	f.ensure(r, desired(0))
	if a, b := rulesJSON(t, f.route().Spec.Rules), rulesJSON(t, declared.Spec.Rules); a != b {
		t.Errorf("back to stable, the rules differ from the declared ones:\n got %s\nwant %s", a, b)
	}
	f.restore(r)
	if a, b := rulesJSON(t, f.route().Spec.Rules), rulesJSON(t, declared.Spec.Rules); a != b {
		t.Errorf("restored rules differ from the declared ones:\n got %s\nwant %s", a, b)
	}
	f.absent("web-canary", &corev1.Service{})
}

// TestMirrorWaitsForTheCanaryService: copies go to the canary Service only
// once it has a ready endpoint; until then the step waits with a message
// naming the Service, and the route carries no mirror.
func TestMirrorWaitsForTheCanaryService(t *testing.T) {
	f := newFixture(t, gatewayRef(3))
	f.createRoute()
	f.opts.Endpoints = k8s
	r := f.router()
	var err error
	for range 3 {
		_, err = r.EnsureRoutes(f.ctx, mirrored(30))
		if d, ok := traffic.RetryAfter(err); ok && !strings.Contains(err.Error(), "no ready endpoint") {
			f.clock.Advance(d)
			continue
		}
		break
	}
	want := fmt.Sprintf("Service %s/web-canary has no ready endpoint", f.ns)
	if _, wait := traffic.RetryAfter(err); !wait || !strings.Contains(fmt.Sprint(err), want) {
		t.Fatalf("EnsureRoutes of a mirror step without a ready canary endpoint: %v, want a wait naming %q", err, want)
	}
	for i, rule := range f.route().Spec.Rules {
		if m := mirrors(rule); m != "" {
			t.Errorf("rule %d mirrors to %s before the canary Service has a ready endpoint", i, m)
		}
	}
}

// TestIngressRouterRefusesMirror: the Ingress dialects cannot copy
// requests; a mirror step fails naming the field instead of running
// without copies, and writes no canary Ingress.
func TestIngressRouterRefusesMirror(t *testing.T) {
	f := newFixture(t, ingressRef("nginx"))
	f.createIngress()
	_, err := f.step(f.router(), mirrored(30))
	if !errors.Is(err, traffic.ErrInvalid) || !strings.Contains(fmt.Sprint(err), "steps[].mirror") {
		t.Fatalf("EnsureRoutes of a mirror step through an Ingress: %v, want ErrInvalid naming steps[].mirror", err)
	}
	t.Logf("refused: %v", err)
	f.absent("web-canary", &networkingv1.Ingress{})
}
