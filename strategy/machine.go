package strategy

import (
	"fmt"
	"time"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/strategy/verdict"
)

// runSteps moves the current step through its states for as long as their
// conditions hold with this observation, then plans the workload.
//
// It stops where the observation cannot vouch for the new state: a traffic
// target other than the one the routers answered for, or an analysis the
// reconciler has not started yet. So one call moves traffic at most once.
func (p *planner) runSteps() error {
	if err := p.resolve(); err != nil {
		return err
	}
	p.next.StepCount = int32(len(p.steps))
	p.normalizeStep()
	for range 5*len(p.steps) + 5 {
		if p.next.Phase == v1alpha1.PhaseFailed || p.next.CurrentStepState == v1alpha1.StepCompleted {
			break
		}
		if !p.advance() {
			break
		}
	}
	switch {
	case p.next.Phase == v1alpha1.PhaseFailed:
		// fail planned the rollback.
	case p.next.CurrentStepState == v1alpha1.StepCompleted:
		p.finalize()
	default:
		p.plan.Workload = WorkloadScale
		p.plan.CanaryReplicas = p.target(p.next.CurrentStepIndex)
		if p.beforeHooksHold {
			// The step has not started: its pods wait for its hooks.
			p.plan.CanaryReplicas = 0
			if prev := p.next.CurrentStepIndex - 1; prev >= 1 {
				p.plan.CanaryReplicas = p.target(prev)
			}
		}
	}
	return nil
}

// normalizeStep keeps the step index valid when the steps changed: a step
// that no longer exists becomes the last step, brought up again from
// StepUpgrade.
func (p *planner) normalizeStep() {
	n := int32(len(p.steps))
	switch {
	case p.next.CurrentStepIndex < 1:
		p.next.CurrentStepIndex = 1
		p.enter(v1alpha1.StepUpgrade)
	case p.next.CurrentStepIndex > n:
		p.next.CurrentStepIndex = n
		p.enter(v1alpha1.StepUpgrade)
	}
	switch p.next.CurrentStepState {
	case v1alpha1.StepUpgrade, v1alpha1.StepTrafficRouting, v1alpha1.StepMetricsAnalysis,
		v1alpha1.StepPaused, v1alpha1.StepReady:
	default:
		p.enter(v1alpha1.StepUpgrade)
	}
	if p.next.StepStartedAt == nil {
		p.next.StepStartedAt = p.timestamp()
	}
}

// advance tries one transition of the current step.
func (p *planner) advance() bool {
	switch p.next.CurrentStepState {
	case v1alpha1.StepUpgrade:
		return p.upgrade()
	case v1alpha1.StepTrafficRouting:
		return p.routeTraffic()
	case v1alpha1.StepMetricsAnalysis:
		return p.analyse()
	case v1alpha1.StepPaused:
		return p.pause()
	case v1alpha1.StepReady:
		return p.ready()
	}
	return false
}

// upgrade waits for the step's new pods to be ready with the availability
// floor holding, within the progress deadline.
func (p *planner) upgrade() bool {
	idx := p.next.CurrentStepIndex
	if !p.holdForHooks(v1alpha1.HookBefore) {
		p.beforeHooksHold = p.next.Phase != v1alpha1.PhaseFailed
		return false
	}
	want := p.target(idx)
	c := p.obs.Pods[p.canary]
	floor := p.obs.Replicas - p.maxUnavailable
	if c.Ready >= want && p.obs.totalReady() >= floor {
		p.enter(v1alpha1.StepTrafficRouting)
		return true
	}
	p.reason = v1alpha1.ReasonProgressing
	left := p.deadlineLeft()
	if left <= 0 {
		p.fail(v1alpha1.ReasonProgressDeadlineExceeded, fmt.Sprintf(
			"step %d/%d: %d of %d new pods ready and %d of %d pods ready in total after %s (spec.progressDeadlineSeconds)",
			idx, len(p.steps), c.Ready, want, p.obs.totalReady(), p.obs.Replicas, p.deadline()))
		return false
	}
	p.requeue(left)
	// The message says what the step waits for, not how far it got: the
	// counts are status fields, and a message that changed with every pod
	// would rewrite every condition (and their transition times) each time.
	if c.Ready < want {
		p.next.Message = fmt.Sprintf("step %d/%d: waiting for %d new pods of %s to be ready", idx, len(p.steps), want, p.canary)
	} else {
		p.next.Message = fmt.Sprintf("step %d/%d: waiting for %d pods ready in total (replicas less maxUnavailable)", idx, len(p.steps), max(floor, 0))
	}
	return false
}

