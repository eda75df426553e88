// Package rules reads a Repository's release rules file
// (spec.releaseRules.path): freezes, weekly windows and budgets of
// releases in flight. It says which freezes and windows hold a Rollout at
// a given time and which budgets cover it. It is pure: the caller reads
// the file from Git and passes the clock; the places in a budget are the
// reconciler's to give (they depend on other Rollouts).
//
// A freeze is declared by a person and lasts until a merge removes it (or
// until its own until). A window is a recurring freeze on the wall clock
// of a time zone: closed spans hold releases inside them, open spans hold
// them outside. Time zones and daylight saving come from the IANA database
// embedded in the binary (time/tzdata), so a controller image without
// /usr/share/zoneinfo reads them the same.
package rules

import (
	"fmt"
	"slices"
	"strings"
	"time"
	_ "time/tzdata" // the zone database, for images without one

	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// MaxEntries bounds the freezes and the windows a file may declare (each).
const MaxEntries = 100

// File is a freezes file.
type File struct {
	// Freezes hold the Rollouts they cover until removed in Git, or
	// between from and until.
	Freezes []Freeze `json:"freezes,omitempty"`
	// Windows hold the Rollouts they cover on a weekly schedule.
	Windows []Window `json:"windows,omitempty"`
	// Budgets bound how many releases of the Rollouts they cover are in
	// flight at once; the others wait in a queue, first come first
	// served.
	Budgets []Budget `json:"budgets,omitempty"`
}

// Budget is at most MaxInFlight releases in flight among the Rollouts it
// covers.
type Budget struct {
	// Name names the budget in messages and in status.queue; unique in
	// the file.
	Name string `json:"name"`
	// Rollouts it covers; empty, every Rollout of the Repository.
	Rollouts Selector `json:"rollouts,omitempty"`
	// MaxInFlight is how many of them may release at once (at least 1).
	MaxInFlight int `json:"maxInFlight"`
}

// Holds says what a freeze or a window holds.
type Holds string

const (
	// HoldsSteps (the default) holds a release's start and each next
	// step. A release already past its last gate finishes.
	HoldsSteps Holds = "Steps"
	// HoldsStarts holds only the start of a new release: one under way
	// goes on.
	HoldsStarts Holds = "Starts"
)

// Freeze is one declared freeze.
type Freeze struct {
	// Name names the freeze in messages; unique in the file.
	Name string `json:"name"`
	// Reason is shown in the message of every Rollout it holds.
	Reason string `json:"reason,omitempty"`
	// Rollouts it covers; empty, every Rollout of the Repository.
	Rollouts Selector `json:"rollouts,omitempty"`
	// From and Until bound it in time (RFC 3339, with an offset); unset,
	// it holds from the merge that adds it until the merge that removes it.
	From  *time.Time `json:"from,omitempty"`
	Until *time.Time `json:"until,omitempty"`
	// Holds is Steps (default) or Starts.
	Holds Holds `json:"holds,omitempty"`
}

// Window is a weekly schedule in a time zone.
type Window struct {
	// Name names the window in messages; unique in the file.
	Name string `json:"name"`
	// TimeZone is an IANA zone such as Europe/Berlin; UTC when unset.
	TimeZone string `json:"timeZone,omitempty"`
	// Rollouts it covers; empty, every Rollout of the Repository.
	Rollouts Selector `json:"rollouts,omitempty"`
	// Closed spans hold releases inside them; open spans hold them
	// outside. Exactly one of the two is set.
	Closed []Span `json:"closed,omitempty"`
	Open   []Span `json:"open,omitempty"`
	// Holds is Steps (default) or Starts.
	Holds Holds `json:"holds,omitempty"`
}

// Span is a recurring stretch of the week on the window's wall clock:
// either days with a time of day ("days: Mon-Fri, from: 09:00, to:
// 17:00"; a to before from ends the next day), or two points of the week
// ("from: Fri 16:00, to: Mon 08:00").
type Span struct {
	Days string `json:"days,omitempty"`
	From string `json:"from"`
	To   string `json:"to"`
}

// Selector picks Rollouts by namespace and labels; both must match.
type Selector struct {
	Namespaces  []string          `json:"namespaces,omitempty"`
	MatchLabels map[string]string `json:"matchLabels,omitempty"`
}

func (s Selector) matches(namespace string, labels map[string]string) bool {
	if len(s.Namespaces) > 0 && !slices.Contains(s.Namespaces, namespace) {
		return false
	}
	for k, v := range s.MatchLabels {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Parsed is a checked file, ready to answer Holds.
type Parsed struct {
	freezes []Freeze
	windows []window
	budgets []Budget
}

type window struct {
	Window
	loc   *time.Location
	spans []interval
}

// interval is [start, end) in minutes of the week from Sunday 00:00 on
// the window's wall clock; end may pass the week's end (a span from
// Saturday into Monday).
type interval struct{ start, end int }

const (
	day  = 24 * 60
	week = 7 * day
)

// Parse reads and checks a freezes file. An error names the entry and the
// field, and says what is expected; unknown fields are errors, so a typo
// never silently widens or narrows a freeze.
func Parse(data []byte) (*Parsed, error) {
	var f File
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("does not parse: %v", err)
	}
	// Kubernetes' own strict decoding: field names match case-sensitively
	// and unknown or duplicate fields are errors.
	strict, err := kjson.UnmarshalStrict(js, &f, kjson.DisallowUnknownFields)
	if err == nil && len(strict) > 0 {
		err = strict[0]
	}
	if err != nil {
		return nil, fmt.Errorf("does not parse: %v", err)
	}
	if len(f.Freezes) > MaxEntries || len(f.Windows) > MaxEntries || len(f.Budgets) > MaxEntries {
		return nil, fmt.Errorf("declares %d freezes, %d windows and %d budgets; at most %d of each",
			len(f.Freezes), len(f.Windows), len(f.Budgets), MaxEntries)
	}
	p := &Parsed{}
	seen := map[string]string{}
	named := func(kind string, i int, name string) error {
		if name == "" {
			return fmt.Errorf("%s[%d].name is empty: give every entry a name, it is shown in the messages of the Rollouts it holds", kind, i)
		}
		if prev, ok := seen[name]; ok {
			return fmt.Errorf("%s[%d].name %q is also the name of %s: names must be unique", kind, i, name, prev)
		}
		seen[name] = fmt.Sprintf("%s[%d]", kind, i)
		return nil
	}
	for i, fr := range f.Freezes {
		if err := named("freezes", i, fr.Name); err != nil {
			return nil, err
		}
		if err := checkHolds(fmt.Sprintf("freezes[%d]", i), fr.Holds); err != nil {
			return nil, err
		}
		if fr.From != nil && fr.Until != nil && !fr.Until.After(*fr.From) {
			return nil, fmt.Errorf("freezes[%d] (%s): until %s is not after from %s", i, fr.Name,
				fr.Until.Format(time.RFC3339), fr.From.Format(time.RFC3339))
		}
		p.freezes = append(p.freezes, fr)
	}
	for i, w := range f.Windows {
		if err := named("windows", i, w.Name); err != nil {
			return nil, err
		}
		pw, err := parseWindow(fmt.Sprintf("windows[%d] (%s)", i, w.Name), w)
		if err != nil {
			return nil, err
		}
		p.windows = append(p.windows, pw)
	}
	for i, b := range f.Budgets {
		if err := named("budgets", i, b.Name); err != nil {
			return nil, err
		}
		if b.Name == "cluster" {
			return nil, fmt.Errorf("budgets[%d].name cluster is the name of the cluster's budget (the controller's --max-releases-in-flight): choose another", i)
		}
		if b.MaxInFlight < 1 {
			return nil, fmt.Errorf("budgets[%d] (%s).maxInFlight is %d: allow at least 1 release in flight (to stop every release, declare a freeze)",
				i, b.Name, b.MaxInFlight)
		}
		p.budgets = append(p.budgets, b)
	}
	return p, nil
}

// parseWindow checks window w, named at in messages, and resolves its
// time zone and spans.
func parseWindow(at string, w Window) (window, error) {
	if err := checkHolds(at, w.Holds); err != nil {
		return window{}, err
	}
	loc, err := time.LoadLocation(orDefault(w.TimeZone, "UTC"))
	if err != nil || w.TimeZone == "Local" {
		return window{}, fmt.Errorf("%s.timeZone %q is not a time zone: use an IANA name such as Europe/Berlin or America/New_York", at, w.TimeZone)
	}
	spans, field := w.Closed, "closed"
	switch {
	case len(w.Closed) > 0 && len(w.Open) > 0:
		return window{}, fmt.Errorf("%s sets both closed and open: a window holds releases inside its closed spans or outside its open spans; split it in two windows", at)
	case len(w.Open) > 0:
		spans, field = w.Open, "open"
	case len(w.Closed) == 0:
		return window{}, fmt.Errorf("%s has no spans: set closed (releases held inside) or open (releases held outside)", at)
	}
	pw := window{Window: w, loc: loc}
	for j, s := range spans {
		ivs, err := s.intervals()
		if err != nil {
			return window{}, fmt.Errorf("%s.%s[%d]: %v", at, field, j, err)
		}
		pw.spans = append(pw.spans, ivs...)
	}
	return pw, nil
}

// Budgets returns the budgets covering a Rollout in namespace with labels,
// in the file's order.
func (p *Parsed) Budgets(namespace string, labels map[string]string) []Budget {
	var out []Budget
	for _, b := range p.budgets {
		if b.Rollouts.matches(namespace, labels) {
			out = append(out, b)
		}
	}
	return out
}

// Covers reports whether s picks a Rollout in namespace with labels.
func (s Selector) Covers(namespace string, labels map[string]string) bool {
	return s.matches(namespace, labels)
}

func checkHolds(at string, h Holds) error {
	switch h {
	case "", HoldsSteps, HoldsStarts:
		return nil
	}
	return fmt.Errorf("%s.holds %q is not Steps or Starts", at, h)
}

var weekdays = map[string]time.Weekday{
	"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday,
	"thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday,
}

func weekday(s string) (time.Weekday, error) {
	d, ok := weekdays[strings.ToLower(strings.TrimSpace(s))]
	if !ok {
		return 0, fmt.Errorf("%q is not a day: use Mon, Tue, Wed, Thu, Fri, Sat or Sun", s)
	}
	return d, nil
}

// clock reads "HH:MM" as minutes of the day.
func clock(s string) (int, error) {
	t, err := time.Parse("15:04", strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("%q is not a time of day: use HH:MM, 24-hour (for example 09:00 or 17:30)", s)
	}
	return t.Hour()*60 + t.Minute(), nil
}

// days reads "Mon-Fri", "Sat,Sun", "Mon,Wed-Fri" or one day.
func days(s string) ([]time.Weekday, error) {
	var out []time.Weekday
	for _, part := range strings.Split(s, ",") {
		from, to, isRange := strings.Cut(part, "-")
		a, err := weekday(from)
		if err != nil {
			return nil, err
		}
		b := a
		if isRange {
			if b, err = weekday(to); err != nil {
				return nil, err
			}
		}
		for d := a; ; d = (d + 1) % 7 {
			if !slices.Contains(out, d) {
				out = append(out, d)
			}
			if d == b {
				break
			}
		}
	}
	return out, nil
}

func (s Span) intervals() ([]interval, error) {
	if s.Days != "" {
		ds, err := days(s.Days)
		if err != nil {
			return nil, fmt.Errorf("days: %v", err)
		}
		from, err := clock(s.From)
		if err != nil {
			return nil, fmt.Errorf("from: %v", err)
		}
		to, err := clock(s.To)
		if err != nil {
			return nil, fmt.Errorf("to: %v", err)
		}
		if from == to {
			return nil, fmt.Errorf("from and to are both %s: a span needs a length (to before from ends the next day)", s.From)
		}
		length := (to - from + day) % day
		out := make([]interval, 0, len(ds))
		for _, d := range ds {
			start := int(d)*day + from
			out = append(out, interval{start, start + length})
		}
		return out, nil
	}
	from, err := point(s.From)
	if err != nil {
		return nil, fmt.Errorf("from: %v", err)
	}
	to, err := point(s.To)
	if err != nil {
		return nil, fmt.Errorf("to: %v", err)
	}
	if from == to {
		return nil, fmt.Errorf("from and to are both %s: a span needs a length", s.From)
	}
	return []interval{{from, from + (to-from+week)%week}}, nil
}

// point reads "Fri 16:00" as minutes of the week.
func point(s string) (int, error) {
	d, hm, ok := strings.Cut(strings.TrimSpace(s), " ")
	if !ok {
		return 0, fmt.Errorf("%q is not a point of the week: use a day and a time (Fri 16:00), or set days and give times of day", s)
	}
	wd, err := weekday(d)
	if err != nil {
		return 0, err
	}
	m, err := clock(hm)
	if err != nil {
		return 0, err
	}
	return int(wd)*day + m, nil
}

// Hold is one freeze or window holding a Rollout now.
type Hold struct {
	// Name of the freeze or window.
	Name string
	// Window is true for a window, false for a freeze.
	Window bool
	// Why is the message: what holds, and until when if it knows.
	Why string
	// Steps is true when it holds each next step, not only the start of
	// a release (Holds: Steps).
	Steps bool
	// Until is the next time it may stop holding (the end of a span, the
	// freeze's until); zero when only a change in Git lifts it.
	Until time.Time
}

// Holds returns what holds a Rollout in namespace with labels at now, in
// the file's order.
func (p *Parsed) Holds(namespace string, labels map[string]string, now time.Time) []Hold {
	var out []Hold
	for _, f := range p.freezes {
		if !f.Rollouts.matches(namespace, labels) {
			continue
		}
		if f.From != nil && now.Before(*f.From) || f.Until != nil && !now.Before(*f.Until) {
			continue
		}
		h := Hold{Name: f.Name, Steps: f.Holds != HoldsStarts, Why: "freeze " + f.Name}
		if f.Reason != "" {
			h.Why += " (" + f.Reason + ")"
		}
		if f.Until != nil {
			h.Until = *f.Until
			h.Why += " until " + f.Until.Format(time.RFC3339)
		}
		out = append(out, h)
	}
	for _, w := range p.windows {
		if !w.Rollouts.matches(namespace, labels) {
			continue
		}
		local := now.In(w.loc)
		m := int(local.Weekday())*day + local.Hour()*60 + local.Minute()
		in := w.inside(m)
		if in == (len(w.Closed) > 0) {
			next := w.nextEdge(local)
			kind := "closed"
			if len(w.Open) > 0 {
				kind = "outside its open hours"
			}
			out = append(out, Hold{Name: w.Name, Window: true, Steps: w.Holds != HoldsStarts, Until: next,
				Why: fmt.Sprintf("window %s is %s until %s %s", w.Name, kind,
					next.In(w.loc).Format("Mon 15:04"), w.loc)})
		}
	}
	return out
}

func (w window) inside(m int) bool {
	for _, iv := range w.spans {
		if iv.start <= m && m < iv.end || iv.start <= m+week && m+week < iv.end {
			return true
		}
	}
	return false
}

// nextEdge is the first start or end of a span after local, as a time:
// each candidate is built on the wall clock of the window's zone, so a
// span from 09:00 stays at 09:00 across a change of daylight saving.
func (w window) nextEdge(local time.Time) time.Time {
	var best time.Time
	y, mo, d := local.Date()
	today := int(local.Weekday())
	for _, iv := range w.spans {
		for _, edge := range []int{iv.start, iv.end} {
			edge %= week
			ahead := (edge/day - today + 7) % 7
			for _, k := range []int{ahead, ahead + 7} {
				c := time.Date(y, mo, d+k, (edge%day)/60, edge%60, 0, 0, w.loc)
				if c.After(local) {
					if best.IsZero() || c.Before(best) {
						best = c
					}
					break
				}
			}
		}
	}
	return best
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Declares reports whether the file declares a freeze named name.
func (p *Parsed) Declares(name string) bool {
	return slices.ContainsFunc(p.freezes, func(f Freeze) bool { return f.Name == name })
}

// FreezeNames lists the names of the freezes, in the file's order.
func (p *Parsed) FreezeNames() []string {
	out := make([]string, 0, len(p.freezes))
	for _, f := range p.freezes {
		out = append(out, f.Name)
	}
	return out
}
