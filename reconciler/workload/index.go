package workload

import (
	"context"
	"fmt"

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
