package strategy

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// fail ends the release as failed and starts rolling it back: traffic to
// stable first, then the canary pods go.
func (p *planner) fail(reason, cause string) {
	p.next.Phase = v1alpha1.PhaseFailed
	p.enter(v1alpha1.StepRollingBack)
	p.reason = reason
	p.next.Message = fmt.Sprintf("release of %s failed (%s): %s; traffic and pods return to stable revision %s",
		p.canary, reason, cause, p.stable)
	p.rollingBack()
	p.rollbackHooks()
}

// rollingBack moves a failed release back to stable: the workload stays
// frozen at the stable revision with no canary pods once traffic is off
// them. Traffic stays on stable until the revert reaches the workload.
func (p *planner) rollingBack() {
	p.plan.Workload = WorkloadKeep
	if !p.trafficSettled() {
		return
	}
	p.plan.Workload = WorkloadRollback
	p.plan.CanaryReplicas = 0
	p.settled = p.obs.Pods[p.canary].Total == 0
}

// finalize completes a release: the traffic that finishes it comes first
// (finishing), then the workload is released to finish on its own; Healthy
// once it has. Declared routes are restored before the workload moves;
// Promoted traffic stays while the old pods shut down, and the declared
// routes come back afterwards (finishRelease), so no request returns to an
// old pod after all traffic had left them.
func (p *planner) finalize() {
	p.next.Phase = v1alpha1.PhaseProgressing
	p.next.AwaitingApproval = nil
	p.reason = v1alpha1.ReasonProgressing
	promoted := DesiredTraffic(p.spec, &p.next).Mode == TrafficPromoted
	if !p.trafficSettled() {
		p.plan.Workload = WorkloadKeep
		p.next.Message = fmt.Sprintf("finishing the release of %s: restoring the declared traffic", p.canary)
		if promoted {
			p.next.Message = fmt.Sprintf("finishing the release of %s: narrowing the stable Service to it, with all traffic on it", p.canary)
		}
		return
	}
	p.plan.Workload = WorkloadRelease
	if !p.workloadSettled() {
		// As in upgrade, no counts (they are in the status fields), and one
		// message while the workload rolls: new pods coming and old ones
		// leaving alternate until the end.
		p.next.Message = fmt.Sprintf("finishing the release of %s: the workload updates its remaining pods, and the old ones shut down", p.canary)
		return
	}
	if promoted {
		// Every pod runs the new revision: it is the stable one now, and
		// the declared routes (which reach only its pods) come back.
		p.next.StableRevision = p.canary
		p.next.Message = p.routesComingBack()
		return
	}
	p.succeed()
}

// finishRelease restores the declared routes of a release finished with
// Promoted traffic, once every pod runs the new revision (now the stable
// one), then reports Healthy.
func (p *planner) finishRelease() {
	p.next.Phase = v1alpha1.PhaseProgressing
	p.reason = v1alpha1.ReasonProgressing
	p.plan.Workload = WorkloadRelease
	if !p.trafficSettled() {
		p.next.Message = p.routesComingBack()
		return
	}
	p.succeed()
}

// routesComingBack is the message while the declared routes of a release
// finished with Promoted traffic come back.
func (p *planner) routesComingBack() string {
	return fmt.Sprintf("finishing the release of %s: every pod runs it; restoring the declared traffic", p.canary)
}

// succeed reports the release of the canary revision done.
func (p *planner) succeed() {
	p.next.Phase = v1alpha1.PhaseHealthy
	p.next.StableRevision = p.canary
	p.reason = v1alpha1.ReasonSucceeded
	p.settled = true
	p.next.Message = fmt.Sprintf("revision %s is released", p.canary)
}

// releaseControl hands the workload and its traffic back to what Git
// declares, for spec.disabled and for deletion: traffic first, then the
// workload. A release in progress is cancelled.
func (p *planner) releaseControl() {
	what := "spec.disabled is true"
	if p.obs.Deleting {
		what = "the Rollout is being deleted"
	}
	if p.in.Phase != v1alpha1.PhaseDisabled {
		p.next.Phase = v1alpha1.PhaseDisabled
		p.next.StableRevision = p.stable
		p.next.CanaryRevision = p.stable
		p.next.CurrentStepIndex = 0
		p.enter("")
	}
	p.reason = v1alpha1.ReasonDisabled
	if !p.trafficSettled() {
		p.next.Message = what + ": restoring the declared traffic before releasing the workload"
		return
	}
	if p.leavesHeld() {
		p.leaveHeld()
		return
	}
	p.plan.Workload = WorkloadRelease
	if p.obs.Held {
		p.next.Message = what + ": releasing the workload to its declared template"
		return
	}
	p.plan.Released = true
	p.settled = true
	p.next.StableRevision = p.obs.UpdateRevision
	p.next.CanaryRevision = p.obs.UpdateRevision
	p.next.Message = what + ": rollgate leaves the workload and its traffic as Git declares them"
}

// leavesHeld reports whether a deletion leaves the workload held rather
// than handing it back: spec.onDelete is Hold (the default) and the
// workload is held mid-release of a revision that is not the stable one,
// which its own controller would roll to every pod at once.
func (p *planner) leavesHeld() bool {
	holds := (p.obs.Deleting && p.spec.OnDelete != v1alpha1.OnDeleteHandBack) || p.obs.ApprovalsNeedProof
	return holds && p.obs.Held && p.canary != p.stable
}

