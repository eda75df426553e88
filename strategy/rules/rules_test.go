package rules

import (
	"os"
	"strings"
	"testing"
	"time"
)

const example = `
freezes:
- name: black-friday
  reason: shop traffic peak
  rollouts:
    namespaces: [shop]
  from: 2026-11-27T00:00:00+01:00
  until: 2026-11-30T08:00:00+01:00
- name: incident-4711
  rollouts:
    matchLabels: {tier: payments}
  holds: Starts
windows:
- name: weekend
  timeZone: Europe/Berlin
  closed:
  - from: Fri 16:00
    to: Mon 08:00
- name: office-hours
  timeZone: Europe/Berlin
  rollouts:
    namespaces: [office]
  open:
  - days: Mon-Fri
    from: "09:00"
    to: "17:00"
`

func at(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func names(hs []Hold) string {
	var out []string
	for _, h := range hs {
		out = append(out, h.Name)
	}
	return strings.Join(out, ",")
}

func TestHoldsFollowTheWallClockOfTheZone(t *testing.T) {
	p, err := Parse([]byte(example))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		what, ns string
		labels   map[string]string
		now      string
		want     string
	}{
		{"a Wednesday noon in Berlin: nothing", "web", nil, "2026-11-25T11:00:00Z", ""},
		{"Friday 15:59 Berlin (14:59 UTC in winter)", "web", nil, "2026-11-20T14:59:00Z", ""},
		{"Friday 16:00 Berlin", "web", nil, "2026-11-20T15:00:00Z", "weekend"},
		{"Sunday night", "web", nil, "2026-11-22T22:00:00Z", "weekend"},
		{"Monday 07:59 Berlin", "web", nil, "2026-11-23T06:59:00Z", "weekend"},
		{"Monday 08:00 Berlin", "web", nil, "2026-11-23T07:00:00Z", ""},
		{"the freeze covers its namespace only", "shop", nil, "2026-11-27T12:00:00Z", "black-friday"},
		{"and only between from and until", "shop", nil, "2026-11-26T22:59:59Z", ""},
		{"until is the first instant it no longer holds", "shop", nil, "2026-11-30T07:00:00Z", ""},
		{"a freeze by label, and the weekend", "web", map[string]string{"tier": "payments"}, "2026-11-21T10:00:00Z", "incident-4711,weekend"},
		{"office hours: a Tuesday 08:59 Berlin is outside", "office", nil, "2026-11-24T07:59:00Z", "office-hours"},
		{"office hours: 09:00 is inside", "office", nil, "2026-11-24T08:00:00Z", ""},
		{"office hours: 17:00 is outside again", "office", nil, "2026-11-24T16:00:00Z", "office-hours"},
		// Europe/Berlin moves to summer time on Sunday 2026-03-29: 09:00
		// is then 07:00 UTC, no longer 08:00.
		{"summer time: Monday 09:00 Berlin is 07:00 UTC", "office", nil, "2026-03-30T07:00:00Z", ""},
		{"summer time: 06:59 UTC is 08:59 Berlin", "office", nil, "2026-03-30T06:59:00Z", "office-hours"},
		{"winter time the week before: 07:00 UTC is 08:00 Berlin", "office", nil, "2026-03-23T07:00:00Z", "office-hours"},
	}
	for _, c := range cases {
		got := names(p.Holds(c.ns, c.labels, at(t, c.now)))
		if got != c.want {
			t.Errorf("%s (%s in %s): held by %q, want %q", c.what, c.now, c.ns, got, c.want)
		}
	}
}

