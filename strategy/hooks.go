package strategy

import (
	"fmt"
	"time"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// hookPoll is how soon to plan again while a hook has not answered yes:
// the reconciler calls it no more often than its interval.
const hookPoll = time.Second

// HookCall asks the reconciler to call the hooks of one point of the
// release: those not answered yes yet, in order (all at once for
// onRollback), recording their answers in status.hooks.
type HookCall struct {
	Point v1alpha1.HookPoint
	// Step whose hooks they are; 0 for onRollback.
	Step int32
	// Revision and Attempt of the release.
	Revision string
	Attempt  int32
}

// Hooks returns the hooks declared at point of step (onRollback for
// HookRollback).
func Hooks(spec *v1alpha1.RolloutSpec, point v1alpha1.HookPoint, step int32) []v1alpha1.Hook {
	if point == v1alpha1.HookRollback {
		return spec.Strategy.OnRollback
	}
	steps := spec.Strategy.Steps()
	if step < 1 || int(step) > len(steps) || steps[step-1].Hooks == nil {
		return nil
	}
	if point == v1alpha1.HookBefore {
		return steps[step-1].Hooks.Before
	}
	return steps[step-1].Hooks.After
}

// FindHookStatus returns the answers recorded for hook name of call, or
// nil.
func FindHookStatus(hooks []v1alpha1.HookStatus, call HookCall, name string) *v1alpha1.HookStatus {
	for i := range hooks {
		h := &hooks[i]
		if h.Name == name && h.Point == call.Point && h.Step == call.Step && h.Revision == call.Revision && h.Attempt == call.Attempt {
			return h
		}
	}
	return nil
}

// hooksHold reports whether the hooks of point of the current step keep
// the release where it is: one has not answered yes yet (why says which,
// and the plan asks the reconciler to call it), or one answered no for the
// last time (failed).
func (p *planner) hooksHold(point v1alpha1.HookPoint) (why string, failed, held bool) {
	step := p.next.CurrentStepIndex
	hooks := Hooks(p.spec, point, step)
	if len(hooks) == 0 {
		return "", false, false
	}
	call := HookCall{Point: point, Step: step, Revision: p.canary, Attempt: p.next.Attempt}
	for _, h := range hooks {
		st := FindHookStatus(p.in.Hooks, call, h.Name)
		if st != nil && st.LastCall != nil && st.LastCall.After(p.hooksAnsweredAt) {
			p.hooksAnsweredAt = st.LastCall.Time
		}
		where := fmt.Sprintf("step %d/%d: hook %q (%s the step)", step, len(p.steps), h.Name, map[v1alpha1.HookPoint]string{v1alpha1.HookBefore: "before", v1alpha1.HookAfter: "after"}[point])
		switch {
		case st == nil:
			p.plan.Hooks = &call
			return where + " is being called", false, true
		case st.Phase == hookFailed:
			return fmt.Sprintf("%s answered no after %d calls: %s", where, st.Calls, st.Message), true, true
		case st.Phase != hookSuccessful:
			p.plan.Hooks = &call
			what := "waits for yes"
			if h.Confirm {
				what = "waits for confirmation"
			}
			return fmt.Sprintf("%s %s (%d calls; last: %s)", where, what, st.Calls, st.Message), false, true
		}
	}
	return "", false, false
}

// holdForHooks holds the current step for its hooks at point, or fails the
// release when one answered no for good; it reports whether the step may
// go on.
func (p *planner) holdForHooks(point v1alpha1.HookPoint) bool {
	why, failed, held := p.hooksHold(point)
	switch {
	case !held:
		return true
	case failed:
		p.fail(v1alpha1.ReasonHookFailed, why)
	default:
		p.reason = v1alpha1.ReasonWaitingForHook
		p.next.Message = why
		p.requeue(hookPoll)
	}
	return false
}

// rollbackHooks asks for the onRollback hooks of a failed release until
// each answered (yes, or no for the last time).
func (p *planner) rollbackHooks() {
	hooks := p.spec.Strategy.OnRollback
	call := HookCall{Point: v1alpha1.HookRollback, Revision: p.canary, Attempt: p.next.Attempt}
	for _, h := range hooks {
		if st := FindHookStatus(p.in.Hooks, call, h.Name); st == nil || (st.Phase != hookSuccessful && st.Phase != hookFailed) {
			p.plan.Hooks = &call
			p.requeue(hookPoll)
			return
		}
	}
}

// Phases of a HookStatus.
const (
	hookRunning    = "Running"
	hookSuccessful = "Successful"
	hookFailed     = "Failed"
)

// HookPhases are the values of HookStatus.Phase.
var HookPhases = struct{ Running, Successful, Failed string }{hookRunning, hookSuccessful, hookFailed}
