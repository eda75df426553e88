package validation

import (
	"context"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/webhook"
	"github.com/rollgate/rollgate/reconciler/workload"
)

// rolloutPath is where Rollouts are validated.
const rolloutPath = "/validate-rollgate-dev-v1alpha1-rollout"

// rolloutValidator refuses a Rollout whose workloadRef names a workload
// that another enabled Rollout of the namespace already releases: two
// Rollouts would both drive it. (The reconciler also keeps the younger one
// Stalled and away from the workload, should it get in while the webhook
// was down.)
type rolloutValidator struct {
	decoder  admission.Decoder
	rollouts client.Reader
}

func (v *rolloutValidator) Handle(ctx context.Context, req admission.Request) admission.Response {
	var ro v1alpha1.Rollout
	if err := v.decoder.Decode(req, &ro); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	warnings := approvalWarnings(&ro)
	if ro.Spec.Disabled || ro.DeletionTimestamp != nil {
		return admission.Allowed("").WithWarnings(warnings...)
	}
	if req.Operation == admissionv1.Update {
		var old v1alpha1.Rollout
		if err := v.decoder.DecodeRaw(req.OldObject, &old); err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
		if old.Spec.WorkloadRef == ro.Spec.WorkloadRef && !old.Spec.Disabled {
			return admission.Allowed("").WithWarnings(warnings...) // already admitted with this workload
		}
	}
	ref := ro.Spec.WorkloadRef
	var list v1alpha1.RolloutList
	if err := v.rollouts.List(ctx, &list, client.InNamespace(req.Namespace),
		client.MatchingFields{workload.RolloutWorkloadIndex: workload.WorkloadKey(ref.Kind, ref.Name)}); err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	for _, other := range list.Items {
		if other.Name == req.Name || other.Spec.Disabled || other.DeletionTimestamp != nil || other.Spec.WorkloadRef.APIVersion != ref.APIVersion {
			continue
		}
		return admission.Denied(fmt.Sprintf("spec.workloadRef: %s %s is already released by Rollout %s; "+
			"a workload has one Rollout: change that Rollout instead, or set spec.disabled on it first", ref.Kind, ref.Name, other.Name))
	}
	return admission.Allowed("").WithWarnings(warnings...)
}

// approvalWarnings warns about approvals that can never open a gate: a
// step the Rollout does not have.
func approvalWarnings(ro *v1alpha1.Rollout) []string {
	n := len(ro.Spec.Strategy.Steps())
	var out []string
	for i, a := range ro.Spec.Approvals {
		if int(a.Step) > n {
			out = append(out, fmt.Sprintf("spec.approvals[%d].step: %d, but the Rollout has %d steps; this approval opens no gate (approve a step from 1 to %d)", i, a.Step, n, n))
		}
	}
	return out
}

// RolloutHook returns the Rollout validating webhook. Its failure policy is
// Ignore: with the controller down, Rollouts still apply, and the
// reconciler keeps a second Rollout of a workload Stalled.
func RolloutHook(d admission.Decoder, rollouts client.Reader) webhook.HookHandler {
	return webhook.HookHandler{
		Hook: webhook.Hook{
			Name: "rollouts.rollgate.dev",
			Path: rolloutPath,
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{v1alpha1.GroupVersion.Group}, APIVersions: []string{v1alpha1.GroupVersion.Version},
					Resources: []string{"rollouts"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope),
				},
			}},
			MatchConditions: specConditions(),
			FailurePolicy:   admissionregistrationv1.Ignore,
		},
		Handler: &rolloutValidator{decoder: d, rollouts: rollouts},
	}
}
