package strategy

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/strategy/verdict"
)

const (
	// defaultProgressDeadline applies when spec.progressDeadlineSeconds is
	// unset (the CRD defaults it to the same value).
	defaultProgressDeadline = 600 * time.Second
	// routerPoll is how soon to look again while the routers have not
	// confirmed the traffic: routes rarely cause a watch event.
	routerPoll = 2 * time.Second
	// dependencyPoll is how soon to look again for an object a release
	// needs (not every kind is watched).
	dependencyPoll = 10 * time.Second
	// fleetPoll is how soon to look again at other clusters' progress in
	// Git while a fleet gate is closed (Git is fetched at most once per
	// Repository interval).
	fleetPoll = 5 * time.Second
	// freezePoll is how soon to look again while a freeze holds: a merge
	// that lifts it is read from the tracked branch, fetched at least
	// once a minute (at once on a push webhook).
	freezePoll = 30 * time.Second
	// budgetPoll is how soon a release waiting in a budget's queue asks
	// again for a place.
	budgetPoll = 5 * time.Second
)

// Decide plans the next action for one Rollout from its spec, its status
// (the planner's only memory), what the reconciler observed, and the time.
// It does not modify its arguments and reads no clock: called again with the
// returned status and the same observation it continues from there, and it
// advances a step only when the status names that step and the step's
// conditions hold.
//
// An error wraps ErrInvalidSpec (see SpecError); the returned plan then
// holds everything in place (WorkloadKeep, the traffic the status already
// asks for) and reports Stalled with reason InvalidSpec. Deletion,
// spec.disabled and rollbacks never need the steps, so they go on even
// with an invalid spec.
func Decide(spec *v1alpha1.RolloutSpec, status *v1alpha1.RolloutStatus, obs Observed, now time.Time) (Plan, error) {
	p := newPlanner(spec, status, obs, now)
	if err := p.decide(); err != nil {
		return p.invalid(err), err
	}
	return p.result(), nil
}

// planner holds one Decide call.
type planner struct {
	spec  *v1alpha1.RolloutSpec
	in    *v1alpha1.RolloutStatus
	obs   Observed
	now   time.Time
	stamp time.Time // now rounded up to the second precision status times have

	canary, stable string
	steps          []Step
	maxUnavailable int32

	next      v1alpha1.RolloutStatus
	plan      Plan
	reason    string
	settled   bool // nothing left to do in this phase (conditions)
	restarted bool // a release (re)started in this call
	// beforeHooksHold: the current step waits for its before hooks, so
	// its pods stay as the previous step left them; hooksAnsweredAt is
	// when the last of them said yes (the step's deadline counts from
	// then).
	beforeHooksHold bool
	hooksAnsweredAt time.Time
}

func newPlanner(spec *v1alpha1.RolloutSpec, status *v1alpha1.RolloutStatus, obs Observed, now time.Time) *planner {
	// Status times have whole seconds; round up, so that a pause or a grace
	// period counted from a stamp never ends early.
	stamp := now.Truncate(time.Second)
	if stamp.Before(now) {
		stamp = stamp.Add(time.Second)
	}
	p := &planner{spec: spec, in: status, obs: obs, now: now, stamp: stamp}
	p.next = *status.DeepCopy()
	p.next.Queue = nil // set again only while a release waits in a queue (newRelease)
	p.canary = obs.UpdateRevision
	p.stable = firstNonEmpty(status.StableRevision, obs.StableRevision, obs.UpdateRevision)
	p.maxUnavailable, _ = maxUnavailable(spec, obs.Replicas, obs.MaxUnavailable)
	p.plan.Workload = WorkloadKeep
	return p
}

// decide picks the situation, most urgent first.
func (p *planner) decide() error {
	switch {
	case p.obs.Deleting || p.spec.Disabled:
		p.releaseControl()
	case p.canary == p.stable:
		return p.atStable()
	case p.startsRelease():
		return p.newRelease()
	default:
		return p.continueRelease()
	}
	return nil
}

// startsRelease reports whether the workload's revision is not the one the
// status is releasing (a new or continuous release), or a rollback by
// template was under way and the template moved on again.
func (p *planner) startsRelease() bool {
	in := p.in
	return !inRelease(in) || in.CanaryRevision != p.canary ||
		(in.CurrentStepState == v1alpha1.StepRollingBack && in.Phase != v1alpha1.PhaseFailed)
}

