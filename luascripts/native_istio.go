package luascripts

import (
	"errors"
	"math"
	"strings"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// The Istio built-ins in Go: trafficrouting/networking.istio.io/*.lua,
// step by step, in the same order (so the first error is the same one).
// Comments name the Lua functions they mirror. See native.go for the
// contract and the fallback to the Lua script.

// istioDestinationRule is DestinationRule.lua.
func istioDestinationRule(run *nativeRun, in CustomInput, spec map[string]any) (map[string]any, error) {
	if _, ok := stableHostSuffix(spec["host"], in.StableService); !ok {
		return spec, nil
	}
	if in.RevisionLabelKey == "" || in.StableRevision == "" || in.CanaryRevision == "" {
		return nil, run.fail("DestinationRule subsets need the stable and canary revisions and the revision label key")
	}
	subsets, ok := optList(spec, "subsets")
	if !ok {
		return nil, errFallback
	}
	if subsets == nil {
		subsets = []any{}
	}
	ensure := func(name, revision string) error {
		for _, s := range subsets {
			subset, ok := s.(map[string]any)
			if !ok {
				return errFallback
			}
			if subset["name"] == any(name) {
				labels, err := objectOrNew(subset, "labels")
				if err != nil {
					return err
				}
				labels[in.RevisionLabelKey] = revision
				return nil
			}
		}
		subsets = append(subsets, map[string]any{"name": name, "labels": map[string]any{in.RevisionLabelKey: revision}})
		return nil
	}
	if err := ensure("stable", in.StableRevision); err != nil {
		return nil, err
	}
	if err := ensure("canary", in.CanaryRevision); err != nil {
		return nil, err
	}
	spec["subsets"] = subsets
	return spec, nil
}

// stableHostSuffix is hostSuffix (isStableHost): what follows the stable
// Service's name in host ("" for the short form), and whether host is the
// stable Service at all.
func stableHostSuffix(host any, stable string) (string, bool) {
	h, ok := host.(string)
	if !ok {
		return "", false
	}
	if h == stable {
		return "", true
	}
	if strings.HasPrefix(h, stable+".") {
		return h[len(stable):], true
	}
	return "", false
}

// istioVS is one run of VirtualService.lua.
type istioVS struct {
	in         CustomInput
	useSubsets bool
	run        *nativeRun
}

// istioVirtualService is VirtualService.lua.
func istioVirtualService(run *nativeRun, in CustomInput, spec map[string]any) (map[string]any, error) {
	vs := istioVS{in: in, useSubsets: in.StableService == in.CanaryService, run: run}
	var err error
	switch {
	case in.CanaryWeight > 0:
		err = vs.applyWeight(spec, float64(in.CanaryWeight))
	case in.CanaryWeight == -1 && len(in.Matches) > 0:
		err = vs.applyMatches(spec)
	}
	if err != nil {
		return nil, err
	}
	return spec, nil
}

// isStable: d is a route destination to the stable Service.
func (vs istioVS) isStable(d any) (bool, error) {
	dest, ok := d.(map[string]any)
	if !ok {
		return false, errFallback
	}
	target, ok := optObject(dest, "destination")
	if !ok {
		return false, errFallback
	}
	if target == nil {
		return false, nil
	}
	_, stable := stableHostSuffix(target["host"], vs.in.StableService)
	return stable, nil
}

// withHeaders adds the step's requestHeaderModifier to a destination.
func (vs istioVS) withHeaders(dest map[string]any) error {
	mod := vs.in.RequestHeaderModifier
	if mod == nil {
		return nil
	}
	headers, err := objectOrNew(dest, "headers")
	if err != nil {
		return err
	}
	req, err := objectOrNew(headers, "request")
	if err != nil {
		return err
	}
	for _, op := range []struct {
		key  string
		list []gatewayv1.HTTPHeader
	}{{"set", mod.Set}, {"add", mod.Add}} {
		if len(op.list) == 0 {
			continue
		}
		m, err := objectOrNew(req, op.key)
		if err != nil {
			return err
		}
		for _, h := range op.list {
			m[string(h.Name)] = h.Value
		}
	}
	if len(mod.Remove) > 0 {
		remove, ok := optList(req, "remove")
		if !ok {
			return errFallback
		}
		for _, name := range mod.Remove {
			remove = append(remove, name)
		}
		req["remove"] = remove
	}
	return nil
}

// canaryDestination copies a stable route destination and points it at
// the canary.
func (vs istioVS) canaryDestination(d map[string]any, http bool) (map[string]any, error) {
	c := deepCopy(d).(map[string]any)
	target := c["destination"].(map[string]any)
	if vs.useSubsets {
		target["subset"] = "canary"
	} else {
		suffix, _ := stableHostSuffix(d["destination"].(map[string]any)["host"], vs.in.StableService)
		target["host"] = vs.in.CanaryService + suffix
		delete(target, "subset")
	}
	if http {
		if err := vs.withHeaders(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// splitRoute splits every stable destination of one route by weight w.
func (vs istioVS) splitRoute(dests []any, w float64, http bool) ([]any, error) {
	out := make([]any, 0, len(dests)+1)
	for _, item := range dests {
		stable, err := vs.isStable(item)
		if err != nil {
			return nil, err
		}
		if !stable {
			out = append(out, item)
			continue
		}
		d := item.(map[string]any)
		var total float64
		switch weight := d["weight"].(type) {
		case nil:
			if len(dests) == 1 {
				total = 100
			}
		case int64:
			total = float64(weight)
		case float64:
			total = weight
		default:
			return nil, errFallback
		}
		cw := math.Floor(total*w/100 + 0.5)
		c, err := vs.canaryDestination(d, http)
		if err != nil {
			return nil, err
		}
		if c["weight"], err = luaNumber(cw); err != nil {
			return nil, err
		}
		if d["weight"], err = luaNumber(total - cw); err != nil {
			return nil, err
		}
		if target := d["destination"].(map[string]any); vs.useSubsets && target["subset"] == nil {
			target["subset"] = "stable"
		}
		out = append(out, d, c)
	}
	return out, nil
}

func (vs istioVS) applyWeight(spec map[string]any, w float64) error {
	for _, section := range []string{"http", "tls", "tcp"} {
		routes, ok := optList(spec, section)
		if !ok {
			return errFallback
		}
		for _, r := range routes {
			route, ok := r.(map[string]any)
			if !ok {
				return errFallback
			}
			if _, has := route["route"]; !has {
				continue
			}
			dests, ok := optList(route, "route")
			if !ok {
				return errFallback
			}
			out, err := vs.splitRoute(dests, w, section == "http")
			if err != nil {
				return err
			}
			route["route"] = out
		}
	}
	return nil
}

// condTypes of the script: step match types as conditions.
func stepCond(typ, value string) (StringCond, bool) {
	switch typ {
	case "Exact":
		return StringCond{Type: CondExact, Value: value}, true
	case "PathPrefix", "Prefix":
		return StringCond{Type: CondPrefix, Value: value}, true
	case "RegularExpression":
		return StringCond{Type: CondRegex, Value: value}, true
	}
	return StringCond{}, false
}

// istioMatchCond reads an Istio StringMatch (exact, else prefix, else regex,
// else any value).
func istioMatchCond(sm map[string]any, ignoreCase bool) (StringCond, error) {
	for _, f := range []struct{ key, typ string }{{"exact", CondExact}, {"prefix", CondPrefix}, {"regex", CondRegex}} {
		v, ok := sm[f.key]
		if !ok {
			continue
		}
		s, ok := v.(string)
		if !ok {
			return StringCond{}, errFallback
		}
		return StringCond{Type: f.typ, Value: s, IgnoreCase: ignoreCase && f.typ != CondRegex}, nil
	}
	return StringCond{Type: CondPrefix}, nil
}

// condAt reads the Istio StringMatch m[key] of a header or query
// parameter (no ignoreCase).
func condAt(m map[string]any, key string) (StringCond, error) {
	sm, ok := m[key].(map[string]any)
	if !ok {
		return StringCond{}, errFallback
	}
	return istioMatchCond(sm, false)
}

func toIstio(c StringCond) map[string]any {
	switch c.Type {
	case CondExact:
		return map[string]any{"exact": c.Value}
	case CondPrefix:
		return map[string]any{"prefix": c.Value}
	}
	return map[string]any{"regex": c.Value}
}

// both is (a AND b): ok false when no request satisfies both, the
// script's error when one Istio match cannot say it.
func (vs istioVS) both(a, b StringCond, what, where string) (StringCond, bool, error) {
	c, ok, err := Intersect(a, b)
	switch {
	case errors.Is(err, ErrInexpressible):
		return c, false, vs.run.fail("VirtualService %s: %s: %s, and an Istio match holds one condition per %s: "+
			"no canary route can send exactly (route match) AND (step match) to the canary", where, what, err.Error(), what)
	case err != nil:
		return c, false, errFallback // rollgate.intersect raises an error with a line
	}
	return c, ok, nil
}

// findKey returns the key of m equal to name regardless of case. Two such
// keys fall back: which one the script finds depends on Lua's order.
func findKey(m map[string]any, name string) (string, bool, error) {
	name = strings.ToLower(name)
	key, found := "", false
	for k := range m {
		if strings.ToLower(k) == name {
			if found {
				return "", false, errFallback
			}
			key, found = k, true
		}
	}
	return key, found, nil
}

// namedCond is a step condition on a header or a query parameter.
type namedCond struct{ name, typ, value string }

// andStrings ANDs the step's conditions into the match request map ms;
// false when no request can match.
func (vs istioVS) andStrings(ms map[string]any, conds []namedCond, what, where string) (bool, error) {
	for _, h := range conds {
		name := h.name
		if what == "header" {
			name = strings.ToLower(name)
		}
		s, ok := stepCond(h.typ, h.value)
		if !ok {
			return false, vs.run.fail("unsupported match type %s", h.typ)
		}
		key, found := name, false
		if what == "header" {
			var err error
			if key, found, err = findKey(ms, name); err != nil {
				return false, err
			}
		} else {
			_, found = ms[name]
		}
		if found {
			a, err := condAt(ms, key)
			if err != nil {
				return false, err
			}
			if s, ok, err = vs.both(a, s, what+" "+h.name, where); err != nil || !ok {
				return false, err
			}
			delete(ms, key)
		}
		ms[name] = toIstio(s)
	}
	return true, nil
}

// andField ANDs conds into the map out[field] (made when absent).
func (vs istioVS) andField(out map[string]any, field string, conds []namedCond, what, where string) (map[string]any, bool, error) {
	ms, err := objectOrNew(out, field)
	if err != nil {
		return nil, false, err
	}
	ok, err := vs.andStrings(ms, conds, what, where)
	return ms, ok, err
}

// combine ANDs one step match into a copy of an Istio match request; nil
// when the two cannot both hold.
func (vs istioVS) combine(base map[string]any, m v1alpha1.HttpRouteMatch, where string) (map[string]any, error) {
	out := deepCopy(base).(map[string]any)
	if p := m.Path; p != nil {
		typ, val := pathMatch(p)
		s, ok := stepCond(typ, val)
		if !ok {
			return nil, vs.run.fail("unsupported match type %s", typ)
		}
		if _, has := base["uri"]; has {
			uri, ok := base["uri"].(map[string]any)
			if !ok {
				return nil, errFallback
			}
			a, err := istioMatchCond(uri, base["ignoreUriCase"] == true)
			if err != nil {
				return nil, err
			}
			if s, ok, err = vs.both(a, s, "uri", where); err != nil || !ok {
				return nil, err
			}
		}
		out["uri"] = toIstio(s)
		if s.IgnoreCase {
			out["ignoreUriCase"] = true
		} else {
			delete(out, "ignoreUriCase")
		}
	}
	if len(m.Headers) > 0 {
		conds := make([]namedCond, 0, len(m.Headers))
		for _, h := range m.Headers {
			conds = append(conds, namedCond{string(h.Name), exactOr(h.Type), h.Value})
		}
		headers, ok, err := vs.andField(out, "headers", conds, "header", where)
		if err != nil || !ok {
			return nil, err
		}
		// A step header the route excludes (withoutHeaders) never matches.
		without, ok := optObject(out, "withoutHeaders")
		if !ok {
			return nil, errFallback
		}
		for _, h := range conds {
			key, found, err := findKey(without, h.name)
			if err != nil {
				return nil, err
			}
			if !found {
				continue
			}
			a, err := condAt(without, key)
			if err != nil {
				return nil, err
			}
			b, err := condAt(headers, strings.ToLower(h.name))
			if err != nil {
				return nil, err
			}
			covered, err := Covers(a, b)
			if err != nil {
				return nil, errFallback // rollgate.covers raises an error with a line
			}
			if covered {
				return nil, nil
			}
		}
	}
	if len(m.QueryParams) > 0 {
		conds := make([]namedCond, 0, len(m.QueryParams))
		for _, q := range m.QueryParams {
			conds = append(conds, namedCond{string(q.Name), exactOr(q.Type), q.Value})
		}
		if _, ok, err := vs.andField(out, "queryParams", conds, "queryParam", where); err != nil || !ok {
			return nil, err
		}
	}
	return out, nil
}

// canaryRoute is the canary route in front of an http route that sends
// to the stable Service, or nil when no request can match both.
func (vs istioVS) canaryRoute(route map[string]any, index int) (map[string]any, error) {
	r := deepCopy(route).(map[string]any)
	var label string
	var err error
	if v, has := route["name"]; has {
		name, ok := v.(string)
		if !ok {
			return nil, errFallback
		}
		r["name"] = name + "-canary"
		label, err = vs.run.format("http route %q", name)
	} else {
		label, err = vs.run.format("http[%d]", index-1)
	}
	if err != nil {
		return nil, err
	}
	bases, ok := optList(route, "match")
	if !ok {
		return nil, errFallback
	}
	if len(bases) == 0 {
		bases = []any{map[string]any{}}
	}
	matches := []any{}
	for j, b := range bases {
		base, ok := b.(map[string]any)
		if !ok {
			return nil, errFallback
		}
		for i, m := range vs.in.Matches {
			where, err := vs.run.format("%s, match %d, step match %d", label, j+1, i+1)
			if err != nil {
				return nil, err
			}
			c, err := vs.combine(base, m, where)
			if err != nil {
				return nil, err
			}
			if c != nil {
				matches = append(matches, c)
			}
		}
	}
	if len(matches) == 0 {
		return nil, nil // no request can match both the route and the step
	}
	r["match"] = matches
	dests := []any{}
	for _, d := range route["route"].([]any) {
		if stable, _ := vs.isStable(d); stable {
			c, err := vs.canaryDestination(d.(map[string]any), true)
			if err != nil {
				return nil, err
			}
			delete(c, "weight")
			dests = append(dests, c)
			break
		}
	}
	r["route"] = dests
	return r, nil
}

func (vs istioVS) applyMatches(spec map[string]any) error {
	routes, ok := optList(spec, "http")
	if !ok {
		return errFallback
	}
	if routes == nil {
		return nil
	}
	out := make([]any, 0, 2*len(routes))
	for i, r := range routes {
		route, ok := r.(map[string]any)
		if !ok {
			return errFallback
		}
		dests, ok := optList(route, "route")
		if !ok {
			return errFallback
		}
		toStable := false
		for _, d := range dests {
			stable, err := vs.isStable(d)
			if err != nil {
				return err
			}
			toStable = toStable || stable
		}
		if toStable {
			c, err := vs.canaryRoute(route, i+1)
			if err != nil {
				return err
			}
			if c != nil {
				out = append(out, c)
			}
		}
		out = append(out, route)
	}
	spec["http"] = out
	return nil
}
