package strategy

import (
	"strings"
	"testing"
	"time"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// hookedSpec is echoSpec with a before hook on step 1, an after hook on
// step 1 and an onRollback hook.
func hookedSpec() *v1alpha1.RolloutSpec {
	spec := echoSpec()
	spec.Strategy.Canary.Steps[0].Hooks = &v1alpha1.StepHooks{
		Before: []v1alpha1.Hook{{Name: "load-test", URL: "http://hooks/before"}},
		After:  []v1alpha1.Hook{{Name: "sign-off", URL: "http://hooks/after", Confirm: true}},
	}
	spec.Strategy.OnRollback = []v1alpha1.Hook{{Name: "page", URL: "http://hooks/rollback"}}
	return spec
}

// answered is st with hook name of call in phase.
func answered(st *v1alpha1.RolloutStatus, call HookCall, name, phase string) *v1alpha1.RolloutStatus {
	st = st.DeepCopy()
	st.Hooks = append(st.Hooks, v1alpha1.HookStatus{Name: name, Point: call.Point, Step: call.Step, Revision: call.Revision,
		Attempt: call.Attempt, Phase: phase, Calls: 1, Message: "HTTP 503"})
	return st
}

// A step's before hooks hold it before any of its pods or traffic move:
// the plan asks for the call, and the step starts once every hook
// answered yes; a no for good fails the release, and the plan then asks
// for the onRollback hooks until each answered.
func TestBeforeHooksHoldTheStep(t *testing.T) {
	spec := hookedSpec()
	healthy := &v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseHealthy, StableRevision: "v1", CanaryRevision: "v1"}
	obs := observed(10, 0)

	p := decide(t, spec, healthy, obs, t0)
	call := HookCall{Point: v1alpha1.HookBefore, Step: 1, Revision: "v2", Attempt: 1}
	switch {
	case p.Hooks == nil || *p.Hooks != call:
		t.Fatalf("hooks asked %+v, want %+v", p.Hooks, call)
	case p.CanaryReplicas != 0 || p.Traffic.Weight != 0:
		t.Fatalf("canary replicas %d traffic %+v while the before hook has not answered", p.CanaryReplicas, p.Traffic)
	case p.Conditions.Progressing.Reason != v1alpha1.ReasonWaitingForHook || !strings.Contains(p.Status.Message, `hook "load-test" (before the step) is being called`):
		t.Fatalf("reason %q message %q", p.Conditions.Progressing.Reason, p.Status.Message)
	case p.RequeueAfter == 0 || p.RequeueAfter > hookPoll:
		t.Fatalf("requeue %s", p.RequeueAfter)
	}

	running := answered(persist(p), call, "load-test", HookPhases.Running)
	p = decide(t, spec, running, obs, at(time.Second))
	if p.CanaryReplicas != 0 || !strings.Contains(p.Status.Message, "waits for yes (1 calls; last: HTTP 503)") || p.Hooks == nil {
		t.Fatalf("hook running: replicas %d message %q hooks %+v", p.CanaryReplicas, p.Status.Message, p.Hooks)
	}

	yes := answered(persist(p), call, "load-test", HookPhases.Successful)
	yes.Hooks = yes.Hooks[1:]
	p = decide(t, spec, yes, obs, at(2*time.Second))
	if p.CanaryReplicas != 1 || p.Hooks != nil {
		t.Fatalf("after yes: replicas %d hooks %+v, want step 1's pod and no call", p.CanaryReplicas, p.Hooks)
	}

	// A hook that took longer than the progress deadline to say yes: the
	// step's deadline counts from the yes, not from the step's start.
	late := yes.DeepCopy()
	late.Hooks[0].LastCall = mtime(30 * time.Minute)
	if p = decide(t, spec, late, observed(10, 0), at(30*time.Minute+time.Second)); p.Status.Phase == v1alpha1.PhaseFailed {
		t.Fatalf("failed after a late yes: %q", p.Status.Message)
	}

	no := answered(running, call, "load-test", HookPhases.Failed)
	no.Hooks = no.Hooks[1:]
	p = decide(t, spec, no, obs, at(3*time.Second))
	rollback := HookCall{Point: v1alpha1.HookRollback, Revision: "v2", Attempt: 1}
	if p.Status.Phase != v1alpha1.PhaseFailed || p.Conditions.Progressing.Reason != v1alpha1.ReasonHookFailed && p.Conditions.Stalled.Reason != v1alpha1.ReasonHookFailed ||
		!strings.Contains(p.Status.Message, `hook "load-test" (before the step) answered no after 1 calls: HTTP 503`) {
		t.Fatalf("after no: %s %+v %q", p.Status.Phase, p.Conditions, p.Status.Message)
	}
	if p.Hooks == nil || *p.Hooks != rollback {
		t.Fatalf("hooks asked after the failure: %+v, want %+v", p.Hooks, rollback)
	}
	// The rollback goes on, asking for the onRollback hooks until they answered.
	failed := persist(p)
	if p = decide(t, spec, failed, observed(10, 0), at(4*time.Second)); p.Hooks == nil || *p.Hooks != rollback {
		t.Fatalf("rolling back: hooks %+v", p.Hooks)
	}
	done := answered(failed, rollback, "page", HookPhases.Failed)
	if p = decide(t, spec, done, observed(10, 0), at(5*time.Second)); p.Hooks != nil {
		t.Fatalf("onRollback answered: hooks still asked %+v", p.Hooks)
	}
}

