package e2e

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// assertKstatus checks the conventions Flux, Argo CD and `kubectl wait`
// rely on, in whatever state the Rollout is: status.observedGeneration and
// every condition's observedGeneration are the spec's generation once
// reconciled; Ready, Reconciling and Stalled are present and never
// contradict each other.
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
	if !hasReady {
		t.Errorf("no Ready condition: %+v", ro.Status.Conditions)
	}
	rec, stalled := byType[v1alpha1.ReconcilingCondition], byType[v1alpha1.StalledCondition]
	if ready.Status == metav1.ConditionTrue && (rec.Status == metav1.ConditionTrue || stalled.Status == metav1.ConditionTrue) {
		t.Errorf("Ready=True together with Reconciling=%s Stalled=%s", rec.Status, stalled.Status)
	}
	if stalled.Status == metav1.ConditionTrue && ready.Status != metav1.ConditionFalse {
		t.Errorf("Stalled=True needs Ready=False, got %s", ready.Status)
	}
	if ro.Status.AwaitingApproval != nil && (stalled.Status == metav1.ConditionTrue || rec.Status != metav1.ConditionTrue) {
		t.Errorf("a release waiting for approval is Reconciling and not Stalled; got Reconciling=%s Stalled=%s", rec.Status, stalled.Status)
	}
}
