// Package stripped is rollgate's informer cache of pods and ReplicaSets,
// the most numerous objects it watches. It keeps each as a type of its own
// (Pod, ReplicaSet) holding only what rollgate reads of it, decoded
// straight from the API server's protobuf, and hands out corev1.Pods and
// appsv1.ReplicaSets made from them: the same objects the cache transforms
// workload.StripPod and workload.StripReplicaSet describe, without the
// 1.2 KB of empty structs that a stripped corev1.Pod or appsv1.ReplicaSet
// still is. Every other kind passes to the cache it wraps.
//
// rollgate writes pods only with label patches and deletes, and
// ReplicaSets only by creating them and with patches of their replicas, so
// nothing the cache leaves out is ever written back.
package stripped
