package luascripts

import (
	"fmt"
	"regexp"
	"strings"
)

// Readers of the routing rules of each guarded kind (see guard.go).

// guardVirtualService reads an Istio VirtualService: http routes with
// their match requests, tls and tcp routes by weight only. A destination
// is the canary when its host is the canary Service, or when its subset
// is "canary" on the stable Service's host.
func guardVirtualService(g guardStep, spec map[string]any, t Target) error {
	isCanary := func(d map[string]any) bool {
		dest := object(d["destination"])
		host := str(dest["host"])
		if t.CanaryService != t.StableService && serviceHost(host, t.CanaryService) {
			return true
		}
		return serviceHost(host, t.StableService) && str(dest["subset"]) == "canary"
	}
	weight := func(d map[string]any) (float64, bool) { return number(d["weight"]) }
	unset := func(n int) float64 {
		if n == 1 {
			return 100
		}
		return 0
	}
	for _, section := range []string{"http", "tls", "tcp"} {
		for i, r := range list(spec[section]) {
			route := object(r)
			share := shareOf(list(route["route"]), isCanary, weight, unset)
			if share == 0 {
				continue
			}
			name := fmt.Sprintf("%s[%d]", section, i)
			if n := str(route["name"]); n != "" {
				name = fmt.Sprintf("%s route %q", section, n)
			}
			var conds []ruleConds
			if section == "http" {
				conds = istioMatches(list(route["match"]))
			}
			if err := g.check("VirtualService "+name, share, conds); err != nil {
				return err
			}
		}
	}
	return nil
}

// istioMatches reads an http route's match requests; no match list
// accepts every request.
func istioMatches(matches []any) []ruleConds {
	if len(matches) == 0 {
		return []ruleConds{{}}
	}
	out := make([]ruleConds, 0, len(matches))
	for _, m := range matches {
		mr := object(m)
		rc := ruleConds{headers: map[string][]StringCond{}, query: map[string][]StringCond{}}
		if uri := object(mr["uri"]); uri != nil {
			c := istioCond(uri)
			c.IgnoreCase = mr["ignoreUriCase"] == true && c.Type != CondRegex
			rc.path = &c
		}
		for name, v := range object(mr["headers"]) {
			rc.headers[strings.ToLower(name)] = append(rc.headers[strings.ToLower(name)], istioCond(object(v)))
		}
		for name, v := range object(mr["queryParams"]) {
			rc.query[name] = append(rc.query[name], istioCond(object(v)))
		}
		out = append(out, rc)
	}
	return out
}

// istioCond reads an Istio StringMatch; an empty one is presence.
func istioCond(sm map[string]any) StringCond {
	switch {
	case sm["exact"] != nil:
		return StringCond{Type: CondExact, Value: str(sm["exact"])}
	case sm["prefix"] != nil:
		return StringCond{Type: CondPrefix, Value: str(sm["prefix"])}
	case sm["regex"] != nil:
		return StringCond{Type: CondRegex, Value: str(sm["regex"])}
	}
	return StringCond{Type: CondPrefix}
}

// guardHTTPProxy reads a Contour HTTPProxy: routes with their conditions
// and spec.tcpproxy by weight only. Without any weight, services share
// evenly.
func guardHTTPProxy(g guardStep, spec map[string]any, t Target) error {
	isCanary := func(s map[string]any) bool {
		return t.CanaryService != t.StableService && str(s["name"]) == t.CanaryService
	}
	check := func(name string, services []any, conds []ruleConds) error {
		anyWeight := false
		for _, s := range services {
			_, ok := number(object(s)["weight"])
			anyWeight = anyWeight || ok
		}
		unset := func(int) float64 {
			if anyWeight {
				return 0
			}
			return 1
		}
		share := shareOf(services, isCanary, func(s map[string]any) (float64, bool) { return number(s["weight"]) }, unset)
		if share == 0 {
			return nil
		}
		return g.check("HTTPProxy "+name, share, conds)
	}
	for i, r := range list(spec["routes"]) {
		route := object(r)
		if err := check(fmt.Sprintf("routes[%d]", i), list(route["services"]), []ruleConds{contourConds(list(route["conditions"]))}); err != nil {
			return err
		}
	}
	if tcp := object(spec["tcpproxy"]); tcp != nil {
		return check("tcpproxy", list(tcp["services"]), nil)
	}
	return nil
}

