package luascripts

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// The routing guard reads a script's result, before anything is written,
// and refuses a step whose result would send to the canary requests that
// match none of the step's conditions, beyond the step's weight. It runs
// for every script, built-in or the user's, of the kinds whose routing
// rules it can read:
//
//	VirtualService.networking.istio.io   http, tls and tcp routes
//	HTTPProxy.projectcontour.io          routes and tcpproxy
//	ApisixRoute.apisix.apache.org        http routes
//	TraefikService.traefik.io            weighted services
//	IngressRoute.traefik.io              routes: services and rule
//	TrafficSplit.split.smi-spec.io       backends
//	Ingress dialects                     canary, canary-weight, canary-by-header,
//	                                     canary-by-query, canary-by-cookie
//	                                     (nginx, higress, mse, alb prefixes)
//
// For every rule that sends a share of its requests to the canary it asks:
// is that share within the step's weight (0 for a step with matches or
// without traffic)? If not, does every request the rule accepts match one
// of the step's matches (each condition of the step match holds for every
// request of the rule)? A rule that passes neither test refuses the step.
// The test is conservative: where rollgate cannot prove that a rule's
// condition implies the step's (a regular expression inside another), the
// step is refused, never waved through.

// guardMargin is the rounding a weight may exceed the step's by (half a
// percentage point: scripts round weights to integers).
const guardMargin = 0.005

// stepConds is a step match as conditions.
type stepConds struct {
	path    *StringCond
	headers map[string][]StringCond // lower-case names
	query   map[string][]StringCond
	text    string
}

// guardStep is what the guard knows of the step.
type guardStep struct {
	// share is the most a rule may send to the canary without matches.
	share   float64
	matches []stepConds
}

func newGuardStep(weight int32, matches []v1alpha1.HttpRouteMatch) guardStep {
	g := guardStep{}
	if weight > 0 {
		g.share = float64(weight) / 100
	}
	for _, m := range matches {
		s := stepConds{headers: map[string][]StringCond{}, query: map[string][]StringCond{}}
		var parts []string
		if p := m.Path; p != nil {
			typ, val := CondPrefix, "/"
			if p.Type != nil {
				typ = condType(string(*p.Type))
			}
			if p.Value != nil {
				val = *p.Value
			}
			s.path = &StringCond{Type: typ, Value: val}
			parts = append(parts, "path "+s.path.String())
		}
		for _, h := range m.Headers {
			typ := CondExact
			if h.Type != nil {
				typ = condType(string(*h.Type))
			}
			name := strings.ToLower(string(h.Name))
			s.headers[name] = append(s.headers[name], StringCond{Type: typ, Value: h.Value})
			parts = append(parts, fmt.Sprintf("header %s %s %q", h.Name, typ, h.Value))
		}
		for _, q := range m.QueryParams {
			typ := string(gatewayv1.QueryParamMatchExact)
			if q.Type != nil {
				typ = condType(string(*q.Type))
			}
			s.query[string(q.Name)] = append(s.query[string(q.Name)], StringCond{Type: typ, Value: q.Value})
			parts = append(parts, fmt.Sprintf("query %s %s %q", q.Name, typ, q.Value))
		}
		s.text = strings.Join(parts, " and ")
		g.matches = append(g.matches, s)
	}
	return g
}

func condType(t string) string {
	if t == string(gatewayv1.PathMatchPathPrefix) {
		return CondPrefix
	}
	return t
}

// ruleConds is what one routing rule requires of a request; a field the
// rule does not constrain is absent.
type ruleConds struct {
	path    *StringCond
	headers map[string][]StringCond // lower-case names
	query   map[string][]StringCond
}

// implies reports whether every request the rule accepts matches s.
func (r ruleConds) implies(s stepConds) bool {
	if s.path != nil && !coveredBy(*s.path, r.path) {
		return false
	}
	for name, conds := range s.headers {
		for _, c := range conds {
			if !coveredByAny(c, r.headers[name]) {
				return false
			}
		}
	}
	for name, conds := range s.query {
		for _, c := range conds {
			if !coveredByAny(c, r.query[name]) {
				return false
			}
		}
	}
	return true
}

func coveredBy(step StringCond, rule *StringCond) bool {
	if rule == nil {
		return false
	}
	ok, err := Covers(step, *rule)
	return err == nil && ok
}

func coveredByAny(step StringCond, rule []StringCond) bool {
	for i := range rule {
		if coveredBy(step, &rule[i]) {
			return true
		}
	}
	return false
}

