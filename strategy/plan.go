package strategy

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// Plan is the next action for one Rollout: what the workload adapter and the
// routers should do, the status to write, and when to look again.
type Plan struct {
	// Status is the next status. The planner owns phase, message, the
	// revisions, attempt, the step fields, awaitingApproval, the replica
	// counts, canaryWeight and traffic; it copies observedGeneration,
	// conditions, analysis and git unchanged.
	Status v1alpha1.RolloutStatus

	// Workload says what the workload adapter should do.
	Workload WorkloadAction

	// CanaryReplicas is the number of pods of the canary revision the
	// workload should run. Meaningful with WorkloadScale (and 0 with
	// WorkloadRollback).
	CanaryReplicas int32

	// MaxUnavailable is how many pods may be unavailable while the adapter
	// moves pods: spec failureThreshold resolved against the workload's
	// replicas (rounded down), or Observed.MaxUnavailable when unset.
	MaxUnavailable int32

	// Traffic is what the routers should carry now. It is always
	// DesiredTraffic(spec, &Status).
	Traffic Traffic

	// Released is true once traffic is restored and the workload is back
	// under its own controller because spec.disabled is set or the Rollout
	// is being deleted: the reconciler may then remove its finalizer.
	Released bool

	// RequeueAfter is when to plan again even if nothing is observed to
	// change: the end of a timed pause or grace period, the progress
	// deadline, or a short poll of the routers. Zero means: wait for a watch
	// event.
	RequeueAfter time.Duration

	// Event describes the transition this plan makes; zero when the step,
	// state, phase, revision, attempt and gate are unchanged.
	Event Event

	// Conditions are what the reconciler should write into the conditions
	// the planner has an opinion on.
	Conditions Conditions

	// Hooks, when set, asks the reconciler to call the hooks of a point of
	// the release now (see HookCall).
	Hooks *HookCall
}

// WorkloadAction is what the workload adapter should do with the workload.
type WorkloadAction string

// Workload actions.
const (
	// WorkloadKeep: change nothing (held by spec.strategy.paused, or
	// waiting for traffic to move before pods may move).
	WorkloadKeep WorkloadAction = "Keep"
	// WorkloadScale: keep the workload frozen and run
	// Plan.CanaryReplicas pods of the canary revision, the rest stable.
	WorkloadScale WorkloadAction = "Scale"
	// WorkloadRollback: keep the workload frozen at the stable revision
	// and remove every pod of the canary revision (a failed release whose
	// revert is not yet in Git).
	WorkloadRollback WorkloadAction = "Rollback"
	// WorkloadRelease: give the workload back to its own controller with
	// the settings Git declares, so that it runs its declared template on
	// all pods (finished release, rollback by template, disabled, deleted).
	WorkloadRelease WorkloadAction = "Release"
	// WorkloadLeaveHeld: leave the workload held as it stands, with no
	// Rollout, so no pod moves (a Rollout deleted mid-release with
	// spec.onDelete Hold).
	WorkloadLeaveHeld WorkloadAction = "LeaveHeld"
)

// Event is a Kubernetes event to record for a transition.
type Event struct {
	// Type is "Normal" or "Warning".
	Type string
	// Reason is one of the condition reasons in api/v1alpha1.
	Reason string
	// Message says what happened, for a human.
	Message string
}

// Event types, with the values of corev1.EventTypeNormal and Warning.
const (
	// EventNormal is an informational event.
	EventNormal = "Normal"
	// EventWarning is an event about a failure or a rollback.
	EventWarning = "Warning"
)

// IsZero reports whether there is no event to record.
func (e Event) IsZero() bool { return e.Reason == "" }

// Condition is what one status condition should say. The reconciler sets
// type, observedGeneration and lastTransitionTime.
type Condition struct {
	// Status is True, False or Unknown.
	Status metav1.ConditionStatus
	// Reason is one of the condition reasons in api/v1alpha1.
	Reason string
	// Message is for humans.
	Message string
}

// Conditions holds the planner's intent for the kstatus conditions and the
// release conditions. TrafficShifted, Analysis and GitSynced are the
// reconciler's, from what it observes.
type Conditions struct {
	// Ready is True when no release is in progress and the workload runs
	// the declared revision (or rollgate has let go of it). An empty
	// Status removes it: while a release is under way (kstatus Current).
	Ready Condition
	// Reconciling is True while rollgate works towards the spec before a
	// release can run (a missing dependency) and during a rollback; False
	// while a release runs as planned, a wait for approval included.
	Reconciling Condition
	// Stalled is True when nothing moves without a change to the spec: an
	// invalid spec, or a failed release.
	Stalled Condition
	// Progressing is True while a release moves forward by itself.
	Progressing Condition
	// AwaitingApproval is True while a gate waits for approval.
	AwaitingApproval Condition
}

// ByType returns the conditions keyed by their condition type.
func (c Conditions) ByType() map[string]Condition {
	return map[string]Condition{
		v1alpha1.ReadyCondition:            c.Ready,
		v1alpha1.ReconcilingCondition:      c.Reconciling,
		v1alpha1.StalledCondition:          c.Stalled,
		v1alpha1.ProgressingCondition:      c.Progressing,
		v1alpha1.AwaitingApprovalCondition: c.AwaitingApproval,
	}
}