// newRelease starts releasing the workload's revision from step 1.
func (p *planner) newRelease() error {
	if p.spec.Strategy.Paused {
		p.hold(fmt.Sprintf("revision %s waits to be released: spec.strategy.paused is true", p.canary))
		return nil
	}
	if p.obs.Invalid != nil {
		return p.obs.Invalid
	}
	if err := p.groupMismatch(); err != nil {
		return err
	}
	if len(p.obs.Missing) > 0 {
		p.hold(fmt.Sprintf("revision %s waits to be released: %s", p.canary, missingList(p.obs.Missing)))
		p.reason = v1alpha1.ReasonDependencyNotFound
		p.requeue(dependencyPoll)
		return nil
	}
	if why, wait, held := p.obs.fleetHolds(1, p.now); held {
		p.hold(fmt.Sprintf("revision %s waits to be released: %s", p.canary, why))
		p.reason = v1alpha1.ReasonWaitingForFleet
		p.requeue(wait)
		return nil
	}
	if why, wait, held := p.obs.freezeHolds(false, p.now); held {
		p.hold(fmt.Sprintf("revision %s waits to be released: %s", p.canary, why))
		p.reason = v1alpha1.ReasonWaitingForFreeze
		p.requeue(wait)
		return nil
	}
	if q := p.obs.Queue; q != nil {
		p.hold(fmt.Sprintf("revision %s waits to be released: %s; position %d in its queue", p.canary, q.Why, q.Position))
		p.reason = v1alpha1.ReasonWaitingForBudget
		since := p.timestamp()
		if in := p.in.Queue; in != nil && in.Budget == q.Budget {
			since = in.Since.DeepCopy()
		}
		p.next.Queue = &v1alpha1.QueueStatus{Budget: q.Budget, Position: q.Position, Since: *since}
		p.requeue(budgetPoll)
		return nil
	}
	if err := p.resolve(); err != nil {
		return err
	}
	p.start(1)
	return p.runSteps()
}

// continueRelease moves the release the status records.
func (p *planner) continueRelease() error {
	if p.in.Phase == v1alpha1.PhaseFailed {
		return p.failedRelease()
	}
	if p.aborts() {
		p.fail(v1alpha1.ReasonAborted, "spec.abort: "+orDefault(p.spec.Abort.Reason, "requested"))
		return nil
	}
	if cause, failed := p.analysisFailure(); failed {
		p.fail(v1alpha1.ReasonAnalysisFailed, cause)
		return nil
	}
	if cause, failed := p.groupFailure(); failed {
		p.fail(v1alpha1.ReasonGroupFailed, cause)
		return nil
	}
	if p.obs.Invalid != nil {
		return p.obs.Invalid
	}
	if err := p.groupMismatch(); err != nil {
		return err
	}
	if p.spec.Strategy.Paused {
		p.hold(fmt.Sprintf("release of %s held at step %d/%d (%s): spec.strategy.paused is true",
			p.canary, p.in.CurrentStepIndex, p.in.StepCount, p.in.CurrentStepState))
		return nil
	}
	if p.in.Phase == v1alpha1.PhasePaused {
		// Resuming restarts the clocks of the current state: time held
		// counts neither against the deadline nor as pause time.
		p.next.Phase = v1alpha1.PhaseProgressing
		p.next.StepStartedAt = p.timestamp()
	}
	if p.in.CurrentStepState == v1alpha1.StepCompleted {
		p.finalize()
		return nil
	}
	if pr := p.spec.Promote; pr != nil && pr.Revision == p.canary && p.obs.Group != nil {
		err := p.runSteps()
		p.next.Message += fmt.Sprintf("; spec.promote is not followed by a member of group %s: the members release as one, "+
			"so approve the group's gates on its coordinator instead", p.obs.Group.Name)
		return err
	}
	if pr := p.spec.Promote; pr != nil && pr.Revision == p.canary {
		missing := p.unprovenGates()
		if len(missing) == 0 {
			p.next.Phase = v1alpha1.PhaseProgressing
			p.enter(v1alpha1.StepCompleted)
			p.finalize()
			return nil
		}
		err := p.runSteps()
		p.next.Message += fmt.Sprintf("; spec.promote waits: under the Repository's approval policy it skips no gate, "+
			"and step %s of %s has no approval proven in Git", joinSteps(missing), p.canary)
		return err
	}
	return p.runSteps()
}

// unprovenGates are the gated steps, from the current one on, with no
// approval, when approvals need proof (ApprovalsNeedProof): the gates a
// promotion may not skip. None without a policy.
func (p *planner) unprovenGates() []int32 {
	if !p.obs.ApprovalsNeedProof {
		return nil
	}
	if err := p.resolve(); err != nil {
		return []int32{max(p.next.CurrentStepIndex, 1)} // runSteps reports the spec
	}
	var missing []int32
	for idx := max(p.next.CurrentStepIndex, 1); int(idx) <= len(p.steps); idx++ {
		if p.steps[idx-1].Gate && !p.approved(idx) {
			missing = append(missing, idx)
		}
	}
	return missing
}

