package traffic_test

import (
	"context"
	"errors"
	"testing"

	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/traffic"
)

func ruleTo(backends ...gatewayv1.HTTPBackendRef) gatewayv1.HTTPRouteRule {
	return gatewayv1.HTTPRouteRule{
		Matches:     []gatewayv1.HTTPRouteMatch{{Path: prefix("/")}},
		BackendRefs: backends,
	}
}

func TestHTTPRouteRules(t *testing.T) {
	otherNS := backend("web", ptr.To[int32](1))
	otherNS.Namespace = ptr.To[gatewayv1.Namespace]("elsewhere")
	headerMatch := []v1alpha1.HttpRouteMatch{{Headers: []gatewayv1.HTTPHeaderMatch{{Name: "x", Value: "1"}}}}
	manyMatches := make([]v1alpha1.HttpRouteMatch, 65)
	for i := range manyMatches {
		manyMatches[i] = headerMatch[0]
	}
	tests := []struct {
		name    string
		rules   []gatewayv1.HTTPRouteRule
		weight  int32
		matches []v1alpha1.HttpRouteMatch
		want    []string // weights of each resulting rule, "|" between rules
		err     error
	}{
		{name: "zero weight keeps the declared rule",
			rules: []gatewayv1.HTTPRouteRule{ruleTo(backend("web", ptr.To[int32](1)))}, weight: 0,
			want: []string{"web=1"}},
		{name: "single backend",
			rules: []gatewayv1.HTTPRouteRule{ruleTo(backend("web", ptr.To[int32](1)))}, weight: 25,
			want: []string{"web=75,web-canary=25"}},
		{name: "heavy weights are scaled under the CRD maximum",
			rules:  []gatewayv1.HTTPRouteRule{ruleTo(backend("web", ptr.To[int32](900_000)), backend("b", ptr.To[int32](100_000)))},
			weight: 1,
			want:   []string{"web=990000,web-canary=10000,b=111111"}},
		{name: "a Service of the same name in another namespace is not the stable one",
			rules: []gatewayv1.HTTPRouteRule{ruleTo(otherNS)}, weight: 10, err: traffic.ErrInvalid},
		{name: "out of range weight", rules: []gatewayv1.HTTPRouteRule{ruleTo(backend("web", nil))}, weight: 101,
			err: traffic.ErrInvalid},
		{name: "more matches than a rule may hold",
			rules: []gatewayv1.HTTPRouteRule{ruleTo(backend("web", ptr.To[int32](1)))}, matches: manyMatches,
			err: traffic.ErrInvalid},
		{name: "matches add a canary rule first and keep the weight out",
			rules: []gatewayv1.HTTPRouteRule{ruleTo(backend("web", ptr.To[int32](1)))}, weight: 50, matches: headerMatch,
			want: []string{"web-canary=1", "web=1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := traffic.Desired{CanaryWeight: tc.weight, Matches: tc.matches, StableService: "web", CanaryService: "web-canary"}
			got, err := traffic.HTTPRouteRules(tc.rules, "ns", d)
			if tc.err != nil {
				wantErr(t, err, tc.err)
				return
			}
			must(t, err)
			var ws []string
			for _, r := range got {
				ws = append(ws, w(r))
			}
			if !equalStrings(ws, tc.want) {
				t.Errorf("weights %v, want %v", ws, tc.want)
			}
		})
	}
}

// TestRegistry shows how a router is added without touching the caller.
func TestRegistry(t *testing.T) {
	ro := &v1alpha1.Rollout{}
	ro.Spec.Strategy.Canary = &v1alpha1.CanaryStrategy{}
	r, err := traffic.New(nil, ro, traffic.Options{})
	must(t, err)
	if done, err := r.EnsureRoutes(context.Background(), traffic.Desired{}); !done || err != nil {
		t.Errorf("no trafficRoutings: done=%v err=%v, want a router that is always done", done, err)
	}

	ro.Spec.Strategy.Canary.TrafficRoutings = []v1alpha1.TrafficRoutingRef{{Service: "web"}}
	_, err = traffic.New(nil, ro, traffic.Options{})
	wantErr(t, err, traffic.ErrInvalid)

	called := false
	mine := func(t traffic.Target) (traffic.Router, error) {
		called = t.Ref.Service == "web"
		return traffic.Sequence(), nil
	}
	if _, err := traffic.DefaultRegistry().With(mine).New(nil, ro, traffic.Options{}); err != nil || !called {
		t.Errorf("registered factory: called=%v err=%v", called, err)
	}
	boom := errors.New("boom")
	failing := func(traffic.Target) (traffic.Router, error) { return nil, boom }
	if _, err := traffic.NewRegistry(failing).New(nil, ro, traffic.Options{}); !errors.Is(err, boom) {
		t.Errorf("factory error lost: %v", err)
	}
}
