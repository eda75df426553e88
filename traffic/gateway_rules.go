package traffic

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/luascripts"
)

// Limits of the HTTPRoute CRD (gateway-api v1.6).
const (
	maxRouteRules        = 16
	maxMatchesPerRule    = 64
	maxMatchesPerRoute   = 128
	maxBackendWeight     = 1_000_000
	canaryRuleNameSuffix = "-canary"
)

// HTTPRouteRules computes the rules of an HTTPRoute in namespace for d from
// its declared rules. It is pure, so an admission webhook can re-assert a
// step's routes on an HTTPRoute that a GitOps tool re-applies.
//
// Every declared rule with a backendRef to d.StableService (kind Service in
// the route's namespace) is changed:
//
//   - weights (when d.Matches is empty): the stable backendRef of weight W
//     becomes W*(100-w) and a copy pointing at d.CanaryService gets W*w
//     (other backendRefs of the rule are scaled by 100, so their share is
//     kept); with w = 0 the rule stays as declared.
//     d.RequestHeaderModifier becomes a filter of that copy (backendRef
//     filters have "Extended" support in the Gateway API).
//   - matches (they take precedence: the weight is then ignored and the
//     declared rules stay as they are): for each such rule a new rule,
//     sent only to the canary, is placed before all declared rules. Its
//     matches are (declared match) AND (step match) for every declared
//     match of the rule and every entry of d.Matches: the conditions of
//     both, where two conditions on the same path, header or query
//     parameter become their intersection (PathPrefix matching whole path
//     segments). A pair no request can satisfy is left out, and a rule
//     left with no match gets no canary rule; a pair whose intersection
//     is not one condition the HTTPRoute can express (a regular expression
//     AND a different one) is an error wrapping ErrInvalid that names the
//     rule and both matches, since any approximation would send other
//     requests to the canary. Adding conditions makes the new match more
//     specific than the declared one, and ties go to the earlier rule, so
//     the new rule takes precedence. d.RequestHeaderModifier becomes a
//     rule filter (merged into a declared RequestHeaderModifier filter).
//     With d.StickyCookie, the rule also gets a cookie-based
//     sessionPersistence of that name (unless it declares one), so that
//     the gateway keeps a client on the backend it first got.
//   - mirror (d.MirrorPercent > 0, without matches): the rule gets a
//     RequestMirror filter that copies d.MirrorPercent percent of its
//     requests to d.CanaryService (the port of its first stable
//     backendRef); its backendRefs stay as declared (with a weight, too,
//     though the API never asks for both), so stable answers every
//     request. A declared RequestMirror filter is kept beside it.
//
// Rules that do not reach the stable Service are kept as declared. The
// result must fit the CRD's limits (16 rules, 64 matches per rule, 128 in
// all); otherwise, or when no rule reaches the stable Service, the error
// wraps ErrInvalid.
func HTTPRouteRules(declared []gatewayv1.HTTPRouteRule, namespace string, d Desired) ([]gatewayv1.HTTPRouteRule, error) {
	if d.CanaryWeight < 0 || d.CanaryWeight > 100 {
		return nil, fmt.Errorf("%w: canary weight %d is not within 0-100", ErrInvalid, d.CanaryWeight)
	}
	if err := d.checkMirror(); err != nil {
		return nil, err
	}
	var canaryRules, weighted []gatewayv1.HTTPRouteRule
	found := false
	for i, r := range declared {
		stable := serviceRefs(r.BackendRefs, namespace, d.StableService)
		if len(stable) == 0 {
			weighted = append(weighted, *r.DeepCopy())
			continue
		}
		found = true
		if len(d.Matches) > 0 {
			rule, ok, err := matchRule(r, i, stable, d)
			if err != nil {
				return nil, err
			}
			if ok {
				canaryRules = append(canaryRules, rule)
			}
			weighted = append(weighted, *r.DeepCopy())
		} else {
			weighted = append(weighted, mirrorRule(weightRule(r, stable, d), r.BackendRefs[stable[0]], d))
		}
	}
	if !found {
		return nil, fmt.Errorf("%w: no rule has a backendRef to Service %q", ErrInvalid, d.StableService)
	}
	out := append(canaryRules, weighted...)
	return out, checkRouteLimits(out)
}

