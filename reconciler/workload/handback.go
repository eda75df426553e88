package workload

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// HandBack gives a workload that a deleted Rollout left held
// (Control.HeldWithoutRollout) back to its own controller: the settings
// Git declares come back, the control annotation and the
// rollgate.dev/controlled label go, and the workload's controller then
// rolls its declared template to every pod. It refuses a workload that an
// enabled Rollout still names (that Rollout releases it: disable or delete
// it instead) and one held by a release whose Rollout still exists. It
// returns what happened, for a person.
func HandBack(ctx context.Context, c client.Client, namespace, kind, name string) (string, error) {
	var obj client.Object
	switch kind {
	case "Deployment":
		obj = &appsv1.Deployment{}
	case "StatefulSet":
		obj = &appsv1.StatefulSet{}
	case "DaemonSet":
		obj = &appsv1.DaemonSet{}
	default:
		return "", fmt.Errorf("kind %q: %w: use Deployment, StatefulSet or DaemonSet", kind, ErrUnsupported)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, obj); err != nil {
		return "", err
	}
	var list v1alpha1.RolloutList
	if err := c.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return "", fmt.Errorf("list Rollouts in %s: %w", namespace, err)
	}
	for _, ro := range list.Items {
		ref := ro.Spec.WorkloadRef
		if ref.Kind == kind && ref.Name == name && !ro.Spec.Disabled && ro.DeletionTimestamp == nil {
			return "", fmt.Errorf("Rollout %s/%s releases %s %s: set its spec.disabled, or delete it with spec.onDelete HandBack, instead",
				namespace, ro.Name, kind, name)
		}
	}
	ctrl, err := ParseControl(obj)
	if err != nil {
		return "", err
	}
	if ctrl == nil {
		return fmt.Sprintf("%s %s/%s is not held: nothing to hand back", kind, namespace, name), nil
	}
	if !ctrl.HeldWithoutRollout {
		return "", fmt.Errorf("%s %s/%s is held by a release of Rollout %s, which has not let it go; "+
			"if that Rollout is being deleted, wait for it, or see docs/day-two.md", kind, namespace, name, ctrl.Rollout)
	}
	if err := Release(obj, ctrl); err != nil {
		return "", err
	}
	labels := obj.GetLabels()
	delete(labels, v1alpha1.LabelControlled)
	obj.SetLabels(labels)
	if err := c.Update(ctx, obj, client.FieldOwner(FieldOwner)); err != nil {
		return "", fmt.Errorf("update %s %s/%s: %w", kind, namespace, name, err)
	}
	return fmt.Sprintf("%s %s/%s handed back: its own controller now rolls revision %s to every pod", kind, namespace, name, ctrl.CanaryRevision), nil
}
