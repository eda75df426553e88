package traffic_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// TestHTTPRouteRulesCombineMatches: a step's match narrows each declared
// match, (route match) AND (step match); it never widens one.
func TestHTTPRouteRulesCombineMatches(t *testing.T) {
	typed := func(typ gatewayv1.PathMatchType, v string) *gatewayv1.HTTPPathMatch {
		return &gatewayv1.HTTPPathMatch{Type: ptr.To(typ), Value: ptr.To(v)}
	}
	header := func(name, v string, re bool) gatewayv1.HTTPHeaderMatch {
		h := gatewayv1.HTTPHeaderMatch{Name: gatewayv1.HTTPHeaderName(name), Value: v}
		if re {
			h.Type = ptr.To(gatewayv1.HeaderMatchRegularExpression)
		}
		return h
	}
	query := func(name, v string) gatewayv1.HTTPQueryParamMatch {
		return gatewayv1.HTTPQueryParamMatch{Name: gatewayv1.HTTPHeaderName(name), Value: v}
	}
	tests := []struct {
		name  string
		route gatewayv1.HTTPRouteMatch
		step  v1alpha1.HttpRouteMatch
		// want is the canary rule's match as "path|headers|query", or ""
		// for no canary rule; err for an inexpressible pair.
		want string
		err  bool
	}{
		{name: "a step path below the route's prefix narrows it",
			route: gatewayv1.HTTPRouteMatch{Path: prefix("/api")}, step: v1alpha1.HttpRouteMatch{Path: prefix("/api/v2")},
			want: "PathPrefix /api/v2||"},
		{name: "a step path outside the route's prefix makes no canary rule",
			route: gatewayv1.HTTPRouteMatch{Path: prefix("/api")}, step: v1alpha1.HttpRouteMatch{Path: prefix("/web")}},
		{name: "a step path wider than the route's prefix keeps the route's",
			route: gatewayv1.HTTPRouteMatch{Path: prefix("/api/v2")}, step: v1alpha1.HttpRouteMatch{Path: prefix("/")},
			want: "PathPrefix /api/v2||"},
		{name: "PathPrefix matches whole segments: /api is not under /ap",
			route: gatewayv1.HTTPRouteMatch{Path: prefix("/ap")}, step: v1alpha1.HttpRouteMatch{Path: prefix("/api")}},
		{name: "PathPrefix matches whole segments: /apis is not under /api",
			route: gatewayv1.HTTPRouteMatch{Path: prefix("/api")}, step: v1alpha1.HttpRouteMatch{Path: typed(gatewayv1.PathMatchExact, "/apis")}},
		{name: "a trailing slash of a prefix is ignored",
			route: gatewayv1.HTTPRouteMatch{Path: prefix("/api/")}, step: v1alpha1.HttpRouteMatch{Path: typed(gatewayv1.PathMatchExact, "/api")},
			want: "Exact /api||"},
		{name: "an exact step path inside the route's expression",
			route: gatewayv1.HTTPRouteMatch{Path: typed(gatewayv1.PathMatchRegularExpression, "/api/v[0-9]+/.*")},
			step:  v1alpha1.HttpRouteMatch{Path: typed(gatewayv1.PathMatchExact, "/api/v2/users")},
			want:  "Exact /api/v2/users||"},
		{name: "the route's expression survives a step path that covers it",
			route: gatewayv1.HTTPRouteMatch{Path: typed(gatewayv1.PathMatchRegularExpression, "/api/v[0-9]+/.*")},
			step:  v1alpha1.HttpRouteMatch{Path: prefix("/api")},
			want:  "RegularExpression /api/v[0-9]+/.*||"},
		{name: "an expression and a prefix that overlap cannot be one condition",
			route: gatewayv1.HTTPRouteMatch{Path: typed(gatewayv1.PathMatchRegularExpression, "/api/v[0-9]+/.*")},
			step:  v1alpha1.HttpRouteMatch{Path: prefix("/api/v2")}, err: true},
		{name: "the route's header is kept beside the step's",
			route: gatewayv1.HTTPRouteMatch{Headers: []gatewayv1.HTTPHeaderMatch{header("x-tenant", "a", false)}},
			step:  v1alpha1.HttpRouteMatch{Headers: []gatewayv1.HTTPHeaderMatch{header("x-canary", "yes", false)}},
			want:  "PathPrefix /|x-canary Exact yes,x-tenant Exact a|"},
		{name: "two different values of one header can never both hold",
			route: gatewayv1.HTTPRouteMatch{Headers: []gatewayv1.HTTPHeaderMatch{header("X-Tenant", "a", false)}},
			step:  v1alpha1.HttpRouteMatch{Headers: []gatewayv1.HTTPHeaderMatch{header("x-tenant", "b", false)}}},
		{name: "an exact header value inside the route's expression",
			route: gatewayv1.HTTPRouteMatch{Headers: []gatewayv1.HTTPHeaderMatch{header("x-tenant", "team-[a-z]+", true)}},
			step:  v1alpha1.HttpRouteMatch{Headers: []gatewayv1.HTTPHeaderMatch{header("X-TENANT", "team-web", false)}},
			want:  "PathPrefix /|X-TENANT Exact team-web|"},
		{name: "two header expressions cannot be one condition",
			route: gatewayv1.HTTPRouteMatch{Headers: []gatewayv1.HTTPHeaderMatch{header("x-tenant", "team-.*", true)}},
			step:  v1alpha1.HttpRouteMatch{Headers: []gatewayv1.HTTPHeaderMatch{header("x-tenant", ".*-web", true)}}, err: true},
		{name: "two different values of one query parameter can never both hold",
			route: gatewayv1.HTTPRouteMatch{QueryParams: []gatewayv1.HTTPQueryParamMatch{query("v", "1")}},
			step:  v1alpha1.HttpRouteMatch{QueryParams: []gatewayv1.HTTPQueryParamMatch{query("v", "2")}}},
		{name: "query parameter names are case-sensitive",
			route: gatewayv1.HTTPRouteMatch{QueryParams: []gatewayv1.HTTPQueryParamMatch{query("v", "1")}},
			step:  v1alpha1.HttpRouteMatch{QueryParams: []gatewayv1.HTTPQueryParamMatch{query("V", "2")}},
			want:  "PathPrefix /||V Exact 2,v Exact 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rule := gatewayv1.HTTPRouteRule{Name: ptr.To[gatewayv1.SectionName]("main"),
				Matches: []gatewayv1.HTTPRouteMatch{tc.route}, BackendRefs: []gatewayv1.HTTPBackendRef{backend("web", ptr.To[int32](1))}}
			d := traffic.Desired{Matches: []v1alpha1.HttpRouteMatch{tc.step}, StableService: "web", CanaryService: "web-canary"}
			got, err := traffic.HTTPRouteRules([]gatewayv1.HTTPRouteRule{rule}, "ns", d)
			if tc.err {
				wantErr(t, err, traffic.ErrInvalid)
				if !strings.Contains(err.Error(), `rule 0 ("main") matches[0] AND the step's matches[0]`) {
					t.Errorf("the error does not name the rule and the matches: %v", err)
				}
				return
			}
			must(t, err)
			if tc.want == "" {
				if len(got) != 1 {
					t.Fatalf("want only the declared rule, got %d rules: %s", len(got), describeMatches(got[0]))
				}
				return
			}
			if len(got) != 2 || w(got[0]) != "web-canary=1" {
				t.Fatalf("want a canary rule before the declared one, got %d rules", len(got))
			}
			if m := describeMatches(got[0]); m != tc.want {
				t.Errorf("canary match %s, want %s", m, tc.want)
			}
		})
	}
}

// describeMatches writes the matches of r as path|headers|query.
func describeMatches(r gatewayv1.HTTPRouteRule) string {
	var out []string
	for _, m := range r.Matches {
		s := ""
		if m.Path != nil {
			s = fmt.Sprintf("%s %s", ptr.Deref(m.Path.Type, ""), ptr.Deref(m.Path.Value, ""))
		}
		var hs, qs []string
		for _, h := range m.Headers {
			hs = append(hs, fmt.Sprintf("%s %s %s", h.Name, ptr.Deref(h.Type, gatewayv1.HeaderMatchExact), h.Value))
		}
		for _, q := range m.QueryParams {
			qs = append(qs, fmt.Sprintf("%s %s %s", q.Name, ptr.Deref(q.Type, gatewayv1.QueryParamMatchExact), q.Value))
		}
		out = append(out, s+"|"+strings.Join(hs, ",")+"|"+strings.Join(qs, ","))
	}
	return strings.Join(out, " OR ")
}
