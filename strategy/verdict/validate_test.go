package verdict

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

func validTemplate() *v1alpha1.AnalysisTemplate {
	return &v1alpha1.AnalysisTemplate{Spec: v1alpha1.AnalysisTemplateSpec{
		Args: []v1alpha1.TemplateArg{{Name: "service"}},
		Metrics: []v1alpha1.Metric{
			{
				Name:             "error-rate",
				Interval:         dur(time.Minute),
				SuccessCondition: "result[0] < 0.05",
				Provider: v1alpha1.MetricProvider{Prometheus: &v1alpha1.PrometheusMetric{
					Address: "http://prometheus:9090",
					Query:   `sum(rate(http_requests_total{service="{{args.service}}",code=~"5.."}[1m]))`,
					Range:   &v1alpha1.PrometheusRange{Duration: metav1.Duration{Duration: 10 * time.Minute}, Step: metav1.Duration{Duration: time.Minute}},
				}},
			},
			{
				Name:             "web",
				FailureCondition: "result < 0.9",
				Provider: v1alpha1.MetricProvider{Web: &v1alpha1.WebMetric{
					URL:      "https://status.example.com/{{rollout.namespace}}/{{args.service}}",
					JSONPath: "{.data.successRate}",
				}},
			},
		},
	}}
}

func TestValidateTemplateAcceptsValid(t *testing.T) {
	if errs := ValidateTemplate(validTemplate()); len(errs) > 0 {
		t.Fatalf("ValidateTemplate(valid) = %v", errs.ToAggregate())
	}
}

func TestValidateTemplate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*v1alpha1.AnalysisTemplate)
		want   string
	}{
		{"bad success condition", func(t *v1alpha1.AnalysisTemplate) { t.Spec.Metrics[0].SuccessCondition = "result[0] <" },
			`spec.metrics[0].successCondition: Invalid value: "result[0] <": ERROR: <input>:1:12: Syntax error`},
		{"non-bool failure condition", func(t *v1alpha1.AnalysisTemplate) { t.Spec.Metrics[1].FailureCondition = "result * 2.0" },
			"spec.metrics[1].failureCondition: Invalid value: \"result * 2.0\": must evaluate to a bool"},
		{"no condition", func(t *v1alpha1.AnalysisTemplate) { t.Spec.Metrics[0].SuccessCondition = "" },
			"spec.metrics[0].successCondition: Required value"},
		{"undeclared arg in query", func(t *v1alpha1.AnalysisTemplate) {
			t.Spec.Metrics[0].Provider.Prometheus.Query = "x{a=\"{{args.nope}}\"}"
		}, `spec.metrics[0].provider.prometheus.query: Invalid value: "x{a=\"{{args.nope}}\"}": bad placeholder: {{args.nope}}: the template has no arg "nope"`},
		{"unknown placeholder in url", func(t *v1alpha1.AnalysisTemplate) { t.Spec.Metrics[1].Provider.Web.URL = "http://x/{{rollout.image}}" },
			"spec.metrics[1].provider.web.url: Invalid value: \"http://x/{{rollout.image}}\": bad placeholder: unknown placeholder {{rollout.image}}"},
		{"interval too short", func(t *v1alpha1.AnalysisTemplate) { t.Spec.Metrics[0].Interval = dur(100 * time.Millisecond) },
			"spec.metrics[0].interval: Invalid value: \"100ms\": must be at least 1s"},
		{"negative initial delay", func(t *v1alpha1.AnalysisTemplate) { t.Spec.Metrics[0].InitialDelay = dur(-time.Second) },
			"spec.metrics[0].initialDelay"},
		{"negative limit", func(t *v1alpha1.AnalysisTemplate) { t.Spec.Metrics[0].ConsecutiveErrorLimit = i32(-1) },
			"spec.metrics[0].consecutiveErrorLimit: Invalid value: -1: must not be negative"},
		{"range too many points", func(t *v1alpha1.AnalysisTemplate) {
			t.Spec.Metrics[0].Provider.Prometheus.Range.Step = metav1.Duration{Duration: 10 * time.Millisecond}
		}, "spec.metrics[0].provider.prometheus.range.step: Invalid value: \"10ms\": duration / step exceeds"},
		{"zero timeout", func(t *v1alpha1.AnalysisTemplate) { t.Spec.Metrics[1].Provider.Web.Timeout = dur(0) },
			"spec.metrics[1].provider.web.timeout: Invalid value: \"0s\": must be positive"},
		{"bad json path", func(t *v1alpha1.AnalysisTemplate) { t.Spec.Metrics[1].Provider.Web.JSONPath = "{.data[}" },
			"spec.metrics[1].provider.web.jsonPath: Invalid value"},
		{"two providers", func(t *v1alpha1.AnalysisTemplate) {
			t.Spec.Metrics[1].Provider.Prometheus = t.Spec.Metrics[0].Provider.Prometheus
		},
			"spec.metrics[1].provider: Forbidden: set exactly one of prometheus, web or job"},
		{"address with credentials", func(t *v1alpha1.AnalysisTemplate) {
			t.Spec.Metrics[0].Provider.Prometheus.Address = "http://u:secret@prom:9090"
		},
			`spec.metrics[0].provider.prometheus.address: Invalid value: "(redacted)": must not carry credentials`},
		{"placeholder in address", func(t *v1alpha1.AnalysisTemplate) {
			t.Spec.Metrics[0].Provider.Prometheus.Address = "http://{{args.service}}:9090"
		},
			"spec.metrics[0].provider.prometheus.address: Invalid value: \"http://{{args.service}}:9090\": placeholders are not allowed here"},
		{"bad header", func(t *v1alpha1.AnalysisTemplate) {
			t.Spec.Metrics[0].Provider.Prometheus.Headers = []v1alpha1.HTTPHeader{{Name: "X Org", Value: "1"}}
		}, "spec.metrics[0].provider.prometheus.headers[0].name"},
		{"duplicate metric", func(t *v1alpha1.AnalysisTemplate) { t.Spec.Metrics[1].Name = "error-rate" },
			"spec.metrics[1].name: Duplicate value: \"error-rate\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmpl := validTemplate()
			tc.mutate(tmpl)
			errs := ValidateTemplate(tmpl)
			if len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.want) {
				t.Fatalf("ValidateTemplate errors = %v\nwant one containing %q", errs.ToAggregate(), tc.want)
			}
		})
	}
}

