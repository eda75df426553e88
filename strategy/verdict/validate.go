package verdict

import (
	"net/url"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/util/jsonpath"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// Bounds checked by ValidateTemplate.
const (
	// MinInterval is the shortest interval between measurements.
	MinInterval = time.Second
	// MaxRangePoints is Prometheus' limit on points per series in a range
	// query (duration / step).
	MaxRangePoints = 11000
)

// ValidateTemplate checks what the CRD schema cannot: every condition
// compiles, every placeholder names a declared arg or a rollout field,
// durations are positive and range queries within Prometheus' limits, and
// JSON paths parse. Each error names its field, as in
// "spec.metrics[0].successCondition: Invalid value: ...". An admission
// webhook can refuse the template with the list.
func ValidateTemplate(t *v1alpha1.AnalysisTemplate) field.ErrorList {
	spec := field.NewPath("spec")
	var errs field.ErrorList
	args := map[string]bool{}
	for i, a := range t.Spec.Args {
		if args[a.Name] {
			errs = append(errs, field.Duplicate(spec.Child("args").Index(i).Child("name"), a.Name))
		}
		args[a.Name] = true
	}
	if len(t.Spec.Metrics) == 0 {
		errs = append(errs, field.Required(spec.Child("metrics"), "at least one metric is required"))
	}
	names := map[string]bool{}
	for i := range t.Spec.Metrics {
		m := &t.Spec.Metrics[i]
		p := spec.Child("metrics").Index(i)
		if names[m.Name] {
			errs = append(errs, field.Duplicate(p.Child("name"), m.Name))
		}
		names[m.Name] = true
		errs = append(errs, validateConditions(m, p)...)
		errs = append(errs, validateSchedule(m, p)...)
		errs = append(errs, validateProvider(&m.Provider, p.Child("provider"), args)...)
	}
	return errs
}

func validateConditions(m *v1alpha1.Metric, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if m.SuccessCondition == "" && m.FailureCondition == "" {
		errs = append(errs, field.Required(p.Child("successCondition"),
			`a metric needs successCondition or failureCondition (CEL over result, e.g. "result[0] >= 0.99")`))
	}
	for _, c := range []struct{ name, expr string }{
		{"successCondition", m.SuccessCondition},
		{"failureCondition", m.FailureCondition},
	} {
		if c.expr == "" {
			continue
		}
		if _, err := Compile(c.expr); err != nil {
			errs = append(errs, field.Invalid(p.Child(c.name), c.expr, err.Error()))
		}
	}
	return errs
}

func validateSchedule(m *v1alpha1.Metric, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if m.Interval != nil && m.Interval.Duration < MinInterval {
		errs = append(errs, field.Invalid(p.Child("interval"), m.Interval.Duration.String(), "must be at least 1s"))
	}
	if m.InitialDelay != nil && m.InitialDelay.Duration < 0 {
		errs = append(errs, field.Invalid(p.Child("initialDelay"), m.InitialDelay.Duration.String(), "must not be negative"))
	}
	if m.Count != nil && *m.Count < 1 {
		errs = append(errs, field.Invalid(p.Child("count"), *m.Count, "must be at least 1"))
	}
	for _, l := range []struct {
		name string
		v    *int32
	}{
		{"failureLimit", &m.FailureLimit},
		{"inconclusiveLimit", &m.InconclusiveLimit},
		{"consecutiveErrorLimit", m.ConsecutiveErrorLimit},
	} {
		if l.v != nil && *l.v < 0 {
			errs = append(errs, field.Invalid(p.Child(l.name), *l.v, "must not be negative"))
		}
	}
	return errs
}

func validateProvider(mp *v1alpha1.MetricProvider, p *field.Path, args map[string]bool) field.ErrorList {
	set := 0
	for _, ok := range []bool{mp.Prometheus != nil, mp.Web != nil, mp.Job != nil} {
		if ok {
			set++
		}
	}
	switch {
	case set > 1:
		return field.ErrorList{field.Forbidden(p, "set exactly one of prometheus, web or job")}
	case mp.Prometheus != nil:
		return validatePrometheus(mp.Prometheus, p.Child("prometheus"), args)
	case mp.Web != nil:
		return validateWeb(mp.Web, p.Child("web"), args)
	case mp.Job != nil:
		return validateJob(mp.Job, p.Child("job"), args)
	default:
		return field.ErrorList{field.Required(p, "set one of prometheus, web or job")}
	}
}

func validatePrometheus(pm *v1alpha1.PrometheusMetric, p *field.Path, args map[string]bool) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, validateURL(pm.Address, p.Child("address"), nil)...)
	if strings.TrimSpace(pm.Query) == "" {
		errs = append(errs, field.Required(p.Child("query"), "a PromQL query is required"))
	} else if err := CheckPlaceholders(pm.Query, args); err != nil {
		errs = append(errs, field.Invalid(p.Child("query"), pm.Query, err.Error()))
	}
	errs = append(errs, validateTimeout(pm.Timeout, p.Child("timeout"))...)
	if r := pm.Range; r != nil {
		rp := p.Child("range")
		switch {
		case r.Duration.Duration <= 0:
			errs = append(errs, field.Invalid(rp.Child("duration"), r.Duration.Duration.String(), "must be positive"))
		case r.Step.Duration <= 0:
			errs = append(errs, field.Invalid(rp.Child("step"), r.Step.Duration.String(), "must be positive"))
		case r.Duration.Duration/r.Step.Duration > MaxRangePoints:
			errs = append(errs, field.Invalid(rp.Child("step"), r.Step.Duration.String(),
				"duration / step exceeds Prometheus' limit of 11000 points per series: raise step"))
		}
	}
	return append(errs, validateHeaders(pm.Headers, p.Child("headers"))...)
}

