package luascripts

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// nativeOutcome is what one implementation gave for one input.
type nativeOutcome struct {
	out ObjectData
	err error
}

// runBoth runs the Go implementation of s directly (with the routing guard,
// as RunCustom does) and its Lua script. fallback is true when the Go code
// left the input to the Lua script.
func runBoth(t *testing.T, s Script, r Runner, in CustomInput) (goRes, luaRes nativeOutcome, fallback bool) {
	t.Helper()
	goRes.out, goRes.err = callNative(s, in, r.Limits.withDefaults())
	if goRes.err == errFallback {
		fallback = true
	} else if goRes.err == nil {
		if err := checkCustom(s, in, goRes.out); err != nil {
			goRes = nativeOutcome{err: err}
		}
	}
	luaRes.out, luaRes.err = r.RunCustom(context.Background(), s.luaOnly(), in)
	return goRes, luaRes, fallback
}

// sameResult reports how two outcomes differ: the same error (kind and
// text) or the same object, with the same Go types, or "".
func sameResult(goRes, luaRes nativeOutcome) string {
	if goRes.err != nil || luaRes.err != nil {
		if goRes.err == nil || luaRes.err == nil || goRes.err.Error() != luaRes.err.Error() || errorKind(goRes.err) != errorKind(luaRes.err) {
			return fmt.Sprintf("errors differ:\nGo:  %v\nLua: %v\nGo result: %#v", goRes.err, luaRes.err, goRes.out.Spec)
		}
		return ""
	}
	if !reflect.DeepEqual(goRes.out, luaRes.out) {
		return fmt.Sprintf("results differ:\nGo:  %#v\nLua: %#v", goRes.out, luaRes.out)
	}
	return ""
}

func errorKind(err error) error {
	var se *ScriptError
	if errors.As(err, &se) {
		return se.Kind
	}
	return nil
}

