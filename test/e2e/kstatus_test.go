package e2e

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// assertKstatus checks the conventions Flux, Argo CD and `kubectl wait`
// rely on, in whatever state the Rollout is: status.observedGeneration and
// every condition's observedGeneration are the spec's generation once
// reconciled; Ready, Reconciling and Stalled never contradict each other;
// Ready is present except while a release is under way, and then kstatus
// reads Current (an applier's wait is over), a gate included.
func assertKstatus(t *testing.T, ro *v1alpha1.Rollout) {
	t.Helper()
	if ro.Status.ObservedGeneration != ro.Generation {
		t.Errorf("status.observedGeneration %d, generation %d", ro.Status.ObservedGeneration, ro.Generation)
	}
	byType := map[string]metav1.Condition{}
	for _, c := range ro.Status.Conditions {
		byType[c.Type] = c
		if c.ObservedGeneration != ro.Generation {
			t.Errorf("condition %s has observedGeneration %d, generation %d", c.Type, c.ObservedGeneration, ro.Generation)
		}
	}
	ready, hasReady := byType[v1alpha1.ReadyCondition]
	underWay := ro.Status.Phase == v1alpha1.PhaseProgressing || ro.Status.Phase == v1alpha1.PhasePaused
	if !hasReady && !underWay {
		t.Errorf("no Ready condition in phase %s: %+v", ro.Status.Phase, ro.Status.Conditions)
	}
	rec, stalled := byType[v1alpha1.ReconcilingCondition], byType[v1alpha1.StalledCondition]
	if ready.Status == metav1.ConditionTrue && (rec.Status == metav1.ConditionTrue || stalled.Status == metav1.ConditionTrue) {
		t.Errorf("Ready=True together with Reconciling=%s Stalled=%s", rec.Status, stalled.Status)
	}
	if stalled.Status == metav1.ConditionTrue && ready.Status != metav1.ConditionFalse {
		t.Errorf("Stalled=True needs Ready=False, got %s", ready.Status)
	}
	if !hasReady && kstatusOf(ro) != "Current" {
		t.Errorf("a release under way without Ready must read Current, reads %s: %+v", kstatusOf(ro), ro.Status.Conditions)
	}
	if ro.Status.AwaitingApproval != nil && (hasReady || kstatusOf(ro) != "Current" ||
		byType[v1alpha1.AwaitingApprovalCondition].Status != metav1.ConditionTrue) {
		t.Errorf("a release waiting for approval is Current for kstatus, without Ready, AwaitingApproval=True; got %s: %+v",
			kstatusOf(ro), ro.Status.Conditions)
	}
}

// kstatusOf is what a kstatus reader computes for a Rollout (Flux's
// health checks, helm-controller's and kustomize-controller's waits):
// the generation not observed, or Reconciling=True, is InProgress;
// Stalled=True is Failed; then Ready decides when present (True Current,
// else InProgress), and no Ready is Current.
func kstatusOf(ro *v1alpha1.Rollout) string {
	if ro.Status.ObservedGeneration != ro.Generation {
		return "InProgress"
	}
	for _, c := range ro.Status.Conditions {
		switch {
		case c.Type == v1alpha1.ReconcilingCondition && c.Status == metav1.ConditionTrue:
			return "InProgress"
		case c.Type == v1alpha1.StalledCondition && c.Status == metav1.ConditionTrue:
			return "Failed"
		}
	}
	for _, c := range ro.Status.Conditions {
		if c.Type == v1alpha1.ReadyCondition {
			if c.Status == metav1.ConditionTrue {
				return "Current"
			}
			return "InProgress"
		}
	}
	return "Current"
}
