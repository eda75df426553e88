package luascripts

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// runDialect runs src as an Ingress script on in.
func runDialect(t *testing.T, r Runner, src string, in IngressInput) (map[string]string, error) {
	t.Helper()
	s, err := NewScript("dialect", src)
	if err != nil {
		t.Fatal(err)
	}
	return r.RunIngress(context.Background(), s, in)
}

func header(name, typ, value string) gatewayv1.HTTPHeaderMatch {
	ht := gatewayv1.HeaderMatchType(typ)
	return gatewayv1.HTTPHeaderMatch{Name: gatewayv1.HTTPHeaderName(name), Type: &ht, Value: value}
}

// TestDialectHelpers: the canary-annotation helpers of the rollgate table
// on good input.
func TestDialectHelpers(t *testing.T) {
	two := IngressInput{Weight: -1, Matches: []v1alpha1.HttpRouteMatch{
		{Headers: []gatewayv1.HTTPHeaderMatch{header("Cookie", "RegularExpression", `^(.*;\s*)?beta=always(;.*)?$`)}},
		{Headers: []gatewayv1.HTTPHeaderMatch{header("X-User", "Exact", "alice")}},
	}}
	rules := `{name = "d", path = "no paths", query = "no queries", count = "one condition"}`
	tests := []struct {
		name, src string
		in        IngressInput
		want      map[string]string
	}{
		{"withoutKeys drops prefix..key for every prefix",
			`return rollgate.withoutKeys(obj.annotations, {"a/", "b/"}, {"canary", "canary-weight"})`,
			IngressInput{Annotations: map[string]string{"a/canary": "1", "b/canary-weight": "2", "c/canary": "3", "a/other": "4"}},
			map[string]string{"c/canary": "3", "a/other": "4"}},
		{"withoutKeys with one prefix and nil annotations",
			`local out = rollgate.withoutKeys(nil, "a/", {"canary"}) out.n = tostring(next(out)) return out`,
			IngressInput{}, map[string]string{"n": "nil"}},
		{"cookieMatch on the documented forms", `
local out = {}
for i, v in ipairs({"^(.*;\\s*)?user=always(;.*)?$", "user=beta", "(^|;\\s*)x-y=1.2(;|$)", "a=b=c", "=x", ".*k=v.*"}) do
  local n, val = rollgate.cookieMatch({name = "cookie", type = "RegularExpression", value = v})
  out["c" .. i] = tostring(n) .. " " .. tostring(val)
end
out.exact = tostring(rollgate.cookieMatch({name = "Cookie", type = "Exact", value = "a=b"}))
out.other = tostring(rollgate.cookieMatch({name = "X-User", type = "RegularExpression", value = "a=b"}))
return out`, IngressInput{},
			map[string]string{"c1": "user always", "c2": "user beta", "c3": "x-y 1.2", "c4": "nil nil", "c5": "nil nil",
				"c6": "k v", "exact": "nil", "other": "nil"}},
		{"stepConditions and headerAndCookie", `
local out = {}
for c in rollgate.stepConditions(obj.matches, ` + rules + `) do
  out["m" .. c.index] = c.header.name .. " " .. tostring(c.cookie) .. " " .. tostring(c.cookieValue)
end
local h, cookie = rollgate.headerAndCookie(rollgate.stepConditions(obj.matches, ` + rules + `), "d")
out.header, out.cookie = h.name, cookie
return out`, two,
			map[string]string{"m1": "Cookie beta always", "m2": "X-User nil nil", "header": "X-User", "cookie": "beta"}},
		{"stepConditions without a query rule gives query conditions", `
local out = {}
for c in rollgate.stepConditions(obj.matches, {name = "d", path = "p", count = "c"}) do
  out.q = c.query.name .. "=" .. c.query.value
end
return out`, IngressInput{Weight: -1, Matches: []v1alpha1.HttpRouteMatch{{QueryParams: []gatewayv1.HTTPQueryParamMatch{{Name: "v", Value: "2"}}}}},
			map[string]string{"q": "v=2"}},
		{"canaryBy writes -value for Exact and -pattern for RegularExpression", `
local out = {}
rollgate.canaryBy(out, "p/", "header", "x", {type = "Exact", value = "1"}, "d")
rollgate.canaryBy(out, "p/", "query", "q", {type = "RegularExpression", value = "a.*"}, "d")
return out`, IngressInput{},
			map[string]string{"p/canary-by-header": "x", "p/canary-by-header-value": "1", "p/canary-by-query": "q", "p/canary-by-query-pattern": "a.*"}},
		{"canaryWeight: the weight, 0 without matches, nil with matches", `
return {a = rollgate.canaryWeight({weight = "5"}), b = rollgate.canaryWeight({weight = "-1"}),
  c = tostring(rollgate.canaryWeight({weight = "-1", matches = {}}))}`, IngressInput{},
			map[string]string{"a": "5", "b": "0", "c": "nil"}},
		{"headerControl", `
local out = {}
rollgate.headerControl(out, "p/", {set = {{name = "a", value = "1"}, {name = "b", value = "x y"}}, remove = {"r", "s"}})
rollgate.headerControl(out, "q/", nil)
return out`, IngressInput{},
			map[string]string{"p/request-header-control-update": "a 1\nb x y", "p/request-header-control-remove": "r,s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := runDialect(t, Runner{}, tt.src, tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tt.want) {
				t.Fatalf("got %v\nwant %v", got, tt.want)
			}
		})
	}
}

