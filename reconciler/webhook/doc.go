// Package webhook serves rollgate's admission webhooks and keeps their
// certificates and registrations.
//
// The workload webhook (WorkloadHook, WorkloadHandler) sees every UPDATE of
// an apps/v1 Deployment, StatefulSet or DaemonSet labelled
// rollgate.dev/controlled (the reconciler labels the workloads its
// Rollouts cover). When the pod template changes and an enabled Rollout
// references the workload, it holds the workload at the old revision before
// any pod changes; while a release is in progress it re-asserts the hold on
// every update, so a GitOps re-apply of the declared strategy never moves
// pods mid-release. The decisions live in workload.Admit; this package
// decodes requests, looks up the Rollout and answers with a JSON patch that
// touches only the fields rollgate owns.
//
// The controller generates its own certificates (Keeper): a self-signed CA
// and a serving certificate for the Service's DNS names or the loopback
// URL, kept in a Secret so every replica serves the same, renewed at two
// thirds of their life, with the CA bundle patched into the
// MutatingWebhookConfiguration (and ValidatingWebhookConfiguration) the
// controller creates itself. Setup wires it all into a manager.
//
// # When the webhook is down
//
// The workload webhook's failure policy is Fail: while no replica answers,
// API servers refuse every update of a covered workload (error "failed
// calling webhook workloads.rollgate.dev"), rather than letting a new
// revision out unchecked. Scaling through the scale subresource still
// works. The way out, in order of preference:
//
//  1. Bring the controller back; nothing else is needed.
//  2. Delete the registration: `kubectl delete mutatingwebhookconfiguration
//     rollgate` (the name is Registration.Name). Updates then pass
//     unchecked; a workload held mid-release stays held (paused, Recreate,
//     partition or OnDelete are in its spec) until the controller is back,
//     and the controller re-creates the registration when it starts.
//  3. To take one workload out of rollgate's hands for good, set
//     spec.disabled on its Rollout (in Git) and remove the label (while an
//     enabled Rollout names the workload, the webhook puts the label back):
//     `kubectl label deployment <name> rollgate.dev/controlled-`. The API
//     server matches the object selector against the old object too, so
//     this label removal is itself refused while the webhook is down: do
//     step 2 first. A held workload is restored by the controller (or, with
//     no controller, by hand: put back spec.paused / spec.strategy /
//     updateStrategy from the "declared" field of the rollgate.dev/control
//     annotation and delete the annotation).
package webhook
