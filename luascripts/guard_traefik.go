package luascripts

import (
	"fmt"
	"strings"
)

// guardIngressRoute reads a Traefik IngressRoute: each route's services
// (kind Service or no kind; Traefik weights, default 1) and its rule. A
// TraefikService entry is never the canary here: its own object is
// guarded when it is shifted.
func guardIngressRoute(g guardStep, spec map[string]any, t Target) error {
	isCanary := func(s map[string]any) bool {
		kind := str(s["kind"])
		return t.CanaryService != t.StableService && str(s["name"]) == t.CanaryService && (kind == "" || kind == "Service")
	}
	for i, r := range list(spec["routes"]) {
		route := object(r)
		share := shareOf(list(route["services"]), isCanary,
			func(s map[string]any) (float64, bool) { return number(s["weight"]) }, func(int) float64 { return 1 })
		if share == 0 {
			continue
		}
		if err := g.check(fmt.Sprintf("IngressRoute routes[%d]", i), share, traefikRuleConds(str(route["match"]))); err != nil {
			return err
		}
	}
	return nil
}

// maxRuleAlternatives bounds the alternatives a rule is expanded into
// (its disjunctive form); a rule with more is read as accepting every
// request.
const maxRuleAlternatives = 64

// traefikRuleConds reads a Traefik v3 rule as alternatives (ORed), each
// the conditions it requires (ANDed). Only what narrows for certain is
// kept: Path, PathPrefix, PathRegexp, Header, HeaderRegexp, Query and
// QueryRegexp outside a negation. Any other matcher (Host, Method, a
// negated one) is left out, which widens what the rule is taken to
// accept: the guard may refuse a step it could have allowed, never the
// reverse. A rule it cannot parse accepts every request.
func traefikRuleConds(rule string) []ruleConds {
	p := &ruleParser{toks: tokenizeRule(rule)}
	alts, ok := p.expr()
	if !ok || p.pos != len(p.toks) || len(alts) > maxRuleAlternatives {
		return []ruleConds{{}}
	}
	out := make([]ruleConds, 0, len(alts))
	for _, conj := range alts {
		rc := ruleConds{headers: map[string][]StringCond{}, query: map[string][]StringCond{}}
		for _, a := range conj {
			a.addTo(&rc)
		}
		out = append(out, rc)
	}
	return out
}

// ruleAtom is one matcher of a rule; neg is set under a negation.
type ruleAtom struct {
	name string
	args []string
	neg  bool
}

func (a ruleAtom) addTo(rc *ruleConds) {
	if a.neg {
		return
	}
	typ := CondExact
	name := a.name
	if n, ok := strings.CutSuffix(name, "Regexp"); ok {
		typ, name = CondRegex, n
	}
	switch {
	case name == "Path" && len(a.args) == 1:
		rc.path = &StringCond{Type: typ, Value: a.args[0]}
	case name == "PathPrefix" && typ == CondExact && len(a.args) == 1:
		rc.path = &StringCond{Type: CondPrefix, Value: a.args[0]}
	case name == "Header" && len(a.args) == 2:
		key := strings.ToLower(a.args[0])
		rc.headers[key] = append(rc.headers[key], StringCond{Type: typ, Value: a.args[1]})
	case name == "Query" && len(a.args) == 2:
		rc.query[a.args[0]] = append(rc.query[a.args[0]], StringCond{Type: typ, Value: a.args[1]})
	}
}

// tokenizeRule splits a rule into "(", ")", ",", "&&", "||", "!",
// quoted strings (kept with a leading quote mark) and names.
func tokenizeRule(s string) []string {
	var toks []string
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '(' || c == ')' || c == ',' || c == '!':
			toks = append(toks, string(c))
			i++
		case strings.HasPrefix(s[i:], "&&") || strings.HasPrefix(s[i:], "||"):
			toks = append(toks, s[i:i+2])
			i += 2
		case c == '`' || c == '"':
			end := strings.IndexByte(s[i+1:], c)
			if end < 0 {
				return append(toks, "?")
			}
			toks = append(toks, "'"+s[i+1:i+1+end])
			i += end + 2
		default:
			j := i
			for j < len(s) && (s[j] == '_' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= '0' && s[j] <= '9') {
				j++
			}
			if j == i {
				return append(toks, "?")
			}
			toks = append(toks, s[i:j])
			i = j
		}
	}
	return toks
}

// ruleParser reads tokens into alternatives of conjunctions.
type ruleParser struct {
	toks []string
	pos  int
}

func (p *ruleParser) peek() string {
	if p.pos < len(p.toks) {
		return p.toks[p.pos]
	}
	return ""
}

// expr: term ("||" term)*.
func (p *ruleParser) expr() ([][]ruleAtom, bool) {
	alts, ok := p.term()
	for ok && p.peek() == "||" {
		p.pos++
		var more [][]ruleAtom
		more, ok = p.term()
		alts = append(alts, more...)
		if len(alts) > maxRuleAlternatives {
			return nil, false
		}
	}
	return alts, ok
}

// term: factor ("&&" factor)*, distributed over the factors' alternatives.
func (p *ruleParser) term() ([][]ruleAtom, bool) {
	alts, ok := p.factor()
	for ok && p.peek() == "&&" {
		p.pos++
		var right [][]ruleAtom
		right, ok = p.factor()
		if !ok || len(alts)*len(right) > maxRuleAlternatives {
			return nil, false
		}
		var prod [][]ruleAtom
		for _, a := range alts {
			for _, b := range right {
				prod = append(prod, append(append([]ruleAtom(nil), a...), b...))
			}
		}
		alts = prod
	}
	return alts, ok
}

// factor: "!" factor | "(" expr ")" | name "(" args ")". A negated group
// adds no condition (it only narrows).
func (p *ruleParser) factor() ([][]ruleAtom, bool) {
	switch tok := p.peek(); {
	case tok == "!":
		p.pos++
		alts, ok := p.factor()
		if !ok {
			return nil, false
		}
		if len(alts) == 1 && len(alts[0]) == 1 {
			a := alts[0][0]
			a.neg = !a.neg
			return [][]ruleAtom{{a}}, true
		}
		return [][]ruleAtom{{}}, true
	case tok == "(":
		p.pos++
		alts, ok := p.expr()
		if !ok || p.peek() != ")" {
			return nil, false
		}
		p.pos++
		return alts, true
	case tok != "" && tok != "?" && !strings.HasPrefix(tok, "'") && !strings.ContainsAny(tok[:1], "),&|"):
		p.pos++
		if p.peek() != "(" {
			return nil, false
		}
		p.pos++
		a := ruleAtom{name: tok}
		for p.peek() != ")" {
			arg := p.peek()
			if !strings.HasPrefix(arg, "'") {
				return nil, false
			}
			a.args = append(a.args, arg[1:])
			p.pos++
			if p.peek() == "," {
				p.pos++
			}
		}
		p.pos++
		return [][]ruleAtom{{a}}, true
	}
	return nil, false
}
