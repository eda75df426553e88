package workload

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Option changes how an Adapter reads the cluster.
type Option func(*base)

// OwnerIndexed makes the Adapter list Pods, ReplicaSets,
// ControllerRevisions and canary Deployments through OwnerIndex: one
// indexed lookup per owner instead of a label-selector scan of the whole
// namespace. Its client must serve the index (a manager's cached client
// after IndexOwners); without the option the Adapter works with any
// client, cached or not.
func OwnerIndexed() Option {
	return func(b *base) { b.indexed = true }
}

// APIReader makes the Adapter read from r, the API server, what its
// client's cache does not keep: a Deployment's pod template
// (StripDeployment), which a new revision's ReplicaSet and the canary
// Deployment copy. Without it the Adapter reads those from its client.
func APIReader(r client.Reader) Option {
	return func(b *base) { b.live = r }
}

// listOwned returns the objects of namespace ns that match sel and are
// controlled by one of owners. newList makes an empty list and items
// returns pointers to its elements. With OwnerIndexed it lists each
// owner's objects through OwnerIndex; otherwise it lists by sel and keeps
// the owners' objects.
//
// Through OwnerIndex the objects are not deep copies
// (client.UnsafeDisableDeepCopy): each is a shallow copy of the informer
// cache's object and shares its maps, slices and pointers. A reconcile
// reads every pod and ReplicaSet of its workload, and copying them was a
// tenth of all the bytes the controller allocated (docs/benchmarks.md).
// So no caller changes a listed object's labels, annotations, spec or
// status in place: that would change the cache under every other reader.
// Setting a field of the listed object itself is safe, and so is writing
// it with the client, which zeroes the object before decoding the API
// server's answer into it (new maps, new slices). The test
// TestIndexedWritesLeaveTheCacheAlone drives whole releases and fails on
// any change to the cache's objects.
func listOwned[L client.ObjectList, O client.Object](ctx context.Context, b *base, newList func() L, items func(L) []O, ns string, sel labels.Selector, owners map[types.UID]bool) ([]O, error) {
	var out []O
	keep := func(l L) {
		for _, o := range items(l) {
			if ref := metav1.GetControllerOf(o); ref != nil && owners[ref.UID] && sel.Matches(labels.Set(o.GetLabels())) {
				out = append(out, o)
			}
		}
	}
	if !b.indexed {
		l := newList()
		if err := b.c.List(ctx, l, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: sel}); err != nil {
			return nil, err
		}
		keep(l)
		return out, nil
	}
	for uid := range owners {
		l := newList()
		if err := b.c.List(ctx, l, client.InNamespace(ns), client.MatchingFields{OwnerIndex: string(uid)}, client.UnsafeDisableDeepCopy); err != nil {
			return nil, err
		}
		keep(l)
	}
	return out, nil
}

func newPodList() *corev1.PodList { return &corev1.PodList{} }

func podItems(l *corev1.PodList) []*corev1.Pod {
	out := make([]*corev1.Pod, len(l.Items))
	for i := range l.Items {
		out[i] = &l.Items[i]
	}
	return out
}

func newReplicaSetList() *appsv1.ReplicaSetList { return &appsv1.ReplicaSetList{} }

func replicaSetItems(l *appsv1.ReplicaSetList) []*appsv1.ReplicaSet {
	out := make([]*appsv1.ReplicaSet, len(l.Items))
	for i := range l.Items {
		out[i] = &l.Items[i]
	}
	return out
}

func newControllerRevisionList() *appsv1.ControllerRevisionList {
	return &appsv1.ControllerRevisionList{}
}

func controllerRevisionItems(l *appsv1.ControllerRevisionList) []*appsv1.ControllerRevision {
	out := make([]*appsv1.ControllerRevision, len(l.Items))
	for i := range l.Items {
		out[i] = &l.Items[i]
	}
	return out
}

func newDeploymentList() *appsv1.DeploymentList { return &appsv1.DeploymentList{} }

func deploymentItems(l *appsv1.DeploymentList) []*appsv1.Deployment {
	out := make([]*appsv1.Deployment, len(l.Items))
	for i := range l.Items {
		out[i] = &l.Items[i]
	}
	return out
}