// TestDialectHelpersBadInput: a wrong argument fails the run with an error
// naming the helper and what it wanted; a step the dialect cannot express
// fails with the dialect's message at the match the loop reached.
func TestDialectHelpersBadInput(t *testing.T) {
	rules := `{name = "d", path = "no paths", query = "no queries", count = "one condition"}`
	tests := []struct{ name, src, msg string }{
		{"withoutKeys annotations", `rollgate.withoutKeys("x", "a/", {})`,
			"rollgate.withoutKeys: argument 1 (annotations) must be a table or nil, not string"},
		{"withoutKeys keys", `rollgate.withoutKeys({}, "a/", {1})`, "rollgate.withoutKeys: argument 3 (keys)[1] must be a string, not number"},
		{"withoutKeys prefixes", `rollgate.withoutKeys({}, nil, {})`,
			"rollgate.withoutKeys: argument 2 (prefixes) must be a string or a list of strings, not nil"},
		{"withoutKeys too many prefixes", `local p = {} for i = 1, 17 do p[i] = "p" .. i .. "/" end rollgate.withoutKeys({}, p, {})`,
			"rollgate.withoutKeys: 17 prefixes; pass at most 16"},
		{"cookieMatch", `rollgate.cookieMatch("Cookie")`, "rollgate.cookieMatch: argument 1 (header) must be a table, not string"},
		{"stepConditions matches", `rollgate.stepConditions(5, ` + rules + `)`,
			"rollgate.stepConditions: argument 1 (matches) must be a table or nil, not number"},
		{"stepConditions rules", `rollgate.stepConditions({}, {name = "d"})`,
			"rollgate.stepConditions: rules.path must be a string (the error message), not nil"},
		{"stepConditions match", `for c in rollgate.stepConditions({"x"}, ` + rules + `) do end`,
			"rollgate.stepConditions: match 1 must be a table, not string"},
		{"stepConditions path", `for c in rollgate.stepConditions({{path = {}}}, ` + rules + `) do end`, "d: step match 1: no paths"},
		{"stepConditions query", `for c in rollgate.stepConditions({{headers = {{}}, queryParams = {{}}}}, ` + rules + `) do end`,
			"d: step match 1: no queries"},
		{"stepConditions count", `for c in rollgate.stepConditions({{}, {}}, ` + rules + `) do end`, "d: step match 1: one condition"},
		{"stepConditions checks a match when the loop reaches it",
			`for c in rollgate.stepConditions({{headers = {{name = "a"}}}, {}}, ` + rules + `) do error("body " .. c.index, 0) end`,
			"body 1"},
		{"headerAndCookie conditions", `rollgate.headerAndCookie({}, "d")`,
			"rollgate.headerAndCookie: argument 1 (conditions) must be the iterator of rollgate.stepConditions, not table"},
		{"headerAndCookie third condition",
			`rollgate.headerAndCookie(rollgate.stepConditions({{headers = {{name = "a"}}}, {headers = {{name = "b"}}}}, ` + rules + `), "d")`,
			"d: step match 2: d supports at most one header condition and one cookie condition per step"},
		{"canaryBy type", `rollgate.canaryBy({}, "p/", "header", "x", {type = "Prefix"}, "d")`, "d cannot match a header with type Prefix"},
		{"canaryBy out", `rollgate.canaryBy(nil, "p/", "header", "x", {}, "d")`, "rollgate.canaryBy: argument 1 (out) must be a table, not nil"},
		{"canaryWeight", `rollgate.canaryWeight({weight = "five"})`,
			`rollgate.canaryWeight: obj.weight must be a number or a numeric string such as "5" or "-1", not five`},
		{"headerControl", `rollgate.headerControl({}, "p/", {set = {"a"}})`,
			"rollgate.headerControl: modifier.set[1] must be a table {name, value}, not string"},
		{"splitWeighted weight", `rollgate.splitWeighted({}, "a", "b", 101)`,
			"rollgate.splitWeighted: argument 4 (weight) must be a number from 0 to 100, not 101"},
		{"splitWeighted entry", `rollgate.splitWeighted({"a"}, "a", "b", 5)`,
			"rollgate.splitWeighted: services[1] must be a table, not string"},
		{"splitWeighted entry weight", `rollgate.splitWeighted({{name = "a", weight = "x"}}, "a", "b", 5)`,
			"rollgate.splitWeighted: services[1].weight must be a number, not string"},
		{"splitWeighted services", `rollgate.splitWeighted(nil, "a", "b", 5)`,
			"rollgate.splitWeighted: argument 1 (services) must be a table, not nil"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := runDialect(t, Runner{}, tt.src+"\nreturn {}", IngressInput{Weight: -1})
			if err == nil || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("got %v, want an error containing %q", err, tt.msg)
			}
		})
	}
}