func TestHoldsSayUntilWhen(t *testing.T) {
	p, err := Parse([]byte(example))
	if err != nil {
		t.Fatal(err)
	}
	// Friday 2026-03-27 17:30 Berlin (CET): outside office hours until
	// Monday 09:00, which is summer time (CEST), 07:00 UTC.
	hs := p.Holds("office", nil, at(t, "2026-03-27T16:30:00Z"))
	var oh *Hold
	for i := range hs {
		if hs[i].Name == "office-hours" {
			oh = &hs[i]
		}
	}
	if oh == nil {
		t.Fatalf("office-hours does not hold: %+v", hs)
	}
	if want := at(t, "2026-03-30T07:00:00Z"); !oh.Until.Equal(want) {
		t.Errorf("until %s, want %s", oh.Until.UTC(), want)
	}
	if !oh.Steps || !oh.Window {
		t.Errorf("%+v: a window holding steps by default", oh)
	}
	if want := "window office-hours is outside its open hours until Mon 09:00 Europe/Berlin"; oh.Why != want {
		t.Errorf("why %q, want %q", oh.Why, want)
	}
	// The weekend window, entered Friday 16:00, holds until Monday 08:00.
	hs = p.Holds("web", nil, at(t, "2026-11-20T15:00:00Z"))
	if len(hs) != 1 || !hs[0].Until.Equal(at(t, "2026-11-23T07:00:00Z")) {
		t.Errorf("weekend: %+v, want one hold until 2026-11-23T07:00:00Z", hs)
	}
	hs = p.Holds("shop", map[string]string{"tier": "payments"}, at(t, "2026-11-28T10:00:00Z"))
	want := map[string]string{
		"black-friday":  "freeze black-friday (shop traffic peak) until 2026-11-30T08:00:00+01:00",
		"incident-4711": "freeze incident-4711",
	}
	for _, h := range hs {
		if w, ok := want[h.Name]; ok && h.Why != w {
			t.Errorf("%s: why %q, want %q", h.Name, h.Why, w)
		}
		if h.Name == "incident-4711" && (h.Steps || !h.Until.IsZero()) {
			t.Errorf("incident-4711 holds starts only, until lifted in Git: %+v", h)
		}
	}
}

func TestBadFilesAreRefusedNamingTheField(t *testing.T) {
	cases := map[string]struct{ file, want string }{
		"typo in a field": {`
freezes:
- name: a
  rollout: {namespaces: [x]}`, `unknown field "freezes[0].rollout"`},
		"unknown time zone": {`
windows:
- name: w
  timeZone: Europe/Berlinn
  closed: [{from: Fri 16:00, to: Mon 08:00}]`, `windows[0] (w).timeZone "Europe/Berlinn" is not a time zone: use an IANA name`},
		"both closed and open": {`
windows:
- name: w
  closed: [{from: Fri 16:00, to: Mon 08:00}]
  open: [{days: Mon, from: "09:00", to: "10:00"}]`, "sets both closed and open"},
		"no spans": {`
windows:
- name: w`, "windows[0] (w) has no spans"},
		"a bad day": {`
windows:
- name: w
  open: [{days: Mon-Fry, from: "09:00", to: "10:00"}]`, `windows[0] (w).open[0]: days: "Fry" is not a day`},
		"a bad time": {`
windows:
- name: w
  open: [{days: Mon, from: "9am", to: "10:00"}]`, `windows[0] (w).open[0]: from: "9am" is not a time of day`},
		"a point without a day": {`
windows:
- name: w
  closed: [{from: "16:00", to: Mon 08:00}]`, `windows[0] (w).closed[0]: from: "16:00" is not a point of the week`},
		"an empty span": {`
windows:
- name: w
  closed: [{days: Mon, from: "09:00", to: "09:00"}]`, "from and to are both 09:00"},
		"no name": {`
freezes:
- reason: x`, "freezes[0].name is empty"},
		"a name twice": {`
freezes:
- name: a
windows:
- name: a
  closed: [{from: Fri 16:00, to: Mon 08:00}]`, `windows[0].name "a" is also the name of freezes[0]`},
		"until before from": {`
freezes:
- name: a
  from: 2026-11-27T00:00:00Z
  until: 2026-11-26T00:00:00Z`, "freezes[0] (a): until 2026-11-26T00:00:00Z is not after from"},
		"holds misspelt": {`
freezes:
- name: a
  holds: starts`, `freezes[0].holds "starts" is not Steps or Starts`},
		"not YAML": {"freezes: [", "does not parse"},
	}
	for what, c := range cases {
		_, err := Parse([]byte(c.file))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", what, err, c.want)
		}
	}
	many := "freezes:\n" + strings.Repeat("- name: x\n", MaxEntries+1)
	if _, err := Parse([]byte(many)); err == nil || !strings.Contains(err.Error(), "at most 100") {
		t.Errorf("%d freezes: %v, want a bound", MaxEntries+1, err)
	}
	if p, err := Parse(nil); err != nil || len(p.Holds("x", nil, time.Now())) != 0 {
		t.Errorf("an empty file: %v", err)
	}
}

