// Package workload realises the batches of a release on the workload a
// Rollout points at: a Deployment, a StatefulSet or a DaemonSet.
//
// A release starts when the admission webhook (package
// reconciler/webhook) freezes the workload on a pod template change: it
// calls Hold, which sets the control state (Deployment: paused and
// Recreate, or only paused for the canary style; StatefulSet: a partition
// above every ordinal; DaemonSet: OnDelete) and records a Control in the
// annotation rollgate.dev/control, together with the settings Git
// declares, so that they can be restored at the end. While the annotation
// is present every update from anyone but rollgate is passed through
// Reassert, so a GitOps re-apply never moves pods mid-release.
//
// An Adapter (see For) then moves the frozen workload batch by batch:
//
//   - Deployment, partition style (default): no second Deployment and no
//     forked Deployment controller. Paused with Recreate, the native
//     controller neither rolls out nor scales proportionally, so the
//     adapter creates the new ReplicaSet itself (owned by the Deployment,
//     its template the Deployment's plus pod-template-hash) and scales it
//     up and the old ones down, surge first. HandBack restores the
//     declared strategy and unpauses; the native controller finds the
//     ReplicaSet by template and finishes the rollout with it.
//   - Deployment, canary style (enableExtraWorkloadForCanary, and
//     blue-green): the Deployment stays paused at the old revision and a
//     canary Deployment owned by the Rollout runs the new pods.
//   - StatefulSet: the native partition, replicas minus canary replicas.
//   - DaemonSet: OnDelete, and the adapter deletes old pods, within the
//     availability budget, so the native controller recreates them at the
//     new revision.
//
// Every method is level-triggered and idempotent: it reads the cluster,
// makes at most one step of progress and says whether the batch is done.
package workload