// TestDialectHelpersKeepLimits: the Go helpers are not stopped by the
// time limit, so they check the sandbox's size limits themselves.
func TestDialectHelpersKeepLimits(t *testing.T) {
	lim := DefaultLimits()
	lim.MaxStringBytes, lim.ResultValues = 1000, 50
	r := Runner{Limits: lim}
	tests := []struct{ name, src, msg string }{
		{"headerControl text", `local set = {} for i = 1, 30 do set[i] = {name = "h", value = string.rep("v", 60)} end
rollgate.headerControl({}, "p/", {set = set})`, "rollgate.headerControl: a result of 1008 bytes exceeds the sandbox limit"},
		{"headerControl remove", `local rm = {} for i = 1, 30 do rm[i] = string.rep("r", 60) end
rollgate.headerControl({}, "p/", {remove = rm})`, "rollgate.headerControl: a result of"},
		{"withoutKeys entries", `local a = {} for i = 1, 60 do a["k" .. i] = "v" end rollgate.withoutKeys(a, "p/", {})`,
			"rollgate.withoutKeys: more than 50 annotations exceeds the sandbox limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := runDialect(t, r, tt.src+"\nreturn {}", IngressInput{Weight: -1})
			if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("got %v, want ErrLimit containing %q", err, tt.msg)
			}
		})
	}
}

// TestDialectHelpersSurvivePooling: a script that replaces the helpers
// does not change what the next script on the same pooled state gets.
func TestDialectHelpersSurvivePooling(t *testing.T) {
	pool := NewPool(1)
	r := Runner{Pool: pool}
	if _, err := runDialect(t, r, `rollgate.withoutKeys = function() return {hijacked = "1"} end
rollgate.cookieMatch = nil
return {}`, IngressInput{}); err != nil {
		t.Fatal(err)
	}
	got, err := runDialect(t, r, `local out = rollgate.withoutKeys(obj.annotations, "a/", {"canary"})
out.cookie = rollgate.cookieMatch({name = "Cookie", type = "RegularExpression", value = "u=always"})
return out`, IngressInput{Annotations: map[string]string{"a/canary": "1", "x": "2"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"x": "2", "cookie": "u"}; !maps.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if st := pool.Stats(); st.Reused != 1 || st.Dirty != 1 {
		t.Fatalf("pool stats %+v: want the second run on the reset state", st)
	}
}
