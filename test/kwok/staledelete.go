package kwok

import (
	"context"
	"fmt"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// staleDeleteGuard is the name of the ValidatingAdmissionPolicy (and its
// binding) that refuses kwok's stale pod deletions.
//
// kwok plays a kubelet's last step for a pod that has a deletionTimestamp by
// deleting the pod by name, with grace period 0 and no UID precondition
// (kwok v0.8.0, pod_controller.go deleteResource). Its stage worker can play
// that step twice for one pod (two watch events of the terminating pod, or a
// retry). A StatefulSet recreates a pod under the same name within
// milliseconds, so the second delete hits the new pod, which is then gone
// while the StatefulSet controller has already counted it available and
// deleted the next ordinal: two pods down where the release allows one
// (reconciler/workload TestStatefulSetRollback and test/e2e
// TestWorkloadStatefulSet under load; docs/development.md). A real kubelet
// deletes with the pod's UID as a precondition, so a new pod is never hit.
//
// The policy refuses, in the test clusters only, a delete with grace period
// 0 of a pod that is not terminating: that is never kwok's own intent (its
// delete stage selects pods with a deletionTimestamp), and nothing else in
// rollgate or its tests force-deletes a live pod. kwok logs the refusal and
// drops or retries its stale job; the new pod lives.
const staleDeleteGuard = "kwok-stale-pod-delete"

// staleDeleteAllowed lets through every delete but a forced one (grace
// period 0) of a live pod: bound to a node, not terminating and not
// finished. The API server itself sets grace period 0 on the delete of an
// unscheduled or finished pod; those go through.
const staleDeleteAllowed = `has(oldObject.metadata.deletionTimestamp) ||
  !has(oldObject.spec.nodeName) || oldObject.spec.nodeName == "" ||
  (has(oldObject.status.phase) && oldObject.status.phase in ["Succeeded", "Failed"]) ||
  !has(request.options.gracePeriodSeconds) || request.options.gracePeriodSeconds != 0`

// guardStaleDeletes installs staleDeleteGuard and waits until the API
// server enforces it (a policy takes effect once the API server's policy
// informer has it, not when the create returns).
func guardStaleDeletes(ctx context.Context, cl client.Client) error {
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: staleDeleteGuard},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			// An expression that cannot be evaluated lets the delete
			// through: the guard must never block what kwok does right.
			FailurePolicy: ptr.To(admissionv1.Ignore),
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Delete},
					Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
				},
			}}},
			Validations: []admissionv1.Validation{{
				Expression: staleDeleteAllowed,
				Message:    "test cluster: a delete with grace period 0 of a pod that is not terminating is refused (kwok's stale delete of a recreated pod; see test/kwok/staledelete.go)",
			}},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: staleDeleteGuard},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        staleDeleteGuard,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
		},
	}
	for _, obj := range []client.Object{policy, binding} {
		if err := cl.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("installing the %T %s: %w", obj, staleDeleteGuard, err)
		}
	}
	// A pod bound to a node that does not exist: no kwok node plays it.
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: staleDeleteGuard + "-probe"},
		Spec: corev1.PodSpec{
			NodeName:   staleDeleteGuard + "-nowhere",
			Containers: []corev1.Container{{Name: "probe", Image: "probe"}},
		},
	}
	if err := cl.Create(ctx, probe); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the pod that shows %s enforced: %w", staleDeleteGuard, err)
	}
	var last error
	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		last = cl.Delete(ctx, probe, client.GracePeriodSeconds(0), client.DryRunAll)
		return apierrors.IsInvalid(last) || apierrors.IsForbidden(last), nil
	}); err != nil {
		return fmt.Errorf("%s never refused a forced delete of a live pod (last answer: %v): %w", staleDeleteGuard, last, err)
	}
	// Gone as kwok removes a pod: a delete marks it terminating, then a
	// forced delete removes it.
	for _, opts := range [][]client.DeleteOption{nil, {client.GracePeriodSeconds(0)}} {
		if err := cl.Delete(ctx, probe, opts...); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting the pod %s: %w", probe.Name, err)
		}
	}
	return nil
}