func TestOvernightAndWrappingSpans(t *testing.T) {
	p, err := Parse([]byte(`
windows:
- name: nights
  closed: [{days: "Mon-Fri", from: "22:00", to: "06:00"}]
- name: sat-to-mon
  closed: [{from: Sat 00:00, to: Mon 00:00}]
`))
	if err != nil {
		t.Fatal(err)
	}
	for now, want := range map[string]string{
		"2026-11-27T23:00:00Z": "nights",            // Friday 23:00
		"2026-11-28T05:59:00Z": "nights,sat-to-mon", // Saturday 05:59, the Friday night's end
		"2026-11-28T06:00:00Z": "sat-to-mon",
		"2026-11-29T23:59:00Z": "sat-to-mon", // Sunday night: wraps the week's end
		"2026-11-30T00:00:00Z": "",           // Monday 00:00
		"2026-11-30T22:00:00Z": "nights",
	} {
		if got := names(p.Holds("x", nil, at(t, now))); got != want {
			t.Errorf("%s: held by %q, want %q", now, got, want)
		}
	}
}

// The example in examples/release-rules/ parses, and its weekend window holds a
// Saturday.
func TestExampleParses(t *testing.T) {
	data, err := os.ReadFile("../../examples/release-rules/release-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(p.Holds("web", nil, at(t, "2026-12-05T12:00:00Z"))); got != "weekend" {
		t.Fatalf("a Saturday in web: held by %q, want weekend", got)
	}
}

func TestBudgets(t *testing.T) {
	p, err := Parse([]byte(`
budgets:
- name: shop
  maxInFlight: 2
- name: payments
  rollouts: {matchLabels: {tier: payments}}
  maxInFlight: 1
`))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range p.Budgets("shop", map[string]string{"tier": "payments"}) {
		got = append(got, b.Name)
	}
	if strings.Join(got, ",") != "shop,payments" {
		t.Fatalf("budgets %v, want shop and payments", got)
	}
	if bs := p.Budgets("shop", nil); len(bs) != 1 || bs[0].MaxInFlight != 2 {
		t.Fatalf("budgets %+v, want shop only", bs)
	}
	for file, want := range map[string]string{
		"budgets:\n- name: b\n  maxInFlight: 0\n":                      "budgets[0] (b).maxInFlight is 0: allow at least 1 release in flight (to stop every release, declare a freeze)",
		"budgets:\n- name: b\n":                                        "budgets[0] (b).maxInFlight is 0",
		"budgets:\n- name: cluster\n  maxInFlight: 1\n":                "budgets[0].name cluster is the name of the cluster's budget",
		"budgets:\n- name: b\n  maxInFlight: -1\n":                     "maxInFlight is -1",
		"budgets:\n- name: b\n  maxInflight: 2\n":                      `unknown field "budgets[0].maxInflight"`,
		"freezes:\n- name: b\nbudgets:\n- name: b\n  maxInFlight: 1\n": `budgets[0].name "b" is also the name of freezes[0]`,
	} {
		if _, err := Parse([]byte(file)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", file, err, want)
		}
	}
}
