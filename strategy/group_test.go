package strategy

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// groupSpec has three steps with a gate at step 2.
func groupSpec() *v1alpha1.RolloutSpec {
	return routedSpec(
		step("20%", pct("20%"), nil),
		step("50%", pct("50%"), gatePause()),
		step("100%", pct("100%"), nil),
	)
}

// member is another member of group "shop" with groupSpec at st.
func member(name string, st *v1alpha1.RolloutStatus) GroupMember {
	return GroupMember{Name: name, Spec: groupSpec(), Status: st}
}

// grouped is obs with self in group "shop" beside members.
func grouped(obs Observed, self string, members ...GroupMember) Observed {
	obs.Group = &Group{Name: "shop", Self: self, Members: members}
	return obs
}

// A member done with a step waits for every member in release to be done
// with it too, saying which; once they are, it takes the next step.
func TestGroupMemberWaitsForTheOthersBeforeItsNextStep(t *testing.T) {
	spec := groupSpec()
	obs := grouped(observed(10, 2), "web", member("api", releasing(1, v1alpha1.StepUpgrade, 0)),
		member("worker", releasing(1, v1alpha1.StepReady, 0)))

	p := decide(t, spec, releasing(1, v1alpha1.StepPaused, -time.Minute), obs, t0)
	if w := whereOf(&p.Status); w.Index != 1 || w.State != v1alpha1.StepReady {
		t.Fatalf("at %+v, want step 1 Ready, held for the group", w)
	}
	if p.Conditions.Progressing.Reason != v1alpha1.ReasonWaitingForGroup ||
		!strings.Contains(p.Status.Message, "group shop waits for api (step 1/3, StepUpgrade) to finish step 1") ||
		strings.Contains(p.Status.Message, "worker") {
		t.Fatalf("reason %q message %q, want WaitingForGroup naming api only", p.Conditions.Progressing.Reason, p.Status.Message)
	}
	if p.RequeueAfter == 0 || p.RequeueAfter > groupPoll {
		t.Fatalf("requeue after %s, want within %s", p.RequeueAfter, groupPoll)
	}
	if p.CanaryReplicas != 2 || p.Traffic.Weight != 20 {
		t.Fatalf("canary %d traffic %+v, want step 1's pods and traffic kept", p.CanaryReplicas, p.Traffic)
	}

	obs.Group.Members[0].Status = releasing(1, v1alpha1.StepReady, 0)
	p = decide(t, spec, persist(p), obs, at(time.Second))
	if w := whereOf(&p.Status); w.Index != 2 {
		t.Fatalf("at %+v, want step 2 once every member finished step 1", w)
	}
}

// Members not in release do not hold the group; a member whose new
// revision waits to start does; one waiting in a budget's queue does not
// (it may wait for the place this release holds).
func TestGroupHoldsForMembersWaitingToStart(t *testing.T) {
	spec := groupSpec()
	idle := &v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseHealthy, StableRevision: "v1", CanaryRevision: "v1"}
	waiting := &v1alpha1.RolloutStatus{Phase: v1alpha1.PhasePaused, StableRevision: "v1", CanaryRevision: "v1",
		Message: "revision v2 waits to be released: freeze incident"}
	queued := waiting.DeepCopy()
	queued.Queue = &v1alpha1.QueueStatus{Budget: "one", Position: 1}

	for _, tc := range []struct {
		name string
		st   *v1alpha1.RolloutStatus
		held bool
	}{{"idle", idle, false}, {"waiting", waiting, true}, {"queued", queued, false}} {
		obs := grouped(observed(10, 2), "web", member("api", tc.st))
		p := decide(t, spec, releasing(1, v1alpha1.StepReady, 0), obs, t0)
		if held := p.Status.CurrentStepIndex == 1; held != tc.held {
			t.Errorf("%s member: at %+v (%s), want held %v", tc.name, whereOf(&p.Status), p.Status.Message, tc.held)
		}
		if tc.held && !strings.Contains(p.Status.Message, "group shop waits for api to start") {
			t.Errorf("%s member: message %q, want it to name api", tc.name, p.Status.Message)
		}
	}
}

