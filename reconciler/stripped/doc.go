// Package stripped is rollgate's informer cache of pods, ReplicaSets and
// Deployments, the most numerous objects it watches. It keeps each as a
// type of its own (Pod, ReplicaSet, Deployment) holding only what rollgate
// reads of it, decoded straight from the API server's protobuf, and hands
// out corev1.Pods, appsv1.ReplicaSets and appsv1.Deployments made from
// them: the objects workload.StripPod, workload.StripReplicaSet and
// workload.StripDeployment describe, without the 1.2 KB of empty
// structs that such a stripped object still is. Every other kind passes
// to the cache it wraps.
//
// rollgate writes pods only with label patches and deletes, ReplicaSets
// only by creating them and with patches of their replicas, and
// Deployments only with merge patches between two copies from this cache,
// so nothing the cache leaves out is ever written back.
package stripped
