// Package plantext words a release's plan the same way wherever it is
// shown: `rollgate plan` (text, Markdown, JSON) and the body of an approval
// pull request. It says what each step does to pods, traffic, pauses and
// checks, from the steps package strategy resolves.
package plantext

import (
	"fmt"
	"io"
	"strings"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/strategy"
)

// Traffic is the traffic one router carries at a step.
type Traffic struct {
	Router  string   `json:"router"`
	Split   string   `json:"split"`
	Matches []string `json:"matches,omitempty"`
	Headers string   `json:"requestHeaderModifier,omitempty"`
}

// RouterName names a trafficRoutings entry: what it routes and through what.
func RouterName(r v1alpha1.TrafficRoutingRef) string {
	switch {
	case r.Gateway != nil && r.Gateway.HTTPRouteName != nil:
		return fmt.Sprintf("HTTPRoute %s (Service %s)", *r.Gateway.HTTPRouteName, r.Service)
	case r.Ingress != nil:
		class := ""
		if r.Ingress.ClassType != "" {
			class = ", " + r.Ingress.ClassType
		}
		return fmt.Sprintf("Ingress %s (Service %s%s)", r.Ingress.Name, r.Service, class)
	}
	var refs []string
	for _, c := range r.CustomNetworkRefs {
		refs = append(refs, c.Kind+" "+c.Name)
	}
	return fmt.Sprintf("%s (Service %s)", strings.Join(refs, ", "), r.Service)
}

// TrafficOn describes traffic on one router.
func TrafficOn(router string, t strategy.Traffic) Traffic {
	rt := Traffic{Router: router}
	switch t.Mode {
	case strategy.TrafficOriginal:
		rt.Split = "as declared"
	case strategy.TrafficStable:
		rt.Split = "100% old"
	default:
		rt.Split = fmt.Sprintf("%d%% old / %d%% new", 100-t.Weight, t.Weight)
		if len(t.Matches) > 0 {
			rt.Split = "matching requests new, others old"
		}
		if t.Mirror > 0 {
			rt.Split = fmt.Sprintf("100%% old, %d%% copied to new", t.Mirror)
		}
	}
	for _, m := range t.Matches {
		rt.Matches = append(rt.Matches, matchText(m))
	}
	if h := t.RequestHeaderModifier; h != nil {
		var parts []string
		for _, x := range h.Set {
			parts = append(parts, fmt.Sprintf("set %s: %s", x.Name, x.Value))
		}
		for _, x := range h.Add {
			parts = append(parts, fmt.Sprintf("add %s: %s", x.Name, x.Value))
		}
		for _, x := range h.Remove {
			parts = append(parts, "remove "+x)
		}
		rt.Headers = strings.Join(parts, ", ")
	}
	return rt
}

// matchText is one match, its conditions joined by "and".
func matchText(m v1alpha1.HttpRouteMatch) string {
	var parts []string
	if p := m.Path; p != nil && p.Value != nil {
		typ := "PathPrefix"
		if p.Type != nil {
			typ = string(*p.Type)
		}
		parts = append(parts, fmt.Sprintf("path %s %s", typ, *p.Value))
	}
	for _, h := range m.Headers {
		parts = append(parts, fmt.Sprintf("header %s=%s", h.Name, h.Value))
	}
	for _, q := range m.QueryParams {
		parts = append(parts, fmt.Sprintf("query %s=%s", q.Name, q.Value))
	}
	return strings.Join(parts, " and ")
}

// TrafficText is a step's traffic; with several routers each is named.
func TrafficText(ts []Traffic, named bool) string {
	var parts []string
	for _, t := range ts {
		s := t.Split
		if len(t.Matches) > 0 {
			s += " (" + strings.Join(t.Matches, "; ") + ")"
		}
		if t.Headers != "" {
			s += ", new gets " + t.Headers
		}
		if named {
			s = t.Router + ": " + s
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// Cell escapes text for a Markdown table cell.
func Cell(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ")
}

// Row is one step of a plan as a Markdown table shows it.
type Row struct {
	Step                               int
	New, Old, Traffic, Pause, Analysis string
}

// MarkdownTable writes rows as a Markdown table; the row of step current
// (0: none) is marked as the step being approved.
func MarkdownTable(w io.Writer, rows []Row, current int) {
	fmt.Fprintln(w, "| Step | New | Old | Traffic | Pause | Analysis |")
	fmt.Fprintln(w, "|---:|---:|---:|---|---|---|")
	for _, r := range rows {
		step := fmt.Sprint(r.Step)
		if r.Step == current {
			step = "**→ " + step + "**"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", step, Cell(dash(r.New)), Cell(dash(r.Old)),
			Cell(dash(r.Traffic)), Cell(dash(r.Pause)), Cell(dash(r.Analysis)))
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
