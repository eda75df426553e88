package workload

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// RolloutWorkloadIndex is the field index of Rollouts by the workload they
// reference, "<Kind>/<name>" (see WorkloadKey). IndexRollouts registers it.
const RolloutWorkloadIndex = "rollgate.dev/workload"

// WorkloadKey is the RolloutWorkloadIndex value of a workload.
func WorkloadKey(kind, name string) string {
	return kind + "/" + name
}

// IndexRollouts registers RolloutWorkloadIndex with a manager's field
// indexer. Register it once per manager: webhook.Setup does, so the
// Rollout reconciler uses it without registering it again.
func IndexRollouts(ctx context.Context, indexer client.FieldIndexer) error {
	return indexer.IndexField(ctx, &v1alpha1.Rollout{}, RolloutWorkloadIndex, func(obj client.Object) []string {
		ro, ok := obj.(*v1alpha1.Rollout)
		if !ok {
			return nil
		}
		return []string{WorkloadKey(ro.Spec.WorkloadRef.Kind, ro.Spec.WorkloadRef.Name)}
	})
}

// RolloutFor returns the enabled Rollout that references a workload (the
// oldest, should there be several; by name between two of the same second), or nil. r must serve
// RolloutWorkloadIndex (a manager's cached client after IndexRollouts).
// Rollouts that are disabled or being deleted do not count.
func RolloutFor(ctx context.Context, r client.Reader, namespace, kind, name string) (*v1alpha1.Rollout, error) {
	var list v1alpha1.RolloutList
	if err := r.List(ctx, &list, client.InNamespace(namespace), client.MatchingFields{RolloutWorkloadIndex: WorkloadKey(kind, name)}); err != nil {
		return nil, fmt.Errorf("list Rollouts of %s %s/%s: %w", kind, namespace, name, err)
	}
	var found *v1alpha1.Rollout
	for i := range list.Items {
		ro := &list.Items[i]
		if ro.Spec.Disabled || ro.DeletionTimestamp != nil || ro.Spec.WorkloadRef.APIVersion != "apps/v1" {
			continue
		}
		if found == nil || olderThan(ro, found) {
			found = ro
		}
	}
	return found, nil
}

// olderThan orders Rollouts by creation, then by name: every reader picks
// the same one of two Rollouts created in the same second.
func olderThan(a, b *v1alpha1.Rollout) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

// OwnerIndex is the field index of Pods, ReplicaSets, ControllerRevisions
// and Deployments (the canary style's canary Deployments) by the UID of their controlling owner. IndexOwners
// registers it; an Adapter made with OwnerIndexed lists through it, so
// observing a workload reads its own objects instead of every object of
// its namespace.
const OwnerIndex = "rollgate.dev/controller-uid"

// IndexOwners registers OwnerIndex with a manager's field indexer for
// Pods, ReplicaSets, ControllerRevisions and Deployments. Register it once per manager,
// before the manager starts.
func IndexOwners(ctx context.Context, indexer client.FieldIndexer) error {
	for _, obj := range []client.Object{&corev1.Pod{}, &appsv1.ReplicaSet{}, &appsv1.ControllerRevision{}, &appsv1.Deployment{}} {
		if err := indexer.IndexField(ctx, obj, OwnerIndex, controllerUID); err != nil {
			return fmt.Errorf("index %T by controller: %w", obj, err)
		}
	}
	return nil
}

// controllerUID is the OwnerIndex value of obj: its controller's UID.
func controllerUID(obj client.Object) []string {
	if ref := metav1.GetControllerOf(obj); ref != nil {
		return []string{string(ref.UID)}
	}
	return nil
}