// serviceRefs returns the indexes of refs pointing at Service name in ns.
func serviceRefs(refs []gatewayv1.HTTPBackendRef, ns, name string) []int {
	var out []int
	for i, ref := range refs {
		if isServiceRef(ref.BackendObjectReference, ns, name) {
			out = append(out, i)
		}
	}
	return out
}

func isServiceRef(ref gatewayv1.BackendObjectReference, ns, name string) bool {
	return string(ref.Name) == name &&
		(ref.Group == nil || *ref.Group == "") &&
		(ref.Kind == nil || *ref.Kind == "Service") &&
		(ref.Namespace == nil || string(*ref.Namespace) == ns)
}

// referencesService reports whether any rule has a backendRef to name or
// mirrors requests to it.
func referencesService(rules []gatewayv1.HTTPRouteRule, ns, name string) bool {
	for _, r := range rules {
		if len(serviceRefs(r.BackendRefs, ns, name)) > 0 || slices.ContainsFunc(r.Filters, mirrorsTo(ns, name)) {
			return true
		}
	}
	return false
}

// mirrorsTo matches a RequestMirror filter copying requests to Service
// name in ns.
func mirrorsTo(ns, name string) func(gatewayv1.HTTPRouteFilter) bool {
	return func(f gatewayv1.HTTPRouteFilter) bool {
		return f.Type == gatewayv1.HTTPRouteFilterRequestMirror && f.RequestMirror != nil &&
			isServiceRef(f.RequestMirror.BackendRef, ns, name)
	}
}

// canaryRef is a copy of a stable backendRef that points at the canary.
func canaryRef(ref gatewayv1.HTTPBackendRef, canary string) gatewayv1.HTTPBackendRef {
	c := *ref.DeepCopy()
	c.Name = gatewayv1.ObjectName(canary)
	return c
}

// weightRule splits the weight of the stable backendRefs of r.
func weightRule(r gatewayv1.HTTPRouteRule, stable []int, d Desired) gatewayv1.HTTPRouteRule {
	out := *r.DeepCopy()
	if d.CanaryWeight == 0 {
		return out
	}
	w := d.CanaryWeight
	refs := make([]gatewayv1.HTTPBackendRef, 0, len(r.BackendRefs)+len(stable))
	for i, ref := range out.BackendRefs {
		weight := ptr.Deref(ref.Weight, 1)
		if !slices.Contains(stable, i) {
			ref.Weight = ptr.To(weight * 100)
			refs = append(refs, ref)
			continue
		}
		c := canaryRef(ref, d.CanaryService)
		c.Weight = ptr.To(weight * w)
		if d.RequestHeaderModifier != nil {
			c.Filters = withHeaderModifier(c.Filters, d.RequestHeaderModifier)
		}
		ref.Weight = ptr.To(weight * (100 - w))
		refs = append(refs, ref, c)
	}
	out.BackendRefs = scaleWeights(refs)
	if d.StickyCookie != "" && out.SessionPersistence == nil {
		out.SessionPersistence = &gatewayv1.SessionPersistence{
			SessionName: ptr.To(d.StickyCookie),
			Type:        ptr.To(gatewayv1.CookieBasedSessionPersistence),
		}
	}
	return out
}

// mirrorRule adds to r a RequestMirror filter copying d.MirrorPercent
// percent of its requests to the canary Service, at the port of the stable
// backendRef ref; with no mirror it returns r.
func mirrorRule(r gatewayv1.HTTPRouteRule, ref gatewayv1.HTTPBackendRef, d Desired) gatewayv1.HTTPRouteRule {
	if d.MirrorPercent == 0 {
		return r
	}
	target := canaryRef(ref, d.CanaryService).BackendObjectReference
	r.Filters = append(r.Filters, gatewayv1.HTTPRouteFilter{
		Type: gatewayv1.HTTPRouteFilterRequestMirror,
		RequestMirror: &gatewayv1.HTTPRequestMirrorFilter{
			BackendRef: target,
			Percent:    ptr.To(d.MirrorPercent),
		},
	})
	return r
}

// scaleWeights divides all weights when one exceeds the CRD's maximum,
// keeping a non-zero weight non-zero.
func scaleWeights(refs []gatewayv1.HTTPBackendRef) []gatewayv1.HTTPBackendRef {
	var top int32
	for _, r := range refs {
		top = max(top, ptr.Deref(r.Weight, 0))
	}
	if top <= maxBackendWeight {
		return refs
	}
	factor := (top + maxBackendWeight - 1) / maxBackendWeight
	for i := range refs {
		w := ptr.Deref(refs[i].Weight, 0)
		scaled := w / factor
		if w > 0 && scaled == 0 {
			scaled = 1
		}
		refs[i].Weight = ptr.To(scaled)
	}
	return refs
}