// routeTraffic waits for the routers to carry the step's traffic and for
// the grace period after a change, within the progress deadline.
func (p *planner) routeTraffic() bool {
	idx := p.next.CurrentStepIndex
	if len(p.spec.Strategy.TrafficRoutings()) == 0 {
		p.enter(v1alpha1.StepMetricsAnalysis)
		return true
	}
	t := p.steps[idx-1].Traffic
	p.reason = v1alpha1.ReasonProgressing
	if !p.trafficDone() {
		left := p.deadlineLeft()
		if left <= 0 {
			p.fail(v1alpha1.ReasonProgressDeadlineExceeded, fmt.Sprintf(
				"step %d/%d: the routers did not confirm traffic %s within %s (spec.progressDeadlineSeconds)",
				idx, len(p.steps), describe(t), p.deadline()))
			return false
		}
		p.requeue(min(routerPoll, left))
		p.next.Message = fmt.Sprintf("step %d/%d: waiting for the routers to apply traffic %s", idx, len(p.steps), describe(t))
		return false
	}
	if !t.Equal(p.trafficBefore(idx)) {
		if left := p.graceLeft(); left > 0 {
			p.requeue(left)
			p.next.Message = fmt.Sprintf("step %d/%d: traffic %s applied; letting it settle for %s",
				idx, len(p.steps), describe(t), left.Round(time.Second))
			return false
		}
	}
	p.enter(v1alpha1.StepMetricsAnalysis)
	return true
}

// analyse waits for the step's analysis to succeed. A failure is handled
// before the step machine runs (see analysisFailure); an inconclusive
// result is a gate.
func (p *planner) analyse() bool {
	idx := p.next.CurrentStepIndex
	if !p.steps[idx-1].Analysis {
		p.enter(v1alpha1.StepPaused)
		return true
	}
	var res AnalysisResult
	if !p.restarted && p.in.CurrentStepIndex == idx && p.in.CurrentStepState == v1alpha1.StepMetricsAnalysis {
		res = p.obs.StepAnalysis
	}
	switch res.Phase {
	case verdict.PhaseSuccessful:
		p.enter(v1alpha1.StepPaused)
		return true
	case verdict.PhaseInconclusive:
		return p.gate(approvalInconclusive, "analysis: "+res.Message, v1alpha1.StepPaused)
	}
	p.reason = v1alpha1.ReasonProgressing
	p.next.Message = fmt.Sprintf("step %d/%d: waiting for the analysis of %s", idx, len(p.steps), p.canary)
	return false
}

// pause waits for a timed pause to end, then for approval where the step
// is a gate (or background analysis is inconclusive).
func (p *planner) pause() bool {
	idx := p.next.CurrentStepIndex
	s := p.steps[idx-1]
	if s.Pause > 0 {
		end := p.next.StepStartedAt.Add(s.Pause)
		if left := end.Sub(p.now); left > 0 {
			p.requeue(left)
			p.reason = v1alpha1.ReasonPausing
			p.next.Message = fmt.Sprintf("step %d/%d: pausing for %s, until %s",
				idx, len(p.steps), s.Pause, end.UTC().Format(time.RFC3339))
			return false
		}
	}
	switch bg := p.obs.BackgroundAnalysis; {
	case s.Gate:
		return p.gate(approvalManual, "", v1alpha1.StepReady)
	case bg.Phase == verdict.PhaseInconclusive:
		return p.gate(approvalInconclusive, "background analysis: "+bg.Message, v1alpha1.StepReady)
	}
	p.enter(v1alpha1.StepReady)
	return true
}

