package workload

import (
	corev1 "k8s.io/api/core/v1"
)

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