func validateWeb(w *v1alpha1.WebMetric, p *field.Path, args map[string]bool) field.ErrorList {
	errs := validateURL(w.URL, p.Child("url"), args)
	if _, err := ParseJSONPath(w.JSONPath); err != nil {
		errs = append(errs, field.Invalid(p.Child("jsonPath"), w.JSONPath, err.Error()))
	}
	errs = append(errs, validateTimeout(w.Timeout, p.Child("timeout"))...)
	return append(errs, validateHeaders(w.Headers, p.Child("headers"))...)
}

// validateURL checks an http(s) URL; with args non-nil it may hold
// placeholders, which are checked and then replaced by a dummy value.
func validateURL(raw string, p *field.Path, args map[string]bool) field.ErrorList {
	s := raw
	if args != nil {
		if err := CheckPlaceholders(raw, args); err != nil {
			return field.ErrorList{field.Invalid(p, raw, err.Error())}
		}
		s = dummyExpand(raw)
	} else if strings.Contains(raw, "{{") {
		return field.ErrorList{field.Invalid(p, raw, "placeholders are not allowed here")}
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return field.ErrorList{field.Invalid(p, raw, "must be an http:// or https:// URL with a host")}
	}
	if u.User != nil {
		return field.ErrorList{field.Invalid(p, "(redacted)", "must not carry credentials: use secretRef")}
	}
	return nil
}

// dummyExpand replaces every placeholder with "x", for syntax checks.
func dummyExpand(s string) string {
	out, _ := replace(s, func(string) (string, error) { return "x", nil })
	return out
}

func validateTimeout(d *metav1.Duration, p *field.Path) field.ErrorList {
	if d != nil && d.Duration <= 0 {
		return field.ErrorList{field.Invalid(p, d.Duration.String(), "must be positive")}
	}
	return nil
}

func validateHeaders(hs []v1alpha1.HTTPHeader, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, h := range hs {
		if !validHeaderName(h.Name) {
			errs = append(errs, field.Invalid(p.Index(i).Child("name"), h.Name, "must be an HTTP header name (letters, digits, !#$%&'*+-.^_`|~)"))
		}
		if strings.ContainsAny(h.Value, "\r\n\x00") {
			errs = append(errs, field.Invalid(p.Index(i).Child("value"), "(redacted)", "must not contain CR, LF or NUL"))
		}
	}
	return errs
}

func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", r)) {
			return false
		}
	}
	return true
}

// ParseJSONPath parses a JSON path in kubectl's syntax, such as
// {.data.successRate}; braces may be left out.
func ParseJSONPath(path string) (*jsonpath.JSONPath, error) {
	p := strings.TrimSpace(path)
	if !strings.HasPrefix(p, "{") {
		p = "{" + p + "}"
	}
	jp := jsonpath.New("metric").AllowMissingKeys(false)
	if err := jp.Parse(p); err != nil {
		return nil, err
	}
	return jp, nil
}
