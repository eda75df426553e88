package strategy

import (
	"strings"
	"time"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/strategy/rules"
	"github.com/rollgate/rollgate/strategy/verdict"
)

// Observed is what the reconciler saw just before planning: the workload,
// the routers' answer, analysis results and approvals. Everything the
// planner does not remember in the status comes from here.
type Observed struct {
	// Replicas is the number of pods the workload declares (for a
	// DaemonSet, the number of nodes that should run one).
	Replicas int32

	// UpdateRevision is the revision of the workload's pod template now,
	// as declared by Git. During a release it is the canary revision.
	UpdateRevision string

	// StableRevision is the revision the workload was frozen at, as
	// recorded on the workload by the admission webhook. Empty when the
	// workload is not frozen. The status's stableRevision wins when set.
	StableRevision string

	// Held is true while rollgate holds the workload (paused Deployment,
	// partition, OnDelete, or a canary Deployment beside it).
	Held bool

	// ApprovalsNeedProof is true under the Repository's approval policy
	// (spec.approvals of the Repository): only approvals proven in Git
	// count, so no other route through a gate may skip one — spec.promote
	// waits for the approvals of the gates it would skip, and a disabled
	// Rollout leaves its workload held instead of handing it back.
	ApprovalsNeedProof bool

	// HeldWithoutRollout is true when the workload is marked to stay held
	// after its Rollout is gone (WorkloadLeaveHeld done).
	HeldWithoutRollout bool

	// Pods counts the workload's pods by revision (the rollgate.dev/revision
	// of their template). Revisions without pods may be missing.
	Pods map[string]PodCounts

	// Leaving counts the pods of other revisions than UpdateRevision that
	// are shutting down: they may still answer requests, so a release (or
	// a rollback by template) is not over until they are gone.
	Leaving int32

	// MaxUnavailable is the workload's own maxUnavailable resolved to a
	// number of pods. It is the default when the strategy sets no
	// failureThreshold.
	MaxUnavailable int32

	// TrafficDone is the routers' answer for DesiredTraffic(spec, status)
	// with the status passed to Decide: true when that traffic is applied.
	// Without trafficRoutings it should be true.
	TrafficDone bool

	// TrafficChangedAt is when the routers last confirmed a change of
	// traffic (for example the lastTransitionTime of TrafficShifted turning
	// True). Zero when unknown; the planner then counts the grace period
	// from the start of the current step state.
	TrafficChangedAt time.Time

	// StepAnalysis is the outcome of the analysis of the step the status
	// names (status.currentStepIndex of status.canaryRevision and
	// status.attempt), while the status is in StepMetricsAnalysis. The
	// planner ignores it in any other state.
	StepAnalysis AnalysisResult

	// BackgroundAnalysis is the outcome of spec.strategy.*.analysis, which
	// runs for the whole release of status.canaryRevision.
	BackgroundAnalysis AnalysisResult

	// Approvals are spec.approvals together with the approvals found on the
	// tracked Git branch, in one list. Only an approval naming the canary
	// revision, the attempt under way and the current step opens that
	// step's gate.
	Approvals []v1alpha1.Approval

	// Deleting is true when the Rollout has a deletion timestamp.
	Deleting bool

	// Missing names the objects and scripts a release needs that do not
	// exist (the Service, route or script a trafficRouting names, an
	// AnalysisTemplate), each with the field naming it. While it is not
	// empty no release starts: the workload stays frozen at the stable
	// revision and the routes stay as declared.
	Missing []string

	// Fleet is spec.fleet.waitFor as judged from the other clusters'
	// status files in Git, one entry per wait. A closed gate holds the
	// step it guards and every later one; a release whose first step it
	// guards does not start.
	Fleet []FleetGate

	// Freezes are the freezes and windows of the Repository's freezes
	// file that hold this Rollout now (package freeze; a file that cannot
	// be read is one hold saying why). While one holds, no release
	// starts; while one holding steps holds, a release under way starts
	// no next step unless it is past its last gate (it passed a gate and
	// none is left). Rollbacks, aborts and deletion are never held.
	Freezes []rules.Hold

	// Queue is set when the release the planner would start has no place
	// in a budget of the release rules: it then waits, and
	// status.queue records its place. Only the start of a release is
	// gated (the reconciler plans again with Queue set).
	Queue *QueueTicket

	// Group is the lockstep group of spec.group as observed: the other
	// members' specs and statuses. A step starts only when every member
	// in release finished the step before; a member other than the
	// group's coordinator passes a gate when the coordinator did; a
	// failure of a member during this release rolls this one back. Nil
	// without spec.group.
	Group *Group

	// Invalid is a spec problem found while observing (an analysis
	// template that cannot be used). A release in progress holds where it
	// is and the plan reports it as an invalid spec; rollbacks, deletion
	// and spec.disabled go on.
	Invalid *SpecError
}