// The group's gates are its coordinator's (the first member in release by
// name): another member waits at the gate without an approval request of
// its own, its own approval does not open it, and it passes once the
// coordinator did.
func TestGroupGateIsTheCoordinators(t *testing.T) {
	spec := groupSpec()
	obs := grouped(observed(10, 5), "web", member("api", releasing(2, v1alpha1.StepPaused, 0)))
	obs.Approvals = []v1alpha1.Approval{approval("v2", 2)} // web's own: does not count

	p := decide(t, spec, releasing(2, v1alpha1.StepPaused, 0), obs, t0)
	if w := whereOf(&p.Status); w.Index != 2 || w.State != v1alpha1.StepPaused {
		t.Fatalf("at %+v, want the gate of step 2 held", w)
	}
	if p.Status.AwaitingApproval != nil {
		t.Fatalf("awaiting approval %+v: a member other than the coordinator must not ask for one", p.Status.AwaitingApproval)
	}
	if p.Conditions.Progressing.Reason != v1alpha1.ReasonWaitingForGroup || !strings.Contains(p.Status.Message, "approve step 2 of Rollout api") {
		t.Fatalf("reason %q message %q, want WaitingForGroup naming the coordinator", p.Conditions.Progressing.Reason, p.Status.Message)
	}

	// The coordinator waits for its own approval, and says the gate is the group's.
	coord := grouped(observed(10, 5), "api", member("web", releasing(2, v1alpha1.StepPaused, 0)))
	c := decide(t, spec, releasing(2, v1alpha1.StepPaused, 0), coord, t0)
	if a := c.Status.AwaitingApproval; a == nil || a.Step != 2 || !strings.Contains(c.Status.Message, "the gate of group shop") {
		t.Fatalf("coordinator: awaiting %+v message %q, want its own approval request for the group's gate", a, c.Status.Message)
	}
	coord.Approvals = []v1alpha1.Approval{approval("v2", 2)}
	c = decide(t, spec, persist(c), coord, at(time.Second))
	if w := whereOf(&c.Status); w.Index != 2 || w.State != v1alpha1.StepReady {
		t.Fatalf("coordinator approved: at %+v, want Ready at step 2 waiting for web", w)
	}

	// With the coordinator past its gate, the member passes its own, and
	// (the coordinator being done with step 2) takes step 3.
	obs.Group.Members[0].Status = &c.Status
	p = decide(t, spec, persist(p), obs, at(2*time.Second))
	if w := whereOf(&p.Status); w.Index != 3 {
		t.Fatalf("at %+v, want step 3 once the coordinator passed the gate", w)
	}

	// A member that joined late (the coordinator already past this gate)
	// needs its own approval: no approval of the group covered it.
	obs.Group.Members[0].Status = releasing(3, v1alpha1.StepUpgrade, 0)
	obs.Approvals = nil
	late := decide(t, spec, releasing(2, v1alpha1.StepPaused, 0), obs, t0)
	if a := late.Status.AwaitingApproval; a == nil || a.Step != 2 || late.Status.CurrentStepState != v1alpha1.StepPaused {
		t.Fatalf("late member: at %+v awaiting %+v, want its own gate", whereOf(&late.Status), a)
	}
}

// A member failing (or aborted) during this release rolls every member
// back; one that failed before this release started holds it instead.
func TestGroupMemberFailureRollsBackEveryMember(t *testing.T) {
	spec := groupSpec()
	failed := failedStatus(v1alpha1.ReasonAnalysisFailed)
	failed.StepStartedAt = mtime(30 * time.Second) // after releasing()'s start at t0
	obs := grouped(observed(10, 5), "web", member("api", failed))

	p := decide(t, spec, releasing(2, v1alpha1.StepTrafficRouting, 0), obs, at(time.Minute))
	if p.Status.Phase != v1alpha1.PhaseFailed || p.Conditions.Stalled.Reason != v1alpha1.ReasonGroupFailed {
		t.Fatalf("phase %s stalled %q, want Failed with GroupFailed", p.Status.Phase, p.Conditions.Stalled.Reason)
	}
	if !strings.Contains(p.Status.Message, "member api of group shop failed (AnalysisFailed)") || p.CanaryReplicas != 0 {
		t.Fatalf("message %q canary %d, want a rollback naming api", p.Status.Message, p.CanaryReplicas)
	}

	// Failed before this release started: a hold, not a rollback.
	failed.StepStartedAt = mtime(-time.Hour)
	p = decide(t, spec, releasing(1, v1alpha1.StepReady, 0), obs, at(time.Minute))
	if p.Status.Phase == v1alpha1.PhaseFailed || p.Status.CurrentStepIndex != 1 ||
		!strings.Contains(p.Status.Message, "member api of group shop failed before this release started") {
		t.Fatalf("at %+v message %q, want step 1 held naming api", whereOf(&p.Status), p.Status.Message)
	}
}

// Members need the same number of steps with gates at the same steps;
// otherwise nothing starts, and the error names the member and the fix.
func TestGroupMembersNeedTheSameSteps(t *testing.T) {
	spec := groupSpec()
	short := member("api", releasing(1, v1alpha1.StepUpgrade, 0))
	short.Spec = routedSpec(step("50%", pct("50%"), gatePause()), step("100%", pct("100%"), nil))
	moved := member("api", releasing(1, v1alpha1.StepUpgrade, 0))
	moved.Spec = routedSpec(step("20%", pct("20%"), gatePause()), step("50%", pct("50%"), nil), step("100%", pct("100%"), nil))

	for _, tc := range []struct {
		m    GroupMember
		want string
	}{
		{short, "member api of group shop has 2 steps and this Rollout 3"},
		{moved, "member api of group shop has gates (pause without duration) at steps 1 and this Rollout at 2"},
	} {
		healthy := &v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseHealthy, StableRevision: "v1", CanaryRevision: "v1"}
		p, err := Decide(spec, healthy, grouped(observed(10, 0), "web", tc.m), t0)
		var se *SpecError
		if !errors.As(err, &se) || se.Field != "spec.group.name" || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("error %v, want a spec error on spec.group.name saying %q", err, tc.want)
		}
		if p.Status.CanaryRevision != "v1" || p.Workload != WorkloadKeep {
			t.Fatalf("canary %s workload %s: a release started on a mismatched group", p.Status.CanaryRevision, p.Workload)
		}
	}
}

// spec.promote does not take one member ahead of its group.
func TestGroupMemberIgnoresPromote(t *testing.T) {
	spec := groupSpec()
	spec.Promote = &v1alpha1.RevisionRequest{Revision: "v2"}
	obs := grouped(observed(10, 2), "web", member("api", releasing(1, v1alpha1.StepUpgrade, 0)))
	p := decide(t, spec, releasing(1, v1alpha1.StepPaused, 0), obs, t0)
	if p.Released || p.Status.CurrentStepIndex != 1 || !strings.Contains(p.Status.Message, "spec.promote is not followed by a member of group shop") {
		t.Fatalf("released %v at %+v message %q, want step 1 held with spec.promote refused", p.Released, whereOf(&p.Status), p.Status.Message)
	}
}