// joinSteps lists step numbers: "2", "2 and 3", "2, 3 and 4".
func joinSteps(steps []int32) string {
	s := make([]string, len(steps))
	for i, n := range steps {
		s[i] = fmt.Sprint(n)
	}
	if len(s) == 1 {
		return s[0]
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// failedRelease keeps a failed release rolled back until spec.retry asks
// for a new attempt.
func (p *planner) failedRelease() error {
	if r := p.spec.Retry; r != nil && r.Revision == p.canary && r.Attempt > p.in.Attempt &&
		!p.spec.Strategy.Paused && !p.aborts() {
		if err := p.resolve(); err != nil {
			return err
		}
		p.start(r.Attempt)
		return p.runSteps()
	}
	p.reason = failReason(p.in)
	p.rollingBack()
	p.rollbackHooks()
	return nil
}

// start begins a release (or a new attempt) at step 1.
func (p *planner) start(attempt int32) {
	p.restarted = true
	p.next.Phase = v1alpha1.PhaseProgressing
	p.next.CanaryRevision = p.canary
	p.next.StableRevision = p.stable
	p.next.Attempt = attempt
	p.next.StepCount = int32(len(p.steps))
	p.next.CurrentStepIndex = 1
	p.next.ReleaseStartedAt = p.timestamp()
	p.enter(v1alpha1.StepUpgrade)
}

// hold keeps everything where it is for spec.strategy.paused.
func (p *planner) hold(msg string) {
	p.next.Phase = v1alpha1.PhasePaused
	p.next.Message = msg
	p.reason = v1alpha1.ReasonPaused
	p.plan.Workload = WorkloadKeep
}

// resolve resolves the steps and failureThreshold against the workload.
func (p *planner) resolve() error {
	steps, err := ResolveSteps(p.spec, p.obs.Replicas)
	if err != nil {
		return err
	}
	p.steps = steps
	p.maxUnavailable, err = maxUnavailable(p.spec, p.obs.Replicas, p.obs.MaxUnavailable)
	return err
}

// aborts reports whether spec.abort names the canary revision.
func (p *planner) aborts() bool {
	return p.spec.Abort != nil && p.spec.Abort.Revision == p.canary
}

// analysisFailure reports a failed background analysis, or a failed
// analysis of the step the status is analysing.
func (p *planner) analysisFailure() (string, bool) {
	if p.in.CurrentStepState == v1alpha1.StepCompleted {
		return "", false
	}
	if bg := p.obs.BackgroundAnalysis; bg.failed() {
		return fmt.Sprintf("background analysis %s: %s", phaseWord(bg.Phase), bg.Message), true
	}
	if sa := p.obs.StepAnalysis; sa.failed() && p.in.CurrentStepState == v1alpha1.StepMetricsAnalysis {
		return fmt.Sprintf("analysis of step %d %s: %s", p.in.CurrentStepIndex, phaseWord(sa.Phase), sa.Message), true
	}
	return "", false
}

// enter moves the current step to state s and restarts its clock.
func (p *planner) enter(s v1alpha1.StepState) {
	p.next.CurrentStepState = s
	p.next.StepStartedAt = p.timestamp()
	p.next.AwaitingApproval = nil
}

// timestamp returns a new *metav1.Time of now.
func (p *planner) timestamp() *metav1.Time {
	t := metav1.NewTime(p.stamp)
	return &t
}

// requeue asks to plan again after d at the latest.
func (p *planner) requeue(d time.Duration) {
	if d > 0 && (p.plan.RequeueAfter == 0 || d < p.plan.RequeueAfter) {
		p.plan.RequeueAfter = d
	}
}

// trafficDone reports whether the routers confirmed the traffic the next
// status asks for: their answer is about the input status's traffic, so it
// counts only when both ask for the same.
func (p *planner) trafficDone() bool {
	return p.obs.TrafficDone && sameTarget(p.spec, p.in, &p.next)
}

// trafficSettled reports whether the traffic is confirmed and its grace
// period is over, and asks to look again otherwise.
func (p *planner) trafficSettled() bool {
	if !p.trafficDone() {
		p.requeue(routerPoll)
		return false
	}
	if left := p.graceLeft(); left > 0 {
		p.requeue(left)
		return false
	}
	return true
}

// graceLeft is the part of gracePeriodSeconds still to wait after the last
// traffic change (or the start of the current state, if later). Without a
// grace period there is none: the state's start, stamped up to the next
// second, must not make a step wait for that second.
func (p *planner) graceLeft() time.Duration {
	rs := p.spec.Strategy.TrafficRoutings()
	if len(rs) == 0 || rs[0].GracePeriod() <= 0 {
		return 0
	}
	start := p.obs.TrafficChangedAt
	if st := p.next.StepStartedAt; st != nil && st.After(start) {
		start = st.Time
	}
	return start.Add(rs[0].GracePeriod()).Sub(p.now)
}

// workloadSettled reports whether the workload is released and runs its
// declared revision on every pod, with enough of them ready.
func (p *planner) workloadSettled() bool {
	up := p.obs.Pods[p.obs.UpdateRevision]
	return !p.obs.Held && p.obs.othersTotal(p.obs.UpdateRevision) == 0 && p.obs.Leaving == 0 &&
		up.Ready >= p.obs.Replicas-p.maxUnavailable
}

// missingList joins the missing objects for a message.
func missingList(missing []string) string {
	return strings.Join(missing, "; ")
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func phaseWord(ph AnalysisPhase) string {
	if ph == verdict.PhaseError {
		return "could not measure"
	}
	return "failed"
}
