package strategy

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// result completes the plan from the next status.
func (p *planner) result() Plan {
	p.fillObserved()
	p.plan.Traffic = DesiredTraffic(p.spec, &p.next)
	p.plan.MaxUnavailable = p.maxUnavailable
	p.plan.Status = p.next
	p.plan.Conditions = p.conditions()
	p.plan.Event = p.event()
	return p.plan
}

// invalid is the plan for a spec the planner cannot act on: hold
// everything where the input status has it.
func (p *planner) invalid(err error) Plan {
	p.next = *p.in.DeepCopy()
	p.next.Message = err.Error()
	p.reason = v1alpha1.ReasonInvalidSpec
	p.settled = false
	p.plan = Plan{Workload: WorkloadKeep}
	return p.result()
}

// fillObserved copies the observed counts into the status, and the traffic
// once the routers confirm it.
func (p *planner) fillObserved() {
	n := &p.next
	n.Replicas = p.obs.Replicas
	st := p.obs.Pods[n.StableRevision]
	n.StableReplicas, n.StableReadyReplicas = st.Total, st.Ready
	n.CanaryReplicas, n.CanaryReadyReplicas = 0, 0
	if inRelease(n) {
		c := p.obs.Pods[n.CanaryRevision]
		n.CanaryReplicas, n.CanaryReadyReplicas = c.Total, c.Ready
	}
	if p.trafficDone() {
		t := DesiredTraffic(p.spec, n)
		n.CanaryWeight, n.Traffic = t.weight(), t.String()
	}
}

// conditions maps the outcome to condition intents.
func (p *planner) conditions() Conditions {
	msg, r := p.next.Message, p.reason
	phase := p.next.Phase
	switch {
	case r == v1alpha1.ReasonInvalidSpec:
		return stalled(r, msg, false)
	case r == v1alpha1.ReasonDependencyNotFound:
		// Waiting for objects the GitOps tool may still be applying:
		// in progress for kstatus readers, not failed.
		return Conditions{
			Ready:            cond(metav1.ConditionFalse, r, msg),
			Reconciling:      cond(metav1.ConditionTrue, r, msg),
			Stalled:          cond(metav1.ConditionFalse, r, msg),
			Progressing:      cond(metav1.ConditionFalse, r, msg),
			AwaitingApproval: cond(metav1.ConditionFalse, r, msg),
		}
	case phase == v1alpha1.PhaseFailed:
		return stalled(r, msg, !p.settled)
	case phase == v1alpha1.PhaseHealthy, p.settled && (phase == v1alpha1.PhaseDisabled || phase == v1alpha1.PhasePaused):
		return Conditions{
			Ready:            cond(metav1.ConditionTrue, r, msg),
			Reconciling:      cond(metav1.ConditionFalse, r, msg),
			Stalled:          cond(metav1.ConditionFalse, r, msg),
			Progressing:      cond(metav1.ConditionFalse, r, msg),
			AwaitingApproval: cond(metav1.ConditionFalse, r, msg),
		}
	}
	c := Conditions{
		Ready:            cond(metav1.ConditionFalse, r, msg),
		Reconciling:      cond(metav1.ConditionTrue, r, msg),
		Stalled:          cond(metav1.ConditionFalse, r, msg),
		Progressing:      cond(metav1.ConditionFalse, r, msg),
		AwaitingApproval: cond(metav1.ConditionFalse, r, msg),
	}
	if underWay(phase) && r != v1alpha1.ReasonRollingBack {
		// The applier's work is done: rollgate holds the new revision and
		// carries the release out step by step. kstatus readers (Flux's
		// helm-controller and kustomize-controller waits, health checks)
		// read Current, so an apply never times out, nor is remediated,
		// in the middle of a release. Ready stays away until the release
		// is over, so `kubectl wait --for=condition=Ready` and Argo CD
		// still wait for all of it; Progressing and AwaitingApproval say
		// where it is.
		c.Ready.Status = ""
		c.Reconciling.Status = metav1.ConditionFalse
	}
	if p.next.AwaitingApproval != nil {
		c.AwaitingApproval.Status = metav1.ConditionTrue
	}
	if phase == v1alpha1.PhaseProgressing && p.next.AwaitingApproval == nil {
		c.Progressing.Status = metav1.ConditionTrue
	}
	return c
}

// underWay reports whether phase is a release under way as planned: its
// steps, timed pauses and gates, or held by spec.strategy.paused.
func underWay(phase v1alpha1.RolloutPhase) bool {
	return phase == v1alpha1.PhaseProgressing || phase == v1alpha1.PhasePaused
}

// stalled is the conditions of an invalid spec or a failed release;
// working says a rollback is still under way.
func stalled(r, msg string, working bool) Conditions {
	c := Conditions{
		Ready:            cond(metav1.ConditionFalse, r, msg),
		Reconciling:      cond(metav1.ConditionFalse, r, msg),
		Stalled:          cond(metav1.ConditionTrue, r, msg),
		Progressing:      cond(metav1.ConditionFalse, r, msg),
		AwaitingApproval: cond(metav1.ConditionFalse, r, msg),
	}
	if working {
		c.Reconciling = cond(metav1.ConditionTrue, v1alpha1.ReasonRollingBack, msg)
	}
	return c
}

func cond(s metav1.ConditionStatus, reason, msg string) Condition {
	return Condition{Status: s, Reason: reason, Message: msg}
}

// isWarning reports whether events with this reason are warnings.
func isWarning(reason string) bool {
	switch reason {
	case v1alpha1.ReasonInvalidSpec, v1alpha1.ReasonAborted, v1alpha1.ReasonAnalysisFailed,
		v1alpha1.ReasonProgressDeadlineExceeded, v1alpha1.ReasonRollingBack, v1alpha1.ReasonRolledBack, v1alpha1.ReasonGroupFailed:
		return true
	}
	return false
}

// event describes the transition from the input status to the next, if any.
func (p *planner) event() Event {
	a, b := p.in, &p.next
	same := a.Phase == b.Phase && a.CanaryRevision == b.CanaryRevision &&
		a.StableRevision == b.StableRevision && a.Attempt == b.Attempt &&
		a.CurrentStepIndex == b.CurrentStepIndex && a.CurrentStepState == b.CurrentStepState &&
		(a.AwaitingApproval == nil) == (b.AwaitingApproval == nil)
	if p.reason == v1alpha1.ReasonInvalidSpec {
		same = a.Message == b.Message
	}
	if same || p.reason == "" {
		return Event{}
	}
	typ := EventNormal
	if isWarning(p.reason) {
		typ = EventWarning
	}
	return Event{Type: typ, Reason: p.reason, Message: b.Message}
}
