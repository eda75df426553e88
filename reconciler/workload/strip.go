package workload

import (
	"maps"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CacheTransforms are the cache transforms of the kinds rollgate reads
// only in part: Pods (StripPod) and ReplicaSets (StripReplicaSet). The
// manager's cache uses them, beside the default transform that drops every
// object's managedFields.
func CacheTransforms() map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		&corev1.Pod{}:        {Transform: StripPod},
		&appsv1.ReplicaSet{}: {Transform: StripReplicaSet},
	}
}

// StripPod is the cache transform of Pods: it keeps what rollgate reads of
// a pod and drops the rest, which is most of a cached pod (the spec with
// its containers, volumes and tolerations; the container statuses and
// addresses), and managedFields.
//
// What rollgate reads of a pod, every reader included (the adapters, the
// owner index, the pod watch of the Rollout controller, the Service
// router's wait for labels): its metadata (name, namespace, UID, labels,
// owner references, deletion timestamp) and its status's phase and
// conditions (Ready and when it became so). rollgate writes pods only with
// label merge patches and deletes them, never with an update of a cached
// copy, so nothing it drops can be written back.
// TestStrippedPodsObserveTheSame keeps this list honest.
func StripPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{TypeMeta: p.TypeMeta, ObjectMeta: p.ObjectMeta}
	out.ManagedFields = nil
	out.Status.Phase = p.Status.Phase
	out.Status.Conditions = p.Status.Conditions
	return out, nil
}

// cachedRevisionAnnotation holds, on a ReplicaSet in the cache only, the
// Revision of the pod template StripReplicaSet dropped. It is never
// written to the API server: rollgate writes ReplicaSets only by creating
// them (from the Deployment's template) and by merge patches of their
// replicas computed between two copies that both carry it.
const cachedRevisionAnnotation = labelPrefix + "cached-template-revision"

// StripReplicaSet is the cache transform of ReplicaSets: it keeps the
// metadata, the replicas, selector and minReadySeconds, and the status,
// and replaces the pod template (most of a ReplicaSet, the same bytes as
// its Deployment's template) by the template's Revision, which is all
// rollgate reads of it (ReplicaSetRevision). A revert, which needs the
// stable template itself, reads the ReplicaSet from the API server.
// TestStrippedPodsObserveTheSame keeps this honest for the adapters.
//
// The transform may see an object it already stripped (an informer's
// re-list): a ReplicaSet with no containers keeps the revision it has.
func StripReplicaSet(obj any) (any, error) {
	rs, ok := obj.(*appsv1.ReplicaSet)
	if !ok {
		return obj, nil
	}
	out := &appsv1.ReplicaSet{TypeMeta: rs.TypeMeta, ObjectMeta: rs.ObjectMeta, Status: rs.Status}
	out.ManagedFields = nil
	out.Spec.Replicas = rs.Spec.Replicas
	out.Spec.MinReadySeconds = rs.Spec.MinReadySeconds
	out.Spec.Selector = rs.Spec.Selector
	if len(rs.Spec.Template.Spec.Containers) > 0 {
		out.Annotations = maps.Clone(rs.Annotations)
		if out.Annotations == nil {
			out.Annotations = map[string]string{}
		}
		out.Annotations[cachedRevisionAnnotation] = Revision(&rs.Spec.Template)
	}
	return out, nil
}

// ReplicaSetRevision is the Revision of rs's pod template, read from the
// template or, for a ReplicaSet from the cache, from what StripReplicaSet
// kept of it.
func ReplicaSetRevision(rs *appsv1.ReplicaSet) string {
	if rev, ok := rs.Annotations[cachedRevisionAnnotation]; ok && len(rs.Spec.Template.Spec.Containers) == 0 {
		return rev
	}
	return Revision(&rs.Spec.Template)
}