// check refuses a rule sending share of its requests to the canary when
// that is more than the step allows. conds is nil for a rule that cannot
// match on requests (tcp, tls, a backend list).
func (g guardStep) check(rule string, share float64, conds []ruleConds) error {
	margin := 0.0
	if g.share > 0 {
		margin = guardMargin
	}
	if share <= g.share+margin {
		return nil
	}
	allowed := fmt.Sprintf("the step sends %s of the requests outside its matches", percent(g.share))
	if len(g.matches) == 0 {
		return fmt.Errorf("%s sends %s of its requests to the canary; the step's weight is %s", rule, percent(share), percent(g.share))
	}
	if len(conds) == 0 {
		return fmt.Errorf("%s sends %s of its requests to the canary without any condition, so requests that match none of the step's matches (%s) go there too; %s",
			rule, percent(share), g.describe(), allowed)
	}
	for i, c := range conds {
		if !g.impliedBy(c) {
			return fmt.Errorf("%s sends %s of its requests to the canary, but its match %d lets through requests that match none of the step's matches (%s); %s",
				rule, percent(share), i+1, g.describe(), allowed)
		}
	}
	return nil
}

func (g guardStep) impliedBy(c ruleConds) bool {
	for _, m := range g.matches {
		if c.implies(m) {
			return true
		}
	}
	return false
}

func (g guardStep) describe() string {
	texts := make([]string, 0, len(g.matches))
	for _, m := range g.matches {
		texts = append(texts, m.text)
	}
	return strings.Join(texts, "; or ")
}

func percent(f float64) string {
	return strconv.FormatFloat(math.Round(f*1000)/10, 'f', -1, 64) + "%"
}

// guardReader is the reader of one kind's routing rules.
type guardReader func(g guardStep, spec map[string]any, t Target) error

// guardFor returns the reader of the result of the script with key (without
// KeyPrefix), or nil for a kind the guard does not read.
func guardFor(key string) guardReader {
	switch key {
	case "VirtualService.networking.istio.io":
		return guardVirtualService
	case "HTTPProxy.projectcontour.io":
		return guardHTTPProxy
	case "ApisixRoute.apisix.apache.org":
		return guardApisixRoute
	case "TraefikService.traefik.io":
		return guardTraefikService
	case "IngressRoute.traefik.io":
		return guardIngressRoute
	case "TrafficSplit.split.smi-spec.io":
		return guardTrafficSplit
	}
	return nil
}

// checkCustom runs the guard on a custom resource script's result. The
// kind comes from the script's key, so a ConfigMap override is checked
// exactly as the built-in it replaces.
func checkCustom(s Script, in CustomInput, out ObjectData) error {
	if in.MirrorPercent > 0 && sameJSON(in.Data.Spec, out.Spec) {
		return scriptErr(s.Name, ErrInput, 0, "the step mirrors %d%% of requests (mirror) but the script left the spec "+
			"as declared: it does not copy requests to the canary; remove mirror from the step or use a script that reads obj.mirror",
			in.MirrorPercent)
	}
	read := guardFor(strings.TrimPrefix(s.Key, KeyPrefix))
	if read == nil {
		return nil
	}
	if err := read(newGuardStep(in.CanaryWeight, in.Matches), out.Spec, in.Target); err != nil {
		return scriptErr(s.Name, ErrMisroute, 0, "refused before writing: %v", err)
	}
	return nil
}

// sameJSON reports whether two specs encode to the same JSON (a number
// decoded from Lua may be a float where the input held an integer).
func sameJSON(a, b map[string]any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

// checkIngress runs the guard on an Ingress dialect's annotations.
func checkIngress(s Script, in IngressInput, annotations map[string]string) error {
	if err := guardIngress(newGuardStep(in.Weight, in.Matches), annotations); err != nil {
		return scriptErr(s.Name, ErrMisroute, 0, "refused before writing: %v", err)
	}
	return nil
}

// Helpers to read decoded results (map[string]any, []any, string, int64,
// float64, bool).

func field(m map[string]any, path ...string) any {
	var v any = m
	for _, k := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[k]
	}
	return v
}

func list(v any) []any {
	l, _ := v.([]any)
	return l
}

func object(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// number reads a weight; ok is false when absent.
func number(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case float64:
		return x, true
	case int:
		return float64(x), true
	case string:
		f, err := strconv.ParseFloat(x, 64)
		return f, err == nil
	}
	return 0, false
}

// shareOf is the canary's share of weighted entries: isCanary picks the
// canary entries, weight reads an entry's weight (ok false when unset),
// unset is the weight of an entry without one.
func shareOf(entries []any, isCanary func(map[string]any) bool, weight func(map[string]any) (float64, bool), unset func(n int) float64) float64 {
	var total, canary float64
	for _, e := range entries {
		m := object(e)
		w, ok := weight(m)
		if !ok {
			w = unset(len(entries))
		}
		total += w
		if isCanary(m) {
			canary += w
		}
	}
	if total <= 0 {
		return 0
	}
	return canary / total
}

// serviceHost reports whether host names service: the short name or
// "<service>.<namespace>...".
func serviceHost(host, service string) bool {
	return service != "" && (host == service || strings.HasPrefix(host, service+"."))
}
