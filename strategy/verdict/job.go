package verdict

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// Defaults rollgate gives a Job check's spec where it sets none.
const (
	// JobDeadlineSeconds bounds a Job that never ends (activeDeadlineSeconds).
	JobDeadlineSeconds = 600
	// JobTTLSeconds is how long a finished Job stays (ttlSecondsAfterFinished).
	JobTTLSeconds = 3600
)

// JobSpec decodes a Job check's spec (strict: an unknown field is an
// error naming it), with every string's placeholders expanded by expand
// (nil: none), and sets rollgate's defaults: restartPolicy Never,
// backoffLimit 0, activeDeadlineSeconds JobDeadlineSeconds and
// ttlSecondsAfterFinished JobTTLSeconds.
func JobSpec(jm *v1alpha1.JobMetric, expand func(string) (string, error)) (*batchv1.JobSpec, error) {
	if len(jm.Spec.Raw) == 0 {
		return nil, errors.New("spec is empty")
	}
	raw := jm.Spec.Raw
	if expand != nil {
		var doc any
		if err := json.Unmarshal(raw, &doc); err != nil {
			return nil, err
		}
		var err error
		if doc, err = expandStrings(doc, expand); err != nil {
			return nil, err
		}
		if raw, err = json.Marshal(doc); err != nil {
			return nil, err
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var spec batchv1.JobSpec
	if err := dec.Decode(&spec); err != nil {
		return nil, fmt.Errorf("not a batch/v1 JobSpec: %w", err)
	}
	if spec.Template.Spec.RestartPolicy == "" {
		spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
	}
	if spec.BackoffLimit == nil {
		spec.BackoffLimit = ptr.To[int32](0)
	}
	if spec.ActiveDeadlineSeconds == nil {
		spec.ActiveDeadlineSeconds = ptr.To[int64](JobDeadlineSeconds)
	}
	if spec.TTLSecondsAfterFinished == nil {
		spec.TTLSecondsAfterFinished = ptr.To[int32](JobTTLSeconds)
	}
	return &spec, nil
}

// expandStrings replaces the placeholders in every string of a decoded
// JSON document.
func expandStrings(v any, expand func(string) (string, error)) (any, error) {
	switch t := v.(type) {
	case string:
		return expand(t)
	case []any:
		for i := range t {
			e, err := expandStrings(t[i], expand)
			if err != nil {
				return nil, err
			}
			t[i] = e
		}
	case map[string]any:
		for k := range t {
			e, err := expandStrings(t[k], expand)
			if err != nil {
				return nil, err
			}
			t[k] = e
		}
	}
	return v, nil
}

// validateJob checks the spec of a Job check or a Job hook: it decodes
// as a JobSpec, has a container, a restart policy a Job accepts, and only
// known placeholders.
func validateJob(jm *v1alpha1.JobMetric, p *field.Path, args map[string]bool) field.ErrorList {
	sp := p.Child("spec")
	var bad error
	spec, err := JobSpec(jm, func(s string) (string, error) {
		if err := CheckPlaceholders(s, args); err != nil && bad == nil {
			bad = err
		}
		return s, nil
	})
	switch {
	case err != nil:
		return field.ErrorList{field.Invalid(sp, "(JobSpec)", err.Error())}
	case bad != nil:
		return field.ErrorList{field.Invalid(sp, "(JobSpec)", bad.Error())}
	case len(spec.Template.Spec.Containers) == 0:
		return field.ErrorList{field.Required(sp.Child("template", "spec", "containers"), "the Job needs a container")}
	case spec.Template.Spec.RestartPolicy != corev1.RestartPolicyNever && spec.Template.Spec.RestartPolicy != corev1.RestartPolicyOnFailure:
		return field.ErrorList{field.NotSupported(sp.Child("template", "spec", "restartPolicy"), spec.Template.Spec.RestartPolicy, []string{"Never", "OnFailure"})}
	case spec.Parallelism != nil && *spec.Parallelism != 1, spec.Completions != nil && *spec.Completions != 1:
		return field.ErrorList{field.Invalid(sp, "(JobSpec)", "a Job check or hook runs one pod to completion: leave parallelism and completions unset or 1")}
	}
	return nil
}
