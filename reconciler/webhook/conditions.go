package webhook

import (
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// workloadConditions are the match conditions of the workload webhook: the
// API server sends an update only when both hold. Everything else passes
// without a call, so it still works while no controller replica answers:
// a scale through spec.replicas, labels and annotations other than
// rollgate's, finalizers, any write to a workload being deleted.
//
// Why nothing that matters is skipped. workload.Admit reads, from the
// updated object, its pod template, spec.paused, spec.strategy or
// spec.updateStrategy, the rollgate.dev/controlled label and the
// rollgate.dev/control annotation (spec.replicas only to decide whether a
// template change starts a release), and it writes those same fields
// alone. An update that changes none of them gets the answer the old
// object would get if written back unchanged, and the old object is what
// the webhook (or rollgate itself) last admitted: Admit passes it
// unchanged (no template change: nothing to hold; mid-release: the hold
// is already there, so re-asserting it changes nothing). Two cases
// differ, both taken care of elsewhere: a Rollout disabled or deleted
// mid-release (the reconciler hands the workload back; an update no
// longer does it on the way), and a hold undone by hand while the
// registration was deleted (the escape hatch; the next update that touches
// the held fields re-asserts it).
//
// A workload being deleted cannot be released by an update: deletion
// cannot be undone, and the Deployment, StatefulSet and DaemonSet
// controllers only write the status of an object with a deletionTimestamp
// (Kubernetes 1.36: deployment_controller.go, stateful_set_control.go,
// daemon_controller.go), so its template no longer makes pods. Skipping it
// lets the garbage collector and GitOps tools (Argo CD's foreground prune)
// remove their finalizers while rollgate is down.
//
// The rules send UPDATE only, so oldObject is always set.
func workloadConditions() []admissionregistrationv1.MatchCondition {
	changed := func(path string) string {
		return "object." + path + " != oldObject." + path
	}
	return []admissionregistrationv1.MatchCondition{{
		Name:       "not-being-deleted",
		Expression: "!has(object.metadata.deletionTimestamp)",
	}, {
		Name: "changes-what-rollgate-holds",
		Expression: strings.Join([]string{
			changed("spec.template"),
			changed("spec.?paused.orValue(false)"),
			changed("spec.?strategy"),
			changed("spec.?updateStrategy"),
			changed("metadata.?labels[?'" + v1alpha1.LabelControlled + "']"),
			changed("metadata.?annotations[?'" + v1alpha1.AnnotationControl + "']"),
		}, " ||\n"),
	}}
}