// TestNativeGoldenCasesTakeTheGoPath checks that the golden cases of the
// Istio built-ins (which RunCases runs on both implementations) are
// handled by the Go code, not left to the Lua script: otherwise their
// comparison in TestGoldenCases would compare Lua with itself.
func TestNativeGoldenCasesTakeTheGoPath(t *testing.T) {
	files, err := filepath.Glob("testdata/trafficrouting/networking.istio.io/*/*.yaml")
	if err != nil || len(files) < 5 {
		t.Fatalf("istio cases: %v %v", files, err)
	}
	steps := 0
	for _, file := range files {
		tc, run, err := loadCase(file, NewLibrary(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if run.script.native == nil {
			t.Fatalf("%s: %s has no Go implementation", file, run.script.Name)
		}
		for i, step := range run.steps {
			data, err := ObjectDataFrom(tc.Original)
			if err != nil {
				t.Fatal(err)
			}
			in, err := NewCustomInput(data, step.TrafficRoutingStrategy, run.target)
			if err != nil {
				t.Fatal(err)
			}
			goRes, luaRes, fallback := runBoth(t, run.script, Runner{}, in)
			if fallback {
				t.Errorf("%s step %d: the Go implementation left it to Lua", file, i+1)
			}
			if msg := sameResult(goRes, luaRes); msg != "" {
				t.Errorf("%s step %d: %s", file, i+1, msg)
			}
			steps++
		}
	}
	t.Logf("%d steps of %d cases on the Go path", steps, len(files))
}

// TestNativeMatchesLua feeds generated VirtualServices and
// DestinationRules (routes of every kind, matches, headers, weights
// 0..100, steps with and without matches, missing fields, fields of the
// wrong type) to the Go implementation and to the Lua script of the
// built-in and requires the same result (the same values with the same
// Go types) or the same error (kind and text). Inputs the Go code leaves
// to the Lua script count as fallbacks; most must not be.
func TestNativeMatchesLua(t *testing.T) {
	lib := NewLibrary()
	r := Runner{Pool: NewPool(2)}
	for _, kind := range []string{"VirtualService", "DestinationRule"} {
		s, err := lib.Resolve(kind, "networking.istio.io", nil)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(15, 4))
		n := 3000
		if testing.Short() {
			n = 500
		}
		var fallbacks, errs, changed, failures int
		for i := range n {
			g := &specGen{rng: rng}
			in := g.input(kind)
			before := deepCopy(normalizeForTest(t, in.Data.Spec))
			goRes, luaRes, fallback := runBoth(t, s, r, in)
			if !reflect.DeepEqual(normalizeForTest(t, in.Data.Spec), before) {
				t.Fatalf("case %d: the input was changed", i)
			}
			if msg := sameResult(goRes, luaRes); msg != "" && !fallback {
				failures++
				if failures <= 5 {
					t.Errorf("%s case %d: %s\ninput: %#v\nweight %d, matches %s, modifier %v, stable %q canary %q",
						kind, i, msg, in.Data.Spec, in.CanaryWeight, describeMatches(in.Matches), in.RequestHeaderModifier, in.StableService, in.CanaryService)
				}
				continue
			}
			// The production path (Go, or Lua after a fallback) gives
			// the same.
			prod := nativeOutcome{}
			prod.out, prod.err = r.RunCustom(context.Background(), s, in)
			if msg := sameResult(prod, luaRes); msg != "" {
				t.Fatalf("%s case %d through RunCustom: %s", kind, i, msg)
			}
			switch {
			case fallback:
				fallbacks++
			case luaRes.err != nil:
				errs++
			case !reflect.DeepEqual(luaRes.out.Spec, before):
				changed++
			}
		}
		t.Logf("%s: %d inputs: %d on the Go path (%d changed the spec, %d errors), %d left to Lua",
			kind, n, n-fallbacks, changed, errs, fallbacks)
		if failures > 0 {
			t.Fatalf("%s: %d of %d inputs differ", kind, failures, n)
		}
		// The comparison means something only if the Go code ran on
		// most inputs and they exercised its branches.
		if fallbacks > n/4 || changed < n/5 || (kind == "VirtualService" && errs < n/50) {
			t.Errorf("%s: generated inputs do not exercise the Go path: %d fallbacks, %d changed, %d errors of %d",
				kind, fallbacks, changed, errs, n)
		}
	}
}

func normalizeForTest(t *testing.T, spec map[string]any) map[string]any {
	n := normalizer{budget: 1 << 30}
	out := n.object(spec, 2)
	if n.fallback {
		return spec
	}
	return out
}

func describeMatches(ms []v1alpha1.HttpRouteMatch) string {
	var parts []string
	for _, m := range ms {
		var p []string
		if m.Path != nil {
			p = append(p, fmt.Sprintf("path %v %q", deref(m.Path.Type), deref(m.Path.Value)))
		}
		for _, h := range m.Headers {
			p = append(p, fmt.Sprintf("header %s %v %q", h.Name, deref(h.Type), h.Value))
		}
		for _, q := range m.QueryParams {
			p = append(p, fmt.Sprintf("query %s %v %q", q.Name, deref(q.Type), q.Value))
		}
		parts = append(parts, "{"+strings.Join(p, ", ")+"}")
	}
	return strings.Join(parts, " ")
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// specGen makes random inputs; odd values come rarely, so most inputs
// are well formed and reach deep into the script.
type specGen struct {
	rng *rand.Rand
}

func (g *specGen) chance(p float64) bool { return g.rng.Float64() < p }

func (g *specGen) pick(options ...any) any { return options[g.rng.IntN(len(options))] }

// odd is a value of a type no field of the built-ins has.
func (g *specGen) odd() any {
	return g.pick("text", int64(7), 2.5, true, false, []any{}, map[string]any{}, []any{"a"}, nil)
}

const genStable = "app"

func (g *specGen) host() any {
	if g.chance(0.03) {
		return g.odd()
	}
	if g.chance(0.03) {
		return genStable + "-canary"
	}
	return g.pick(genStable, genStable, genStable+".default.svc.cluster.local", "other", "apple", genStable+".")
}

func (g *specGen) destination() any {
	if g.chance(0.02) {
		return g.odd()
	}
	d := map[string]any{}
	if !g.chance(0.03) {
		target := map[string]any{"host": g.host()}
		if g.chance(0.5) {
			target["port"] = map[string]any{"number": int64(80)}
		}
		if g.chance(0.2) {
			target["subset"] = g.pick("v1", "stable", "canary")
		}
		d["destination"] = target
		if g.chance(0.01) {
			d["destination"] = g.odd()
		}
	}
	switch {
	case g.chance(0.6):
		d["weight"] = int64(g.rng.IntN(101))
	case g.chance(0.1):
		d["weight"] = float64(g.rng.IntN(1000)) / 10
	case g.chance(0.1):
		d["weight"] = int(g.rng.IntN(101))
	case g.chance(0.05):
		d["weight"] = g.pick("50", "x", true)
	}
	if g.chance(0.2) {
		h := map[string]any{}
		if g.chance(0.8) {
			req := map[string]any{}
			if g.chance(0.5) {
				req["set"] = map[string]any{"x-old": "1"}
			}
			if g.chance(0.3) {
				req["add"] = map[string]any{"x-add": "2"}
			}
			if g.chance(0.3) {
				req["remove"] = []any{"x-gone"}
			}
			if g.chance(0.05) {
				req["set"] = g.odd()
			}
			h["request"] = req
		}
		if g.chance(0.2) {
			h["response"] = map[string]any{"set": map[string]any{"a": "b"}}
		}
		if g.chance(0.05) {
			h["request"] = g.odd()
		}
		d["headers"] = h
	}
	return d
}

func (g *specGen) dests() any {
	if g.chance(0.02) {
		return g.odd()
	}
	n := g.rng.IntN(4)
	if g.chance(0.4) {
		n = 1
	}
	out := make([]any, n)
	for i := range out {
		out[i] = g.destination()
	}
	return out
}

func (g *specGen) stringMatch(regexOK bool) any {
	if g.chance(0.02) {
		return g.odd()
	}
	switch g.rng.IntN(7) {
	case 0, 1:
		return map[string]any{"exact": g.pick("/", "/api", "/api/v1", "/API", "yes", "no", "")}
	case 2, 3:
		return map[string]any{"prefix": g.pick("/", "/api", "/api/", "/web", "y", "")}
	case 4, 5:
		if regexOK {
			return map[string]any{"regex": g.pick(".*", "/api/.*", "/v[0-9]+", "y.*", "[a-z]+", ".*", "/api/.*", "/v[0-9]+", "y.*", "(")}
		}
		return map[string]any{"prefix": "/"}
	}
	if g.chance(0.3) {
		return map[string]any{"exact": int64(5)}
	}
	return map[string]any{}
}

func (g *specGen) headerName() string {
	return g.pick("x-canary", "X-Canary", "x-user", "cookie", "x-other").(string)
}

func (g *specGen) namedMatches(header bool) any {
	if g.chance(0.03) {
		return g.odd()
	}
	m := map[string]any{}
	for range g.rng.IntN(3) {
		name := g.headerName()
		if !header {
			name = g.pick("q", "user", "Q").(string)
		}
		m[name] = g.stringMatch(true)
	}
	return m
}

func (g *specGen) match() any {
	if g.chance(0.02) {
		return g.odd()
	}
	m := map[string]any{}
	g.maybe(m, "uri", 0.5, func() any { return g.stringMatch(true) })
	g.maybe(m, "ignoreUriCase", 0.2, func() any { return g.pick(true, false, "yes") })
	g.maybe(m, "headers", 0.4, func() any { return g.namedMatches(true) })
	g.maybe(m, "withoutHeaders", 0.15, func() any { return g.namedMatches(true) })
	g.maybe(m, "queryParams", 0.2, func() any { return g.namedMatches(false) })
	g.maybe(m, "method", 0.1, func() any { return map[string]any{"exact": "GET"} })
	return m
}

// maybe sets m[key] to value() with probability p.
func (g *specGen) maybe(m map[string]any, key string, p float64, value func() any) {
	if g.chance(p) {
		m[key] = value()
	}
}

func (g *specGen) route(http bool) any {
	if g.chance(0.02) {
		return g.odd()
	}
	r := map[string]any{}
	if !g.chance(0.05) {
		r["route"] = g.dests()
	}
	if http {
		if g.chance(0.5) {
			r["name"] = g.pick("main", "api", "web\"quoted\"", int64(3))
		}
		if g.chance(0.7) {
			n := g.rng.IntN(3)
			ms := make([]any, n)
			for i := range ms {
				ms[i] = g.match()
			}
			r["match"] = ms
			if g.chance(0.02) {
				r["match"] = g.odd()
			}
		}
		if g.chance(0.2) {
			r["timeout"] = "5s"
		}
	} else if g.chance(0.5) {
		r["match"] = []any{map[string]any{"port": int64(443), "sniHosts": []any{"a.example.com"}}}
	}
	return r
}

func (g *specGen) routes(http bool) any {
	if g.chance(0.03) {
		return g.odd()
	}
	out := make([]any, g.rng.IntN(4))
	for i := range out {
		out[i] = g.route(http)
	}
	return out
}

func (g *specGen) virtualService() map[string]any {
	spec := map[string]any{"hosts": []string{"app.example.com"}}
	g.maybe(spec, "http", 0.9, func() any { return g.routes(true) })
	g.maybe(spec, "tls", 0.3, func() any { return g.routes(false) })
	g.maybe(spec, "tcp", 0.3, func() any { return g.routes(false) })
	g.maybe(spec, "gateways", 0.1, func() any { return []any{"mesh", nil} })
	return spec
}

func (g *specGen) destinationRule() map[string]any {
	spec := map[string]any{}
	if !g.chance(0.05) {
		spec["host"] = g.host()
	}
	if g.chance(0.8) {
		subsets := make([]any, g.rng.IntN(4))
		for i := range subsets {
			if g.chance(0.03) {
				subsets[i] = g.odd()
				continue
			}
			s := map[string]any{"name": g.pick("stable", "canary", "v1", int64(1))}
			switch {
			case g.chance(0.6):
				s["labels"] = map[string]any{"version": "v1", "pod-template-hash": "old"}
			case g.chance(0.05):
				s["labels"] = g.odd()
			}
			if g.chance(0.3) {
				s["trafficPolicy"] = map[string]any{"loadBalancer": map[string]any{"simple": "ROUND_ROBIN"}}
			}
			subsets[i] = s
		}
		spec["subsets"] = subsets
		if g.chance(0.03) {
			spec["subsets"] = g.odd()
		}
	}
	if g.chance(0.3) {
		spec["trafficPolicy"] = map[string]any{"tls": map[string]any{"mode": "ISTIO_MUTUAL"}, "weight": 2.5}
	}
	return spec
}

func (g *specGen) stepMatch() v1alpha1.HttpRouteMatch {
	var m v1alpha1.HttpRouteMatch
	if g.chance(0.5) {
		typ := gatewayv1.PathMatchType(g.pick("PathPrefix", "PathPrefix", "Exact", "RegularExpression", "PathPrefix", "Exact", "RegularExpression", "Bogus").(string))
		val := g.pick("/", "/api", "/api/v1", "/web", "/api/.*", "(").(string)
		m.Path = &gatewayv1.HTTPPathMatch{Value: &val}
		if g.chance(0.8) {
			m.Path.Type = &typ
		}
	}
	for range g.rng.IntN(3) {
		h := gatewayv1.HTTPHeaderMatch{Name: gatewayv1.HTTPHeaderName(g.headerName()), Value: g.pick("yes", "no", "y.*", "").(string)}
		if g.chance(0.6) {
			typ := gatewayv1.HeaderMatchType(g.pick("Exact", "Exact", "RegularExpression", "Prefix").(string))
			h.Type = &typ
		}
		m.Headers = append(m.Headers, h)
	}
	if g.chance(0.3) {
		q := gatewayv1.HTTPQueryParamMatch{Name: gatewayv1.HTTPHeaderName(g.pick("q", "user", "Q").(string)), Value: g.pick("1", "a.*").(string)}
		if g.chance(0.5) {
			typ := gatewayv1.QueryParamMatchType(g.pick("Exact", "RegularExpression").(string))
			q.Type = &typ
		}
		m.QueryParams = append(m.QueryParams, q)
	}
	return m
}

func (g *specGen) input(kind string) CustomInput {
	in := CustomInput{Target: Target{
		StableService: genStable, CanaryService: genStable + "-canary",
		StableRevision: "s1", CanaryRevision: "c1", RevisionLabelKey: "pod-template-hash",
	}}
	if g.chance(0.25) {
		in.CanaryService = genStable
	}
	if g.chance(0.05) {
		in.StableRevision = ""
	}
	if kind == "VirtualService" {
		in.Data.Spec = g.virtualService()
	} else {
		in.Data.Spec = g.destinationRule()
	}
	if g.chance(0.02) {
		in.Data.Spec = nil
	}
	if g.chance(0.2) {
		in.Data.Labels = map[string]string{"team": "a"}
	}
	if g.chance(0.5) {
		for range 1 + g.rng.IntN(3) {
			in.Matches = append(in.Matches, g.stepMatch())
		}
		in.CanaryWeight = -1
	} else {
		in.CanaryWeight = int32(g.rng.IntN(101))
		if g.chance(0.1) {
			in.CanaryWeight = -1
		}
	}
	in.StableWeight = StableWeight(in.CanaryWeight)
	if g.chance(0.3) {
		f := &gatewayv1.HTTPHeaderFilter{}
		if g.chance(0.7) {
			f.Set = []gatewayv1.HTTPHeader{{Name: "x-new", Value: "1"}, {Name: "x-old", Value: "2"}}
		}
		if g.chance(0.4) {
			f.Add = []gatewayv1.HTTPHeader{{Name: "x-add", Value: "3"}, {Name: "x-add", Value: "4"}}
		}
		if g.chance(0.4) {
			f.Remove = []string{"x-gone", "x-other"}
		}
		in.RequestHeaderModifier = f
	}
	return in
}

// TestNativePanicIsAnError checks that a panic in a Go implementation
// becomes an error naming the script instead of crashing the controller.
func TestNativePanicIsAnError(t *testing.T) {
	s, err := NewLibrary().Resolve("VirtualService", "networking.istio.io", nil)
	if err != nil {
		t.Fatal(err)
	}
	s.native = func(*nativeRun, CustomInput, map[string]any) (map[string]any, error) {
		var m map[string]any
		m["boom"] = 1
		return m, nil
	}
	var observed error
	r := Runner{Observe: func(_ Script, _ time.Duration, err error) { observed = err }}
	_, err = r.RunCustom(context.Background(), s, CustomInput{Data: ObjectData{Spec: map[string]any{}}, CanaryWeight: 10, StableWeight: 90})
	if !errors.Is(err, ErrRuntime) || !strings.Contains(err.Error(), "built-in VirtualService.networking.istio.io") ||
		!strings.Contains(err.Error(), "internal error of the Go implementation") {
		t.Fatalf("got %v", err)
	}
	if observed == nil {
		t.Error("the failed run was not observed")
	}
}

// TestOverrideWinsOverNative checks that a ConfigMap script replaces the
// Go implementation of a built-in too.
func TestOverrideWinsOverNative(t *testing.T) {
	lib := NewLibrary()
	key := CustomKey("VirtualService", "networking.istio.io")
	s, err := lib.Resolve("VirtualService", "networking.istio.io", map[string]string{key: `return {spec = {overridden = true}}`})
	if err != nil {
		t.Fatal(err)
	}
	if s.Implementation() != "Lua" {
		t.Fatalf("override runs %s", s.Implementation())
	}
	out, err := Runner{}.RunCustom(context.Background(), s, CustomInput{Data: ObjectData{Spec: map[string]any{}}, CanaryWeight: 10, StableWeight: 90})
	if err != nil || out.Spec["overridden"] != true {
		t.Fatalf("got %v, %v", out.Spec, err)
	}
	b, err := lib.Resolve("VirtualService", "networking.istio.io", nil)
	if err != nil || b.Implementation() != "Go" {
		t.Fatalf("built-in: %v %v", b.Implementation(), err)
	}
}

// TestNativeKeepsLuaLimits checks that with limits a Lua run of the
// built-in would hit (short strings, few result values) the controller's
// path gives what the Lua script gives: the Go code leaves such inputs to
// it.
func TestNativeKeepsLuaLimits(t *testing.T) {
	lib := NewLibrary()
	s, err := lib.Resolve("VirtualService", "networking.istio.io", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, lim := range []Limits{{MaxStringBytes: 400}, {ResultValues: 150}} {
		rng := rand.New(rand.NewPCG(15, 5))
		r := Runner{Limits: lim}
		limited := 0
		for i := range 1000 {
			in := (&specGen{rng: rng}).input("VirtualService")
			var prod, lua nativeOutcome
			prod.out, prod.err = r.RunCustom(context.Background(), s, in)
			lua.out, lua.err = r.RunCustom(context.Background(), s.luaOnly(), in)
			if msg := sameResult(prod, lua); msg != "" {
				t.Fatalf("%+v, case %d: %s", lim, i, msg)
			}
			if errors.Is(lua.err, ErrLimit) {
				limited++
			}
		}
		// A small object whose result is large: every route match
		// times every step match.
		if lim.ResultValues > 0 {
			var bases []any
			for i := range 8 {
				bases = append(bases, map[string]any{"uri": map[string]any{"prefix": fmt.Sprintf("/p%d", i)}})
			}
			in := CustomInput{CanaryWeight: -1, StableWeight: 101, Target: Target{StableService: "app", CanaryService: "app-canary"},
				Data: ObjectData{Spec: map[string]any{"http": []any{map[string]any{
					"match": bases, "route": []any{map[string]any{"destination": map[string]any{"host": "app"}}},
				}}}}}
			for i := range 6 {
				in.Matches = append(in.Matches, v1alpha1.HttpRouteMatch{Headers: []gatewayv1.HTTPHeaderMatch{{Name: "x", Value: fmt.Sprint(i)}}})
			}
			var prod, lua nativeOutcome
			prod.out, prod.err = r.RunCustom(context.Background(), s, in)
			lua.out, lua.err = r.RunCustom(context.Background(), s.luaOnly(), in)
			if msg := sameResult(prod, lua); msg != "" || !errors.Is(lua.err, ErrLimit) {
				t.Fatalf("%+v, many matches: %s (Lua: %v)", lim, msg, lua.err)
			}
			limited++
		}
		t.Logf("%+v: %d inputs hit a limit", lim, limited)
		if limited < 5 {
			t.Errorf("%+v: only %d of 1000 inputs hit a limit", lim, limited)
		}
	}
}
