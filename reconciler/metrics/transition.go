package metrics

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// Transition is what one reconcile's plan did to a Rollout's status.
type Transition struct {
	// Namespace and Name of the Rollout.
	Namespace, Name string
	// Old is the status the planner started from, New the one it wrote
	// (with its conditions).
	Old, New *v1alpha1.RolloutStatus
	// Spec are the approvals of the Rollout's spec.approvals in the
	// cluster; Seen are all the approvals the planner saw (Spec plus those
	// read from Git).
	Spec, Seen []v1alpha1.Approval
	// Now is the reconcile's time.
	Now time.Time
}

// memo is what Metrics remembers of one Rollout, so that a transition
// computed again (a reconcile that read an older status from the cache, a
// status patch that failed and was retried) is observed only once.
type memo struct {
	// step is the step whose start is known; start is zero when the step
	// was first seen without its start (after a controller restart).
	step  stepID
	start time.Time
	// endedRelease is the last release whose end was counted; endedStep
	// the last step whose end was observed: steps of one release end in
	// order, so every step up to it was observed.
	endedRelease releaseID
	endedStep    stepID
	// approved is the last gate whose approval wait was observed.
	approved stepID
	// gauges are what the per-Rollout gauges export (SetRollout).
	gauges gauges
}

// releaseID is one attempt at releasing one revision.
type releaseID struct {
	revision string
	attempt  int32
}

// stepID is one step of one release.
type stepID struct {
	releaseID
	index int32
}

// Transition observes what ended in a reconcile: a release (counted by
// result), a step (its duration), a gate approved (its wait). Each is
// observed once, however often the reconciler reports the same
// transition.
func (m *Metrics) Transition(t Transition) {
	if m == nil || t.Old == nil || t.New == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	mem := m.memoOf(types.NamespacedName{Namespace: t.Namespace, Name: t.Name})
	m.approval(t, mem)
	m.stepEnd(t, mem)
	m.releaseEnd(t, mem)
	m.stepStart(t, mem)
}

// approval observes the wait of a gate that closed because an approval
// names it. A gate that closes for another reason (abort, newer revision)
// is not observed.
func (m *Metrics) approval(t Transition, mem *memo) {
	g := t.Old.AwaitingApproval
	if g == nil {
		return
	}
	if n := t.New.AwaitingApproval; n != nil && n.Revision == g.Revision && n.Step == g.Step && n.Attempt == g.Attempt {
		return // still waiting
	}
	source := ""
	switch {
	case names(t.Spec, g, t.Old.Attempt):
		source = SourceCluster
	case names(t.Seen, g, t.Old.Attempt):
		source = SourceGit
	default:
		return
	}
	gate := stepID{releaseID{revision: g.Revision, attempt: t.Old.Attempt}, g.Step}
	if mem.approved.releaseID == gate.releaseID && mem.approved.index >= gate.index {
		return
	}
	mem.approved = gate
	m.approvalWait.WithLabelValues(source).Observe(max(t.Now.Sub(g.Since.Time), 0).Seconds())
}

// names reports whether an approval opens gate g of the given attempt.
func names(approvals []v1alpha1.Approval, g *v1alpha1.ApprovalRequest, attempt int32) bool {
	for _, a := range approvals {
		if a.Approves(g.Revision, attempt, g.Step) {
			return true
		}
	}
	return false
}

// stepEnd observes the duration of the step Old was in when New is no
// longer in it.
func (m *Metrics) stepEnd(t Transition, mem *memo) {
	old, ok := activeStep(t.Old)
	if !ok {
		return
	}
	if cur, ok := activeStep(t.New); ok && cur == old {
		return
	}
	if mem.endedStep.releaseID == old.releaseID && mem.endedStep.index >= old.index {
		return
	}
	mem.endedStep = old
	if mem.step != old || mem.start.IsZero() {
		return // its start was not seen by this process
	}
	outcome := OutcomeAborted
	if rel, ok := activeRelease(t.New); ok && rel == old.releaseID &&
		(t.New.CurrentStepIndex > old.index || t.New.CurrentStepState == v1alpha1.StepCompleted) {
		outcome = OutcomeCompleted
	} else if completed(t.New, old.releaseID) {
		outcome = OutcomeCompleted
	}
	m.stepDuration.WithLabelValues(t.Namespace, t.Name, outcome).Observe(max(t.Now.Sub(mem.start), 0).Seconds())
}

// releaseEnd counts the release Old was in when New is no longer in it.
func (m *Metrics) releaseEnd(t Transition, mem *memo) {
	old, ok := activeRelease(t.Old)
	if !ok {
		return
	}
	cur, active := activeRelease(t.New)
	if active && cur == old {
		return
	}
	if mem.endedRelease == old {
		return
	}
	mem.endedRelease = old
	result := ResultAborted
	switch {
	case completed(t.New, old):
		result = ResultCompleted
	case t.New.Phase == v1alpha1.PhaseFailed && t.New.CanaryRevision == old.revision:
		if c := meta.FindStatusCondition(t.New.Conditions, v1alpha1.StalledCondition); c == nil ||
			c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonAborted {
			result = ResultFailed
		}
	case active && cur.revision != old.revision:
		result = ResultSuperseded
	}
	m.releases.WithLabelValues(t.Namespace, t.Name, result).Inc()
}

// stepStart remembers when New's step began, the first time it is seen.
func (m *Metrics) stepStart(t Transition, mem *memo) {
	cur, ok := activeStep(t.New)
	if !ok || mem.step == cur {
		return
	}
	mem.step, mem.start = cur, time.Time{}
	switch old, _ := activeStep(t.Old); {
	case old != cur:
		// The step began in this reconcile: its first state's clock.
		mem.start = t.Now
		if s := t.New.StepStartedAt; s != nil {
			mem.start = s.Time
		}
	case cur.index == 1 && t.New.ReleaseStartedAt != nil:
		mem.start = t.New.ReleaseStartedAt.Time
	}
}

// activeRelease returns the release a status is in: a canary revision
// being released (steps, or finishing after the last one, where the
// stable revision may already be the canary one while the declared routes
// come back), neither failed nor rolling back.
func activeRelease(s *v1alpha1.RolloutStatus) (releaseID, bool) {
	finishing := s.Phase == v1alpha1.PhaseProgressing && s.CurrentStepState == v1alpha1.StepCompleted
	if s.CanaryRevision == "" || (s.CanaryRevision == s.StableRevision && !finishing) ||
		(s.Phase != v1alpha1.PhaseProgressing && s.Phase != v1alpha1.PhasePaused) ||
		s.CurrentStepState == v1alpha1.StepRollingBack {
		return releaseID{}, false
	}
	return releaseID{revision: s.CanaryRevision, attempt: s.Attempt}, true
}

// activeStep returns the step of an active release a status is in.
func activeStep(s *v1alpha1.RolloutStatus) (stepID, bool) {
	rel, ok := activeRelease(s)
	if !ok || s.CurrentStepIndex < 1 || s.CurrentStepState == "" || s.CurrentStepState == v1alpha1.StepCompleted {
		return stepID{}, false
	}
	return stepID{rel, s.CurrentStepIndex}, true
}

// completed reports whether s shows release rel done: Healthy with its
// revision as the stable one.
func completed(s *v1alpha1.RolloutStatus, rel releaseID) bool {
	return s.Phase == v1alpha1.PhaseHealthy && s.StableRevision == rel.revision
}