// contourConds reads a route's conditions (all ANDed).
func contourConds(conditions []any) ruleConds {
	rc := ruleConds{headers: map[string][]StringCond{}, query: map[string][]StringCond{}}
	for _, c := range conditions {
		cm := object(c)
		if p, ok := contourCond(cm); ok {
			rc.path = &p
		}
		if h := object(cm["header"]); h != nil {
			if c, ok := contourCond(h); ok {
				name := strings.ToLower(str(h["name"]))
				rc.headers[name] = append(rc.headers[name], c)
			}
		}
		if q := object(cm["queryParameter"]); q != nil {
			if c, ok := contourCond(q); ok {
				rc.query[str(q["name"])] = append(rc.query[str(q["name"])], c)
			}
		}
	}
	return rc
}

func contourCond(c map[string]any) (StringCond, bool) {
	fold := c["ignoreCase"] == true
	switch {
	case c["exact"] != nil:
		return StringCond{Type: CondExact, Value: str(c["exact"]), IgnoreCase: fold}, true
	case c["prefix"] != nil:
		return StringCond{Type: CondPrefix, Value: str(c["prefix"]), IgnoreCase: fold}, true
	case c["regex"] != nil:
		return StringCond{Type: CondRegex, Value: str(c["regex"])}, true
	case c["present"] == true:
		return StringCond{Type: CondPrefix}, true
	}
	return StringCond{}, false
}

// guardApisixRoute reads an APISIX ApisixRoute: http routes with their
// paths and exprs. A backend without a weight counts 100, a lone backend
// takes everything.
func guardApisixRoute(g guardStep, spec map[string]any, t Target) error {
	isCanary := func(b map[string]any) bool {
		name := str(b["serviceName"])
		if t.CanaryService != t.StableService {
			return name == t.CanaryService
		}
		return name == t.StableService && str(b["subset"]) == "canary"
	}
	for i, r := range list(spec["http"]) {
		route := object(r)
		backends := list(route["backends"])
		share := shareOf(backends, isCanary, func(b map[string]any) (float64, bool) {
			if len(backends) == 1 {
				return 1, true
			}
			return number(b["weight"])
		}, func(int) float64 { return 100 })
		if share == 0 {
			continue
		}
		name := fmt.Sprintf("http[%d]", i)
		if n := str(route["name"]); n != "" {
			name = fmt.Sprintf("http route %q", n)
		}
		if err := g.check("ApisixRoute "+name, share, apisixConds(object(route["match"]))); err != nil {
			return err
		}
	}
	return nil
}

// apisixConds reads a route's match: its paths are ORed (one rule per
// path), its exprs ANDed with them. APISIX regular expressions search the
// string; one is taken as implying only the same expression of the step.
func apisixConds(match map[string]any) []ruleConds {
	base := ruleConds{headers: map[string][]StringCond{}, query: map[string][]StringCond{}}
	for _, e := range list(match["exprs"]) {
		em := object(e)
		subj := object(em["subject"])
		var c StringCond
		switch str(em["op"]) {
		case "Equal":
			c = StringCond{Type: CondExact, Value: str(em["value"])}
		case "RegexMatch":
			c = StringCond{Type: CondRegex, Value: str(em["value"])}
		default:
			continue
		}
		switch str(subj["scope"]) {
		case "Header":
			name := strings.ToLower(str(subj["name"]))
			base.headers[name] = append(base.headers[name], c)
		case "Query":
			base.query[str(subj["name"])] = append(base.query[str(subj["name"])], c)
		case "Path":
			c := c
			base.path = &c
		}
	}
	paths := list(match["paths"])
	if len(paths) == 0 || base.path != nil {
		return []ruleConds{base}
	}
	out := make([]ruleConds, 0, len(paths))
	for _, p := range paths {
		rc := base
		ps := str(p)
		c := StringCond{Type: CondExact, Value: ps}
		if strings.HasSuffix(ps, "*") {
			c = StringCond{Type: CondPrefix, Value: strings.TrimSuffix(ps, "*")}
		}
		rc.path = &c
		out = append(out, rc)
	}
	return out
}

