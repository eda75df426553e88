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
// The workload webhook's failure policy is Fail, narrowed by match
// conditions (CEL, evaluated by the API server): it is called only for an
// update that changes a covered workload's pod template, spec.paused,
// spec.strategy or spec.updateStrategy, its rollgate.dev/controlled label
// or its rollgate.dev/control annotation, and never for a workload being
// deleted. While no replica answers, API servers refuse those updates
// (error "failed calling webhook workloads.rollgate.dev"), rather than
// letting a new revision out unchecked. Everything else passes as if the
// webhook had allowed it: scaling (spec.replicas or the scale
// subresource), other labels and annotations, finalizers (the garbage
// collector, a GitOps prune), status writes, any update of a workload
// being deleted. The webhook would have passed those unchanged
// (workloadConditions says why). The way out, in order of preference:
//
//  1. Bring the controller back; nothing else is needed.
//  2. Delete the registration: `kubectl delete mutatingwebhookconfiguration
//     rollgate` (the name is Registration.Name). Updates then pass
//     unchecked; a workload held mid-release stays held (paused, Recreate,
//     partition or OnDelete are in its spec) until the controller is back.
//     A running controller re-creates the registration within seconds (it
//     watches it): when the controller runs but API servers cannot reach
//     it (a network policy, a broken Service), scale it to zero first.
//  3. To take one workload out of rollgate's hands for good, set
//     spec.disabled on its Rollout (in Git) and remove the label (while an
//     enabled Rollout names the workload, the webhook puts the label back):
//     `kubectl label deployment <name> rollgate.dev/controlled-`. Removing
//     the label changes what rollgate holds, so the webhook is called (the
//     API server matches the object selector against the old object too)
//     and the removal is refused while the webhook is down: do step 2
//     first. A held workload is restored by the controller (or, with no
//     controller, by hand: put back spec.paused / spec.strategy /
//     updateStrategy from the "declared" field of the rollgate.dev/control
//     annotation and delete the annotation).
//
// # When the registration changes
//
// Every replica watches the webhook configurations named
// Registration.Name (configWatch: list and watch by name, so RBAC may
// limit both to that name) and puts their CA bundle and hooks back within
// seconds of any change or deletion: a `helm upgrade` or GitOps sync that
// re-applies them without the CA bundle, a hand edit. The hourly check
// stays as the backstop, and is the only repair when RBAC refuses the
// watch (the controller logs that once). A configuration without the
// right CA bundle is repaired at once every time (a GitOps tool that
// re-applies the chart's copy, which has none, included). Hooks alone
// that differ, what two controller versions side by side during an
// upgrade disagree on, are put back three times at once, then at a
// slowing pace down to once a minute, so the two never write in a tight
// loop.
package webhook