// matchRule builds the rule that sends r's requests matching d.Matches to
// the canary. ok is false when no declared match of r can hold together
// with any step match: r then gets no canary rule. index names r in
// errors.
func matchRule(r gatewayv1.HTTPRouteRule, index int, stable []int, d Desired) (gatewayv1.HTTPRouteRule, bool, error) {
	out := *r.DeepCopy()
	if out.Name != nil {
		name := string(*out.Name) + canaryRuleNameSuffix
		out.Name = nil
		if len(name) <= 253 {
			out.Name = ptr.To(gatewayv1.SectionName(name))
		}
	}
	refs := make([]gatewayv1.HTTPBackendRef, 0, len(stable))
	var total int32
	for _, i := range stable {
		c := canaryRef(r.BackendRefs[i], d.CanaryService)
		total += ptr.Deref(c.Weight, 1)
		refs = append(refs, c)
	}
	if total == 0 {
		for i := range refs {
			refs[i].Weight = ptr.To[int32](1)
		}
	}
	out.BackendRefs = refs
	declared := r.Matches
	if len(declared) == 0 {
		declared = []gatewayv1.HTTPRouteMatch{{Path: defaultPath(nil)}}
	}
	out.Matches = make([]gatewayv1.HTTPRouteMatch, 0, len(declared)*len(d.Matches))
	for j, om := range declared {
		for k, m := range d.Matches {
			merged, ok, err := mergeMatch(om, m)
			if err != nil {
				return out, false, fmt.Errorf("%w: %s matches[%d] AND the step's matches[%d]: %w",
					ErrInvalid, describeRule(r, index), j, k, err)
			}
			if ok {
				out.Matches = append(out.Matches, merged)
			}
		}
	}
	if len(out.Matches) == 0 {
		return out, false, nil
	}
	if d.RequestHeaderModifier != nil {
		out.Filters = withHeaderModifier(out.Filters, d.RequestHeaderModifier)
	}
	return out, true, nil
}

// describeRule names rule index of a route in errors.
func describeRule(r gatewayv1.HTTPRouteRule, index int) string {
	if r.Name != nil {
		return fmt.Sprintf("rule %d (%q)", index, *r.Name)
	}
	return fmt.Sprintf("rule %d", index)
}

// mergeMatch returns the match of the requests that satisfy both the
// declared match om and the step's match m: every condition of both, where
// two conditions on the same path, header (names compared without regard
// to case) or query parameter become their intersection. ok is false when
// no request can satisfy both; the error wraps
// luascripts.ErrInexpressible when the intersection is not one condition
// of a type the HTTPRoute has (the step must then fail rather than send
// other requests to the canary).
func mergeMatch(om gatewayv1.HTTPRouteMatch, m v1alpha1.HttpRouteMatch) (gatewayv1.HTTPRouteMatch, bool, error) {
	out := *om.DeepCopy()
	out.Path = defaultPath(om.Path)
	if m.Path != nil {
		p, ok, err := intersectPath(*out.Path, *defaultPath(m.Path))
		if err != nil || !ok {
			return out, false, err
		}
		out.Path = &p
	}
	headers := make([]gatewayv1.HTTPHeaderMatch, 0, len(m.Headers)+len(om.Headers))
	for _, h := range m.Headers {
		h.Type = ptr.To(ptr.Deref(h.Type, gatewayv1.HeaderMatchExact))
		if i := slices.IndexFunc(om.Headers, func(x gatewayv1.HTTPHeaderMatch) bool {
			return strings.EqualFold(string(x.Name), string(h.Name))
		}); i >= 0 {
			typ, value, ok, err := intersectValue(string(ptr.Deref(om.Headers[i].Type, gatewayv1.HeaderMatchExact)),
				om.Headers[i].Value, string(*h.Type), h.Value)
			if err != nil {
				return out, false, fmt.Errorf("header %s: %w", h.Name, err)
			}
			if !ok {
				return out, false, nil
			}
			h.Type, h.Value = ptr.To(gatewayv1.HeaderMatchType(typ)), value
		}
		headers = append(headers, h)
	}
	for _, h := range om.Headers {
		if !slices.ContainsFunc(m.Headers, func(x gatewayv1.HTTPHeaderMatch) bool {
			return strings.EqualFold(string(x.Name), string(h.Name))
		}) {
			headers = append(headers, h)
		}
	}
	out.Headers = headers
	params := make([]gatewayv1.HTTPQueryParamMatch, 0, len(m.QueryParams)+len(om.QueryParams))
	for _, q := range m.QueryParams {
		q.Type = ptr.To(ptr.Deref(q.Type, gatewayv1.QueryParamMatchExact))
		if i := slices.IndexFunc(om.QueryParams, func(x gatewayv1.HTTPQueryParamMatch) bool { return x.Name == q.Name }); i >= 0 {
			typ, value, ok, err := intersectValue(string(ptr.Deref(om.QueryParams[i].Type, gatewayv1.QueryParamMatchExact)),
				om.QueryParams[i].Value, string(*q.Type), q.Value)
			if err != nil {
				return out, false, fmt.Errorf("query parameter %s: %w", q.Name, err)
			}
			if !ok {
				return out, false, nil
			}
			q.Type, q.Value = ptr.To(gatewayv1.QueryParamMatchType(typ)), value
		}
		params = append(params, q)
	}
	for _, q := range om.QueryParams {
		if !slices.ContainsFunc(m.QueryParams, func(x gatewayv1.HTTPQueryParamMatch) bool { return x.Name == q.Name }) {
			params = append(params, q)
		}
	}
	out.QueryParams = params
	return out, true, nil
}