// A step's after hooks hold it at its end, with its pods and traffic, and
// a confirm hook waits for yes; answers of another attempt do not count.
func TestAfterHooksHoldTheNextStep(t *testing.T) {
	spec := hookedSpec()
	obs := observed(10, 1)
	obs.Approvals = []v1alpha1.Approval{approval("v2", 1)}
	st := releasing(1, v1alpha1.StepPaused, -time.Minute)
	before := HookCall{Point: v1alpha1.HookBefore, Step: 1, Revision: "v2", Attempt: 1}
	st = answered(st, before, "load-test", HookPhases.Successful)

	p := decide(t, spec, st, obs, t0)
	after := HookCall{Point: v1alpha1.HookAfter, Step: 1, Revision: "v2", Attempt: 1}
	if w := whereOf(&p.Status); w.Index != 1 || w.State != v1alpha1.StepReady || p.Hooks == nil || *p.Hooks != after {
		t.Fatalf("at %+v hooks %+v, want step 1 Ready asking for its after hooks", w, p.Hooks)
	}
	if p.CanaryReplicas != 1 || p.Traffic.Weight != 5 {
		t.Fatalf("replicas %d traffic %+v, want step 1's", p.CanaryReplicas, p.Traffic)
	}
	waiting := answered(persist(p), after, "sign-off", HookPhases.Running)
	if p = decide(t, spec, waiting, obs, at(time.Minute)); !strings.Contains(p.Status.Message, `hook "sign-off" (after the step) waits for confirmation`) {
		t.Fatalf("confirm hook: %q", p.Status.Message)
	}
	other := HookCall{Point: v1alpha1.HookAfter, Step: 1, Revision: "v2", Attempt: 2}
	otherAttempt := answered(waiting, other, "sign-off", HookPhases.Successful)
	if p = decide(t, spec, otherAttempt, obs, at(2*time.Minute)); whereOf(&p.Status).Index != 1 {
		t.Fatalf("a yes of attempt 2 moved attempt 1 to %+v", whereOf(&p.Status))
	}
	yes := answered(persist(p), after, "sign-off", HookPhases.Successful)
	yes.Hooks = yes.Hooks[len(yes.Hooks)-1:]
	yes = answered(yes, before, "load-test", HookPhases.Successful)
	if p = decide(t, spec, yes, obs, at(3*time.Minute)); whereOf(&p.Status).Index != 2 {
		t.Fatalf("at %+v after the confirm hook said yes, want step 2", whereOf(&p.Status))
	}
}
