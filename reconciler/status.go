package reconciler

import (
	"github.com/fluxcd/pkg/runtime/conditions"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/strategy"
)

const (
	metav1True  = metav1.ConditionTrue
	metav1False = metav1.ConditionFalse
)

// record writes the plan's status and conditions into ro and emits the
// plan's event (transitions only). It reports whether the release moved:
// another step, state, phase, revision or traffic.
func (r *RolloutReconciler) record(ro *v1alpha1.Rollout, plan strategy.Plan) bool {
	keep := ro.Status
	moved := keep.CurrentStepIndex != plan.Status.CurrentStepIndex || keep.CurrentStepState != plan.Status.CurrentStepState ||
		keep.Phase != plan.Status.Phase || keep.CanaryRevision != plan.Status.CanaryRevision ||
		keep.Attempt != plan.Status.Attempt || keep.Traffic != plan.Status.Traffic
	ro.Status = plan.Status
	ro.Status.Conditions = keep.Conditions
	ro.Status.Analysis = keep.Analysis
	ro.Status.Git = gitStatusFor(keep.Git, &keep, &plan.Status)
	for t, c := range plan.Conditions.ByType() {
		if c.Status == "" {
			conditions.Delete(ro, t)
			continue
		}
		conditions.Set(ro, &metav1.Condition{Type: t, Status: c.Status, Reason: c.Reason, Message: c.Message})
	}
	if !plan.Event.IsZero() && r.Recorder != nil {
		typ := corev1.EventTypeNormal
		if plan.Event.Type == strategy.EventWarning {
			typ = corev1.EventTypeWarning
		}
		r.Recorder.Event(ro, typ, plan.Event.Reason, plan.Event.Message)
	}
	return moved
}

// gitStatusFor returns the Git status to keep when the status moves from
// prev to next. The revert of a failed release belongs to that release: once
// a new release starts (a canary revision other than the previous one and the
// stable one) the record is dropped, so that the new release, should it fail,
// gets its own revert written (revertInGit writes one only while none is
// recorded). The record of the last release otherwise stays, rolled back or
// not.
func gitStatusFor(g *v1alpha1.GitStatus, prev, next *v1alpha1.RolloutStatus) *v1alpha1.GitStatus {
	newRelease := next.CanaryRevision != "" && next.CanaryRevision != prev.CanaryRevision &&
		next.CanaryRevision != next.StableRevision
	if g == nil || (g.RevertBranch == "" && g.RevertPullRequestURL == "") || !newRelease {
		return g
	}
	out := *g
	out.RevertBranch, out.RevertPullRequestURL = "", ""
	return &out
}

// markStalled reports that the controller cannot act without a change:
// Stalled=True, Ready=False, and (when final) Reconciling removed.
func (r *RolloutReconciler) markStalled(ro *v1alpha1.Rollout, reason, msg string, final bool) {
	if !conditions.IsStalled(ro) && r.Recorder != nil {
		r.Recorder.Event(ro, corev1.EventTypeWarning, reason, msg)
	}
	conditions.MarkStalled(ro, reason, "%s", msg)
	conditions.MarkFalse(ro, v1alpha1.ReadyCondition, reason, "%s", msg)
	if final {
		conditions.Delete(ro, v1alpha1.ReconcilingCondition)
	}
	ro.Status.Message = msg
}

// markError reports a transient failure (retried with backoff): still
// Reconciling, and Ready=False unless the release already failed, whose
// Stalled condition (and its reason, which the planner reads back) stays.
func (r *RolloutReconciler) markError(ro *v1alpha1.Rollout, err error) {
	if conditions.IsTrue(ro, v1alpha1.StalledCondition) {
		return
	}
	conditions.MarkFalse(ro, v1alpha1.ReadyCondition, v1alpha1.ReasonProgressing, "retrying: %s", err.Error())
	conditions.MarkTrue(ro, v1alpha1.ReconcilingCondition, v1alpha1.ReasonProgressing, "retrying: %s", err.Error())
}

// markTraffic sets TrafficShifted from the routers' last answer.
func (r *RolloutReconciler) markTraffic(rel *release) {
	ro := rel.ro
	switch {
	case rel.trafficE != nil:
		conditions.MarkFalse(ro, v1alpha1.TrafficShiftedCondition, v1alpha1.ReasonTrafficError, "%s", rel.trafficE.Error())
	case rel.trafficDone:
		conditions.MarkTrue(ro, v1alpha1.TrafficShiftedCondition, v1alpha1.ReasonTrafficShifted, "%s", trafficMessage(rel))
	default:
		conditions.MarkFalse(ro, v1alpha1.TrafficShiftedCondition, v1alpha1.ReasonTrafficPending, "moving traffic: %s", trafficMessage(rel))
	}
}

func trafficMessage(rel *release) string {
	switch rel.applied.Mode {
	case strategy.TrafficOriginal:
		return "routes as declared in Git"
	case strategy.TrafficStable:
		return "all traffic to the stable revision"
	}
	return rel.applied.String() + " of traffic to the canary revision"
}

// markGit sets GitSynced.
func (r *RolloutReconciler) markGit(ro *v1alpha1.Rollout, status metav1.ConditionStatus, reason, msg string) {
	conditions.Set(ro, &metav1.Condition{Type: v1alpha1.GitSyncedCondition, Status: status, Reason: reason, Message: msg})
}
