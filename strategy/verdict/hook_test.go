package verdict

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// TestValidateHooks: a hook is a url or a Job, never both nor neither; a
// Job hook is not a confirm hook, and its spec is checked as a Job
// check's, with the {{rollout.*}} placeholders only. Each error names the
// field to fix.
func TestValidateHooks(t *testing.T) {
	job := func(spec string) *v1alpha1.JobMetric {
		return &v1alpha1.JobMetric{Spec: runtime.RawExtension{Raw: []byte(spec)}}
	}
	smoke := job(`{"template": {"spec": {"containers": [{"name": "smoke", "image": "smoke:1",
		"args": ["http://{{rollout.canaryService}}.{{rollout.namespace}}.svc/", "{{rollout.canaryRevision}}", "{{rollout.step}}"]}]}}}`)
	for _, tc := range []struct {
		name  string
		hook  v1alpha1.Hook
		field string // "" when valid
		msg   string
	}{
		{"a url hook", v1alpha1.Hook{Name: "h", URL: "http://h/{{rollout.name}}"}, "", ""},
		{"a Job hook", v1alpha1.Hook{Name: "h", Job: smoke}, "", ""},
		{"neither", v1alpha1.Hook{Name: "h"}, "hooks[0]", "set exactly one of url (an HTTP call) or job"},
		{"both", v1alpha1.Hook{Name: "h", URL: "http://h", Job: smoke}, "hooks[0]", "set exactly one of url"},
		{"a confirm Job hook", v1alpha1.Hook{Name: "h", Job: smoke, Confirm: true}, "hooks[0].confirm", "confirm is for url hooks"},
		{"a Job without container", v1alpha1.Hook{Name: "h", Job: job(`{"template": {"spec": {}}}`)}, "hooks[0].job.spec.template.spec.containers", "the Job needs a container"},
		{"a Job spec that is no JobSpec", v1alpha1.Hook{Name: "h", Job: job(`{"template": {"spec": {"containerz": []}}}`)}, "hooks[0].job.spec", `unknown field "containerz"`},
		{"an arg in a Job hook", v1alpha1.Hook{Name: "h", Job: job(`{"template": {"spec": {"containers": [{"name": "c", "image": "{{args.image}}"}]}}}`)},
			"hooks[0].job.spec", "{{args.image}}"},
		{"an unknown placeholder", v1alpha1.Hook{Name: "h", Job: job(`{"template": {"spec": {"containers": [{"name": "c", "image": "{{rollout.image}}"}]}}}`)},
			"hooks[0].job.spec", "unknown placeholder {{rollout.image}}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := ValidateHooks([]v1alpha1.Hook{tc.hook}, field.NewPath("hooks"))
			if tc.field == "" {
				if len(errs) > 0 {
					t.Fatalf("refused: %v", errs)
				}
				return
			}
			if len(errs) != 1 || errs[0].Field != tc.field || !strings.Contains(errs[0].Error(), tc.msg) {
				t.Fatalf("= %v, want one error at %s saying %q", errs, tc.field, tc.msg)
			}
		})
	}
}
