package webhook

import (
	"context"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/workload"
)

// WorkloadPath is where the workload webhook is served.
const WorkloadPath = "/mutate-apps-v1-workloads"

// WorkloadHook returns the registration of the workload webhook: UPDATE of
// apps/v1 Deployments, StatefulSets and DaemonSets labelled
// rollgate.dev/controlled that change what rollgate holds (the match
// conditions of workloadConditions), failure policy Fail (such an update
// is refused rather than released unchecked when the webhook is down; see
// the package documentation for the way out).
func WorkloadHook(h admission.Handler) Hook {
	return Hook{
		Name:     "workloads.rollgate.dev",
		Path:     WorkloadPath,
		Mutating: true,
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
			Rule: admissionregistrationv1.Rule{
				APIGroups:   []string{"apps"},
				APIVersions: []string{"v1"},
				Resources:   []string{"deployments", "statefulsets", "daemonsets"},
				Scope:       ptr.To(admissionregistrationv1.NamespacedScope),
			},
		}},
		ObjectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: v1alpha1.LabelControlled, Operator: metav1.LabelSelectorOpExists,
		}}},
		MatchConditions: workloadConditions(),
		FailurePolicy:   admissionregistrationv1.Fail,
	}
}

// WorkloadHandler holds covered workloads on a template change and
// re-asserts the hold on every later update (see workload.Admit).
type WorkloadHandler struct {
	// Rollouts reads Rollouts through workload.RolloutWorkloadIndex (the
	// manager's cached client).
	Rollouts client.Reader
	// Decoder decodes the objects of a request.
	Decoder admission.Decoder
}

// Handle implements admission.Handler.
func (h *WorkloadHandler) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Update || req.SubResource != "" {
		return admission.Allowed("")
	}
	var oldObj, newObj client.Object
	switch req.Kind.Kind {
	case "Deployment":
		oldObj, newObj = &appsv1.Deployment{}, &appsv1.Deployment{}
	case "StatefulSet":
		oldObj, newObj = &appsv1.StatefulSet{}, &appsv1.StatefulSet{}
	case "DaemonSet":
		oldObj, newObj = &appsv1.DaemonSet{}, &appsv1.DaemonSet{}
	default:
		return admission.Allowed("")
	}
	if err := h.Decoder.DecodeRaw(req.OldObject, oldObj); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if err := h.Decoder.DecodeRaw(req.Object, newObj); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	u := workload.Update{Old: oldObj, New: newObj, FromRollgate: FieldManager(req) == workload.FieldOwner}
	if !u.FromRollgate {
		ro, err := workload.RolloutFor(ctx, h.Rollouts, req.Namespace, req.Kind.Kind, req.Name)
		if err != nil {
			return admission.Errored(http.StatusInternalServerError, err)
		}
		u.Rollout = ro
	}
	verdict, err := workload.Admit(u)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if verdict == workload.Unreadable {
		return admission.Allowed("").WithWarnings(unreadableWarning)
	}
	resp, err := patch(req.Object.Raw, newObj)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if len(resp.Patches) == 0 {
		return admission.Allowed("")
	}
	log.FromContext(ctx).Info("workload update admitted", "kind", req.Kind.Kind, "namespace", req.Namespace,
		"name", req.Name, "verdict", verdict, "manager", FieldManager(req))
	if w := warning(verdict, u.Rollout); w != "" {
		resp = resp.WithWarnings(w)
	}
	return resp
}

// unreadableWarning is the warning of an update admitted unchecked because
// the workload's control annotation cannot be read.
const unreadableWarning = "rollgate: the annotation " + v1alpha1.AnnotationControl + " of this workload is not what rollgate wrote, " +
	"so this update passes unchecked; remove the annotation and apply the workload again from Git (the Rollout's Stalled condition says more)"

func warning(v workload.Verdict, ro *v1alpha1.Rollout) string {
	switch v {
	case workload.Held:
		return fmt.Sprintf("rollgate: Rollout %s releases this new revision in steps; the workload is held at the old revision", ro.Name)
	case workload.Reasserted:
		return fmt.Sprintf("rollgate: a release by Rollout %s is in progress; its update strategy is kept and the declared one is restored at the end", ro.Name)
	case workload.Released:
		return "rollgate: no enabled Rollout covers this workload any more; the declared update strategy is restored"
	case workload.KeptHeld:
		return "rollgate: this workload was mid-release when its Rollout was deleted or disabled; it stays held as it stands " +
			"until a Rollout names it again or `rollgate handback` gives it back"
	}
	return ""
}

// workloadOwned are the only fields Admit changes; the patch touches
// nothing else.
var workloadOwned = Owned{
	Paths:       [][]string{{"spec", "paused"}, {"spec", "strategy"}, {"spec", "updateStrategy"}},
	Labels:      []string{v1alpha1.LabelControlled},
	Annotations: []string{v1alpha1.AnnotationControl},
}

// patch returns the JSON patch from the raw object to the raw object with
// the owned fields of obj copied in.
func patch(raw []byte, obj client.Object) (admission.Response, error) {
	return workloadOwned.Patch(raw, obj)
}