// guardTraefikService reads spec.weighted.services (weight only) and the
// main service of spec.mirroring, which answers every request (its mirrors
// only get copies).
func guardTraefikService(g guardStep, spec map[string]any, t Target) error {
	services := list(field(spec, "weighted", "services"))
	isCanary := func(s map[string]any) bool {
		return t.CanaryService != t.StableService && str(s["name"]) == t.CanaryService
	}
	if m := object(spec["mirroring"]); m != nil && isCanary(m) {
		if err := g.check("TraefikService mirroring (its main service answers every request)", 1, nil); err != nil {
			return err
		}
	}
	share := shareOf(services, isCanary, func(s map[string]any) (float64, bool) { return number(s["weight"]) }, func(int) float64 { return 1 })
	return g.check("TraefikService weighted services", share, nil)
}

// guardTrafficSplit reads spec.backends: weight only.
func guardTrafficSplit(g guardStep, spec map[string]any, t Target) error {
	backends := list(spec["backends"])
	isCanary := func(b map[string]any) bool {
		return t.CanaryService != t.StableService && str(b["service"]) == t.CanaryService
	}
	share := shareOf(backends, isCanary, func(b map[string]any) (float64, bool) { return number(b["weight"]) }, func(int) float64 { return 0 })
	return g.check("TrafficSplit backends", share, nil)
}

// ingressPrefixes are the canary annotation dialects the guard reads.
var ingressPrefixes = []string{
	"nginx.ingress.kubernetes.io/", "higress.io/", "mse.ingress.kubernetes.io/", "alb.ingress.kubernetes.io/",
}

// guardIngress reads the canary Ingress's annotations: its hosts and
// paths are the user's, so only the canary rules matter: the weight, and
// the requests a header, query or cookie rule sends to the canary.
func guardIngress(g guardStep, ann map[string]string) error {
	for _, p := range ingressPrefixes {
		if ann[p+"canary"] != "true" {
			continue
		}
		if w, ok := number(ann[p+"canary-weight"]); ok && w > 0 {
			total := 100.0
			if t, ok := number(ann[p+"canary-weight-total"]); ok && t > 0 {
				total = t
			}
			if err := g.check(p+"canary-weight", w/total, nil); err != nil {
				return err
			}
		}
		for _, kind := range []string{"header", "query"} {
			name := ann[p+"canary-by-"+kind]
			if name == "" {
				continue
			}
			c := StringCond{Type: CondExact, Value: "always"}
			if v, ok := ann[p+"canary-by-"+kind+"-value"]; ok {
				c = StringCond{Type: CondExact, Value: v}
			} else if v, ok := ann[p+"canary-by-"+kind+"-pattern"]; ok {
				c = StringCond{Type: CondRegex, Value: v}
			}
			rc := ruleConds{headers: map[string][]StringCond{}, query: map[string][]StringCond{}}
			if kind == "header" {
				rc.headers[strings.ToLower(name)] = []StringCond{c}
			} else {
				rc.query[name] = []StringCond{c}
			}
			rule := fmt.Sprintf("%scanary-by-%s %q (%s)", p, kind, name, c)
			if err := g.check(rule, 1, []ruleConds{rc}); err != nil {
				return err
			}
		}
		if cookie := ann[p+"canary-by-cookie"]; cookie != "" {
			value := "always"
			if v, ok := ann[p+"canary-by-cookie-value"]; ok {
				value = v
			}
			if !g.cookieCovered(cookie, value) {
				return fmt.Errorf("%scanary-by-cookie sends requests with the cookie %s=%s to the canary, but they match none of the step's matches (%s)",
					p, cookie, value, g.describe())
			}
		}
	}
	return nil
}

// cookieCovered reports whether requests carrying the cookie name=value
// match one of the step's matches: a match whose only condition is a
// Cookie header expression accepting that cookie (the documented way to
// ask for a dialect's cookie rule; an expression such as ^NAME=VALUE$,
// which a router matching the whole header would apply to requests with
// that cookie alone, is taken the way the dialects take it), or Kruise
// Rollout's convention, a header named canary-by-cookie whose value is the
// cookie's name.
func (g guardStep) cookieCovered(name, value string) bool {
	for _, m := range g.matches {
		if m.path != nil || len(m.query) > 0 || len(m.headers) != 1 {
			continue
		}
		for h, conds := range m.headers {
			if h == "canary-by-cookie" && len(conds) == 1 && conds[0].Type == CondExact && conds[0].Value == name {
				return true
			}
			if h != "cookie" || len(conds) != 1 || conds[0].Type != CondRegex {
				continue
			}
			re, err := regexp.Compile(conds[0].Value)
			pair := name + "=" + value
			if err == nil && re.MatchString(pair) {
				return true
			}
		}
	}
	return g.share >= 1-guardMargin
}