// FleetGate is one spec.fleet.waitFor entry as judged by the reconciler.
type FleetGate struct {
	// BeforeStep is the step the wait guards (1: the whole release).
	BeforeStep int32
	// Open is true when the upstream release reached the point the wait
	// asks for, with the version this Rollout releases.
	Open bool
	// Why names the cluster and says why the gate is closed, for
	// status.message (for example "cluster staging: demo/app is at step
	// 1/3 of api=app:2").
	Why string
	// Until, when set, is when a closed gate opens by itself (the end of
	// a bake time): the planner looks again then rather than polling Git.
	Until time.Time
}

// fleetHolds returns why the first closed fleet gate guarding step (or an
// earlier one) holds it, and when to look again: at the end of its bake
// time, or within fleetPoll.
func (o *Observed) fleetHolds(step int32, now time.Time) (string, time.Duration, bool) {
	for _, g := range o.Fleet {
		if !g.Open && g.BeforeStep <= step {
			wait := fleetPoll
			if !g.Until.IsZero() {
				wait = max(g.Until.Sub(now), time.Second)
			}
			return g.Why, wait, true
		}
	}
	return "", 0, false
}

// freezeHolds returns why the freezes hold (joined with "; "), and when
// to look again: at the earliest end of a window or a freeze's until, and
// within freezePoll when only a change in Git lifts one. steps asks about
// the next step of a release under way (only holds of Steps count);
// otherwise about the start of a release.
func (o *Observed) freezeHolds(steps bool, now time.Time) (string, time.Duration, bool) {
	var why []string
	wait := freezePoll
	for _, h := range o.Freezes {
		if steps && !h.Steps {
			continue
		}
		why = append(why, h.Why)
		if !h.Until.IsZero() {
			wait = min(wait, max(h.Until.Sub(now), time.Second))
		}
	}
	return strings.Join(why, "; "), wait, len(why) > 0
}

// QueueTicket is a release's place in a budget's queue, as the
// reconciler's budget ledger judged it.
type QueueTicket struct {
	// Budget names the budget.
	Budget string
	// Position is the place among the releases waiting (1: next).
	Position int32
	// Why says what is in flight, for status.message.
	Why string
}

// PodCounts counts the pods of one revision.
type PodCounts struct {
	// Total is the number of pods, ready or not.
	Total int32
	// Ready is the number of ready pods.
	Ready int32
}

// AnalysisPhase is the state of a running or finished analysis. Package
// analysis owns the phase values (verdict.PhaseRunning, ...), the names
// of status.analysis; verdict.PhaseNone means no analysis runs (or none
// has reported yet). An Error outcome is treated like Failed.
type AnalysisPhase = verdict.Phase

// AnalysisResult is the outcome of one analysis.
type AnalysisResult struct {
	// Phase of the analysis.
	Phase AnalysisPhase
	// Message names the deciding metric, its value and the condition, for
	// example `success-rate = 0.91: failed "result[0] >= 0.99"`. It is put
	// into status and events as is.
	Message string
}

// failed reports whether the analysis decided against the release.
func (a AnalysisResult) failed() bool {
	return a.Phase == verdict.PhaseFailed || a.Phase == verdict.PhaseError
}

// totalReady is the number of ready pods across all revisions.
func (o *Observed) totalReady() int32 {
	var n int32
	for _, c := range o.Pods {
		n += c.Ready
	}
	return n
}

// othersTotal is the number of pods of revisions other than rev.
func (o *Observed) othersTotal(rev string) int32 {
	var n int32
	for r, c := range o.Pods {
		if r != rev {
			n += c.Total
		}
	}
	return n
}