// ready starts the next step, or completes the release after the last,
// once the fleet gates guarding it are open (spec.fleet; a beforeStep
// past the last step guards the completion).
func (p *planner) ready() bool {
	idx := p.next.CurrentStepIndex
	if !p.holdForHooks(v1alpha1.HookAfter) {
		return false
	}
	if why, wait, held := p.obs.fleetHolds(idx+1, p.now); held {
		p.waitBeforeNext(v1alpha1.ReasonWaitingForFleet, why, wait)
		return false
	}
	if why, held := p.groupHolds(idx); held {
		p.waitBeforeNext(v1alpha1.ReasonWaitingForGroup, why, groupPoll)
		return false
	}
	if why, wait, held := p.obs.freezeHolds(true, p.now); held && !p.pastLastGate(idx) {
		p.waitBeforeNext(v1alpha1.ReasonWaitingForFreeze, why, wait)
		return false
	}
	if int(idx) < len(p.steps) {
		p.next.CurrentStepIndex = idx + 1
		p.enter(v1alpha1.StepUpgrade)
		return true
	}
	p.enter(v1alpha1.StepCompleted)
	return false
}

// waitBeforeNext holds a release done with its current step before the
// next one (or its completion), for reason, saying why, and looks again
// after wait.
func (p *planner) waitBeforeNext(reason, why string, wait time.Duration) {
	idx := p.next.CurrentStepIndex
	next := fmt.Sprintf("step %d", idx+1)
	if int(idx) >= len(p.steps) {
		next = "completion"
	}
	p.reason = reason
	p.next.Message = fmt.Sprintf("step %d/%d of %s waits before %s: %s", idx, len(p.steps), p.canary, next, why)
	p.requeue(wait)
}

// pastLastGate reports whether a release done with step idx passed a
// gate and has none left: everything still to come was approved, so a
// freeze lets it finish rather than keep two versions serving for as long
// as the freeze lasts.
func (p *planner) pastLastGate(idx int32) bool {
	passed := false
	for i, s := range p.steps {
		if s.Gate {
			if int32(i+1) > idx {
				return false
			}
			passed = true
		}
	}
	return passed
}

// Reasons of an ApprovalRequest.
const (
	approvalManual       = "Manual"
	approvalInconclusive = "Inconclusive"
)

// gate moves on to state then when the current step of the canary revision
// is approved, and records the wait otherwise.
func (p *planner) gate(kind, detail string, then v1alpha1.StepState) bool {
	idx := p.next.CurrentStepIndex
	if kind == approvalManual {
		if moved, handled := p.groupGate(idx, then); handled {
			return moved
		}
	}
	if p.approved(idx) {
		p.enter(then)
		return true
	}
	req := &v1alpha1.ApprovalRequest{Revision: p.canary, Step: idx, Since: *p.timestamp(), Reason: kind}
	if p.next.Attempt > 1 {
		req.Attempt = p.next.Attempt
	}
	if old := p.in.AwaitingApproval; old != nil && !p.restarted &&
		old.Revision == req.Revision && old.Attempt == req.Attempt && old.Step == idx && old.Reason == kind {
		req.Since, req.Branch, req.PullRequestURL = old.Since, old.Branch, old.PullRequestURL
	}
	p.next.AwaitingApproval = req
	p.reason = v1alpha1.ReasonWaitingForApproval
	why := "waits for approval"
	if kind == approvalInconclusive {
		p.reason = v1alpha1.ReasonAnalysisInconclusive
		why = "is inconclusive (" + detail + ") and waits for approval"
	}
	attempt := ""
	if req.Attempt > 1 {
		attempt = fmt.Sprintf(" attempt %d", req.Attempt)
	}
	p.next.Message = fmt.Sprintf("step %d/%d of %s %s: approve revision %s%s step %d in spec.approvals (merge the approval pull request)",
		idx, len(p.steps), p.canary, why, p.canary, attempt, idx)
	if g := p.obs.Group; g != nil && kind == approvalManual {
		p.next.Message += fmt.Sprintf("; the gate of group %s: its approval lets every member pass step %d", g.Name, idx)
	}
	return false
}