// intersectValue intersects two header or query parameter conditions
// (types Exact and RegularExpression, the same names in both APIs).
func intersectValue(typeA, a, typeB, b string) (string, string, bool, error) {
	c, ok, err := luascripts.Intersect(luascripts.StringCond{Type: typeA, Value: a}, luascripts.StringCond{Type: typeB, Value: b})
	if err != nil || !ok {
		return "", "", false, err
	}
	return c.Type, c.Value, true, nil
}

// intersectPath returns the path match of the paths both a and b match
// (both with the CRD's defaults applied). PathPrefix matches whole path
// segments, as the Gateway API says: PathPrefix /api matches /api and
// /api/v2, never /apis, and a trailing slash is ignored.
func intersectPath(a, b gatewayv1.HTTPPathMatch) (gatewayv1.HTTPPathMatch, bool, error) {
	ta, tb := *a.Type, *b.Type
	if ta == gatewayv1.PathMatchPathPrefix && tb != gatewayv1.PathMatchPathPrefix {
		return intersectPath(b, a)
	}
	if tb == gatewayv1.PathMatchPathPrefix {
		p := segmentPrefix(*b.Value)
		switch ta {
		case gatewayv1.PathMatchPathPrefix:
			q := segmentPrefix(*a.Value)
			switch {
			case underPrefix(q, p):
				return a, true, nil
			case underPrefix(p, q):
				return b, true, nil
			}
			return a, false, nil
		case gatewayv1.PathMatchExact:
			return a, underPrefix(*a.Value, p), nil
		case gatewayv1.PathMatchRegularExpression:
			return regexInPrefix(a, p)
		}
	}
	c, ok, err := luascripts.Intersect(pathCond(a), pathCond(b))
	if err != nil || !ok {
		return a, false, err
	}
	return gatewayv1.HTTPPathMatch{Type: ptr.To(gatewayv1.PathMatchType(c.Type)), Value: ptr.To(c.Value)}, true, nil
}

// pathCond is an Exact or RegularExpression path match as a condition.
func pathCond(p gatewayv1.HTTPPathMatch) luascripts.StringCond {
	return luascripts.StringCond{Type: string(*p.Type), Value: *p.Value}
}

// segmentPrefix is a PathPrefix value without its trailing slash ("/"
// stays).
func segmentPrefix(v string) string {
	if t := strings.TrimRight(v, "/"); t != "" {
		return t
	}
	return "/"
}

// underPrefix reports whether PathPrefix p (see segmentPrefix) matches
// path, or every path PathPrefix path matches.
func underPrefix(path, p string) bool {
	return p == "/" || path == p || strings.HasPrefix(path, p+"/")
}