// TestValidateJobCheck: a Job check's spec must decode as a JobSpec with a
// container, a Job's restart policy, one pod and known placeholders.
func TestValidateJobCheck(t *testing.T) {
	job := func(spec string) *v1alpha1.AnalysisTemplate {
		tpl := validTemplate()
		tpl.Spec.Metrics[1].Provider = v1alpha1.MetricProvider{Job: &v1alpha1.JobMetric{Spec: runtime.RawExtension{Raw: []byte(spec)}}}
		return tpl
	}
	ok := `{"template": {"spec": {"containers": [{"name": "smoke", "image": "smoke:1", "args": ["http://{{rollout.canaryService}}/", "{{args.service}}"]}]}}}`
	if errs := ValidateTemplate(job(ok)); len(errs) > 0 {
		t.Fatalf("a valid Job check: %v", errs.ToAggregate())
	}
	for _, tc := range []struct{ name, spec, want string }{
		{"unknown field", `{"template": {"spec": {"containerz": []}}}`, `spec.metrics[1].provider.job.spec: Invalid value: "(JobSpec)": not a batch/v1 JobSpec: json: unknown field "containerz"`},
		{"no container", `{"template": {"spec": {}}}`, "spec.metrics[1].provider.job.spec.template.spec.containers: Required value: the Job needs a container"},
		{"restart policy Always", `{"template": {"spec": {"restartPolicy": "Always", "containers": [{"name": "c", "image": "i"}]}}}`,
			`spec.metrics[1].provider.job.spec.template.spec.restartPolicy: Unsupported value: "Always": supported values: "Never", "OnFailure"`},
		{"parallel pods", `{"parallelism": 3, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}`, "runs one pod to completion"},
		{"unknown arg", `{"template": {"spec": {"containers": [{"name": "c", "image": "{{args.nope}}"}]}}}`, `the template has no arg "nope"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := ValidateTemplate(job(tc.spec))
			if len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), tc.want) {
				t.Fatalf("ValidateTemplate = %v, want %q", errs.ToAggregate(), tc.want)
			}
		})
	}
}