// approved reports whether an approval names the canary revision, the
// attempt under way and step: an approval given before a retry does not
// open the gates of the new attempt.
func (p *planner) approved(step int32) bool {
	for _, a := range p.obs.Approvals {
		if a.Approves(p.canary, p.next.Attempt, step) {
			return true
		}
	}
	return false
}

// target is the number of canary pods for step idx: the step's replicas,
// resolved against the workload's live replica count. When an autoscaler
// (or `kubectl scale`) changes that count mid-release, the batch follows
// it both ways: a step of 25% runs 2 pods of 8 and 1 of 4, never the 2 it
// ran before the scale-down (that would be 50%).
//
// A step that replaces every pod keeps the last stable pod until the
// routers carry a traffic that sends nothing to stable: the stable Service
// never loses its last pod while it still gets requests. (With an extra
// canary Deployment the stable pods stay anyway.) Once every pod was
// replaced, it stays so.
func (p *planner) target(idx int32) int32 {
	want := p.steps[idx-1].Replicas
	if want >= p.obs.Replicas && p.obs.Replicas > 1 && p.keepsStable() && p.stableStillServes(idx) {
		have := min(p.obs.Pods[p.canary].Total, max(p.obs.Replicas, 0))
		want = max(p.obs.Replicas-1, have)
	}
	return want
}

// keepsStable reports whether the release replaces stable pods (partition
// style), as opposed to adding canary pods beside them.
func (p *planner) keepsStable() bool {
	if c := p.spec.Strategy.Canary; c != nil {
		return !c.EnableExtraWorkloadForCanary && len(c.TrafficRoutings) > 0
	}
	return false
}

// stableStillServes reports whether requests may still reach the stable
// pods at step idx: before the routers confirmed the step's traffic, or
// when that traffic leaves some requests on stable.
func (p *planner) stableStillServes(idx int32) bool {
	switch p.next.CurrentStepState {
	case v1alpha1.StepUpgrade:
		return true
	case v1alpha1.StepTrafficRouting:
		if !p.trafficDone() {
			return true
		}
	}
	t := p.steps[idx-1].Traffic
	return t.Mode != TrafficCanary || len(t.Matches) > 0 || t.Weight < 100
}

// trafficBefore is the traffic while step idx's pods come up.
func (p *planner) trafficBefore(idx int32) Traffic {
	if idx <= 1 {
		return baseTraffic(len(p.spec.Strategy.TrafficRoutings()) > 0)
	}
	return p.steps[idx-2].Traffic
}

// deadline is spec.progressDeadlineSeconds.
func (p *planner) deadline() time.Duration {
	if s := p.spec.ProgressDeadlineSeconds; s != nil {
		return time.Duration(*s) * time.Second
	}
	return defaultProgressDeadline
}

// deadlineLeft is the time left before the current state misses the
// progress deadline.
func (p *planner) deadlineLeft() time.Duration {
	start := p.next.StepStartedAt.Time
	if p.hooksAnsweredAt.After(start) {
		// The step's pods started moving when its before hooks said yes.
		start = p.hooksAnsweredAt
	}
	return start.Add(p.deadline()).Sub(p.now)
}

// describe renders traffic for messages.
func describe(t Traffic) string {
	switch t.Mode {
	case TrafficOriginal:
		return "as declared"
	case TrafficStable:
		return "0% (all to stable)"
	case TrafficPromoted:
		return "100% (the stable Service on the new revision too)"
	}
	return t.String()
}