// leaveHeld marks the workload to stay held as it stands once the Rollout
// is gone; then the Rollout lets go of it.
func (p *planner) leaveHeld() {
	p.plan.Workload = WorkloadLeaveHeld
	why := "the Rollout is being deleted mid-release of %s (spec.onDelete Hold)"
	switch {
	case p.obs.ApprovalsNeedProof && p.obs.Deleting:
		why = "the Rollout is being deleted mid-release of %s under the Repository's approval policy, which no deletion skips"
	case p.obs.ApprovalsNeedProof:
		why = "spec.disabled is true mid-release of %s under the Repository's approval policy, which disabling does not skip"
	}
	p.next.Message = fmt.Sprintf(why+": the workload stays held as it stands, with no pod moving, "+
		"until a Rollout names it again or `rollgate handback` gives it back", p.canary)
	if !p.obs.HeldWithoutRollout {
		return
	}
	p.plan.Released = true
	p.settled = true
}

// atStable handles a workload whose template is the stable revision.
func (p *planner) atStable() error {
	switch {
	case inRelease(p.in):
		p.rollbackToStable()
	case p.in.Phase == v1alpha1.PhaseProgressing && p.in.CurrentStepState == v1alpha1.StepRollingBack:
		p.finishRollback()
	case p.in.Phase == v1alpha1.PhaseProgressing && p.in.CurrentStepState == v1alpha1.StepCompleted:
		p.finishRelease()
	default:
		return p.idle()
	}
	return nil
}

// rollbackToStable undoes a release whose template went back to the stable
// revision (a revert in Git): no batches, traffic to stable first, then the
// workload's own controller replaces the canary pods.
func (p *planner) rollbackToStable() {
	if p.in.CurrentStepState != v1alpha1.StepRollingBack || p.in.Phase != v1alpha1.PhaseProgressing {
		p.enter(v1alpha1.StepRollingBack)
	}
	p.next.Phase = v1alpha1.PhaseProgressing
	p.reason = v1alpha1.ReasonRollingBack
	head := fmt.Sprintf("the workload's template is back at stable revision %s", p.stable)
	if !p.trafficSettled() {
		p.next.Message = fmt.Sprintf("%s: moving all traffic to it before the pods of %s go", head, p.in.CanaryRevision)
		return
	}
	p.plan.Workload = WorkloadRelease
	if !p.workloadSettled() {
		p.next.Message = fmt.Sprintf("%s: the workload replaces the pods of %s", head, p.in.CanaryRevision)
		return
	}
	p.next.CanaryRevision = p.stable
	p.next.Message = head + ": restoring the declared traffic"
}

// finishRollback restores the declared routes after a rollback by
// template, then reports Healthy with reason RolledBack.
func (p *planner) finishRollback() {
	p.next.Phase = v1alpha1.PhaseProgressing
	p.reason = v1alpha1.ReasonRollingBack
	p.plan.Workload = WorkloadRelease
	if !p.trafficSettled() {
		p.next.Message = fmt.Sprintf("rolled back to stable revision %s: restoring the declared traffic", p.stable)
		return
	}
	p.next.Phase = v1alpha1.PhaseHealthy
	p.enter(v1alpha1.StepRolledBack)
	p.reason = v1alpha1.ReasonRolledBack
	p.settled = true
	p.next.Message = fmt.Sprintf("rolled back to stable revision %s", p.stable)
}

// idle: no release. A workload still frozen (a change reverted before the
// release started) is released. A spec problem found while observing is
// reported now, not when the next release would need it.
func (p *planner) idle() error {
	if p.obs.Invalid != nil && !p.obs.Held {
		return p.obs.Invalid
	}
	p.next.StableRevision = p.stable
	p.settled = true
	if p.spec.Strategy.Paused {
		p.hold(fmt.Sprintf("no release in progress; revision %s runs; spec.strategy.paused holds the next release", p.stable))
	}
	if p.obs.Held {
		p.plan.Workload = WorkloadRelease
	}
	if p.spec.Strategy.Paused {
		return nil
	}
	if p.in.Phase != v1alpha1.PhaseHealthy || len(p.obs.Missing) > 0 || strings.Contains(p.in.Message, cannotStart) {
		p.next.Message = p.idleMessage()
	}
	p.next.Phase = v1alpha1.PhaseHealthy
	if len(p.obs.Missing) > 0 {
		// Nothing is released, but the next release could not start.
		p.reason, p.settled = v1alpha1.ReasonDependencyNotFound, false
		p.requeue(dependencyPoll)
		return nil
	}
	switch p.next.CurrentStepState {
	case v1alpha1.StepCompleted:
		p.reason = v1alpha1.ReasonSucceeded
	case v1alpha1.StepRolledBack, v1alpha1.StepRollingBack:
		// RollingBack here is a status an earlier version left behind.
		p.next.CurrentStepState = v1alpha1.StepRolledBack
		p.reason = v1alpha1.ReasonRolledBack
	default:
		p.reason = v1alpha1.ReasonIdle
	}
	return nil
}

// cannotStart says, in an idle Rollout's message, that objects are missing.
const cannotStart = "the next release cannot start"

// idleMessage is the message of a Rollout with no release in progress.
func (p *planner) idleMessage() string {
	msg := fmt.Sprintf("no release in progress: the workload runs revision %s", p.stable)
	if len(p.obs.Missing) > 0 {
		msg += "; " + cannotStart + ": " + missingList(p.obs.Missing)
	}
	return msg
}

// failReason recovers why a release failed from the Stalled condition the
// reconciler wrote from an earlier plan.
func failReason(s *v1alpha1.RolloutStatus) string {
	if c := meta.FindStatusCondition(s.Conditions, v1alpha1.StalledCondition); c != nil &&
		c.Status == metav1.ConditionTrue && c.Reason != "" {
		return c.Reason
	}
	return v1alpha1.ReasonRollingBack
}