// regexInPrefix intersects a regular expression path with PathPrefix p:
// the expression itself when every path it matches is under p, nothing
// when none is.
func regexInPrefix(re gatewayv1.HTTPPathMatch, p string) (gatewayv1.HTTPPathMatch, bool, error) {
	if p == "/" {
		return re, true, nil
	}
	cond := pathCond(re)
	exact, err := luascripts.Covers(luascripts.StringCond{Type: luascripts.CondExact, Value: p}, cond)
	if err != nil {
		return re, false, err
	}
	below, err := luascripts.Covers(luascripts.StringCond{Type: luascripts.CondPrefix, Value: p + "/"}, cond)
	if err != nil {
		return re, false, err
	}
	if exact || below {
		return re, true, nil
	}
	// A string prefix the expression cannot share with p is enough.
	none, err := luascripts.Disjoint(luascripts.StringCond{Type: luascripts.CondPrefix, Value: p}, cond)
	if err != nil {
		return re, false, err
	}
	if none {
		return re, false, nil
	}
	return re, false, fmt.Errorf("path (RegularExpression %q) AND (PathPrefix %q) %w", *re.Value, p, luascripts.ErrInexpressible)
}

// defaultPath applies the CRD's defaults to a path match (PathPrefix "/").
func defaultPath(p *gatewayv1.HTTPPathMatch) *gatewayv1.HTTPPathMatch {
	out := &gatewayv1.HTTPPathMatch{}
	if p != nil {
		out = p.DeepCopy()
	}
	out.Type = ptr.To(ptr.Deref(out.Type, gatewayv1.PathMatchPathPrefix))
	out.Value = ptr.To(ptr.Deref(out.Value, "/"))
	return out
}

// withHeaderModifier adds mod to filters, merged into an existing
// RequestHeaderModifier filter (the CRD allows only one): mod's set entries
// replace those of the same name, add and remove entries are appended.
func withHeaderModifier(filters []gatewayv1.HTTPRouteFilter, mod *gatewayv1.HTTPHeaderFilter) []gatewayv1.HTTPRouteFilter {
	out := make([]gatewayv1.HTTPRouteFilter, 0, len(filters)+1)
	merged := false
	for _, f := range filters {
		f = *f.DeepCopy()
		if f.Type == gatewayv1.HTTPRouteFilterRequestHeaderModifier && f.RequestHeaderModifier != nil {
			f.RequestHeaderModifier = mergeHeaderFilter(f.RequestHeaderModifier, mod)
			merged = true
		}
		out = append(out, f)
	}
	if !merged {
		out = append(out, gatewayv1.HTTPRouteFilter{
			Type:                  gatewayv1.HTTPRouteFilterRequestHeaderModifier,
			RequestHeaderModifier: mod.DeepCopy(),
		})
	}
	return out
}

func mergeHeaderFilter(base, mod *gatewayv1.HTTPHeaderFilter) *gatewayv1.HTTPHeaderFilter {
	out := mod.DeepCopy()
	for _, h := range base.Set {
		if !hasHTTPHeader(out.Set, h.Name) {
			out.Set = append(out.Set, h)
		}
	}
	out.Add = append(append([]gatewayv1.HTTPHeader(nil), base.Add...), mod.Add...)
	for _, r := range base.Remove {
		if !containsFold(out.Remove, r) {
			out.Remove = append(out.Remove, r)
		}
	}
	return out
}

func hasHTTPHeader(hs []gatewayv1.HTTPHeader, name gatewayv1.HTTPHeaderName) bool {
	for _, h := range hs {
		if strings.EqualFold(string(h.Name), string(name)) {
			return true
		}
	}
	return false
}

func containsFold(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

// checkRouteLimits applies the CRD's size limits, so the user reads which
// limit a step breaks instead of a CEL message from the API server.
func checkRouteLimits(rules []gatewayv1.HTTPRouteRule) error {
	if len(rules) > maxRouteRules {
		return fmt.Errorf("%w: the HTTPRoute would need %d rules, more than %d: use fewer matches or split the route",
			ErrInvalid, len(rules), maxRouteRules)
	}
	total := 0
	for _, r := range rules {
		if len(r.Matches) > maxMatchesPerRule {
			return fmt.Errorf("%w: a rule would need %d matches, more than %d", ErrInvalid, len(r.Matches), maxMatchesPerRule)
		}
		total += len(r.Matches)
	}
	if total > maxMatchesPerRoute {
		return fmt.Errorf("%w: the HTTPRoute would need %d matches, more than %d", ErrInvalid, total, maxMatchesPerRoute)
	}
	return nil
}
