package strategy

import (
	"strings"
	"testing"
	"time"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

const upstreamBusy = "cluster staging: demo/echoserver is at step 1/3 of echoserver=echo:2.0"

// A closed fleet gate guarding step 1 keeps a new revision from being
// released (no pod, no traffic moves) and says which cluster it waits
// for; once it opens the release starts at step 1.
func TestFleetGateHoldsTheReleaseUntilUpstreamIsDone(t *testing.T) {
	spec := echoSpec()
	healthy := &v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseHealthy, StableRevision: "v1", CanaryRevision: "v1"}
	obs := observed(10, 0)
	obs.Fleet = []FleetGate{{BeforeStep: 1, Why: upstreamBusy}}

	p := decide(t, spec, healthy, obs, t0)
	if p.Workload != WorkloadKeep || p.Traffic.Mode != TrafficOriginal || p.Status.CanaryRevision != "v1" {
		t.Fatalf("workload %s traffic %+v canary %s: the release started with the fleet gate closed", p.Workload, p.Traffic, p.Status.CanaryRevision)
	}
	if p.Conditions.Progressing.Reason != v1alpha1.ReasonWaitingForFleet || !strings.Contains(p.Status.Message, upstreamBusy) {
		t.Fatalf("reason %q message %q, want WaitingForFleet naming the cluster", p.Conditions.Progressing.Reason, p.Status.Message)
	}
	if p.RequeueAfter == 0 || p.RequeueAfter > fleetPoll {
		t.Fatalf("requeue after %s, want a poll of Git within %s", p.RequeueAfter, fleetPoll)
	}
	if p.Event.Reason != v1alpha1.ReasonWaitingForFleet {
		t.Fatalf("event %+v, want one saying the release waits for the fleet", p.Event)
	}

	// A gate guarding a later step does not hold the start.
	obs.Fleet = []FleetGate{{BeforeStep: 2, Why: upstreamBusy}}
	if p := decide(t, spec, persist(p), obs, at(time.Second)); p.Status.CanaryRevision != "v2" || p.Status.CurrentStepIndex != 1 {
		t.Fatalf("at %+v canary %s, want step 1 of v2 under a gate guarding step 2", whereOf(&p.Status), p.Status.CanaryRevision)
	}

	obs.Fleet = []FleetGate{{BeforeStep: 1, Open: true}}
	p = decide(t, spec, persist(p), obs, at(2*time.Second))
	if w := whereOf(&p.Status); w.Phase != v1alpha1.PhaseProgressing || w.Index != 1 || p.Status.CanaryRevision != "v2" {
		t.Fatalf("at %+v canary %s, want the release of v2 at step 1 once the gate opened", w, p.Status.CanaryRevision)
	}
}

// A closed gate guarding step 2 lets step 1 run to its end, approval
// included, then holds in Ready with step 1's pods and traffic; opened, the
// release goes on to step 2. A gate past the last step holds completion.
func TestFleetGateHoldsALaterStep(t *testing.T) {
	spec := echoSpec()
	obs := observed(10, 1)
	obs.Approvals = []v1alpha1.Approval{approval("v2", 1)}
	obs.Fleet = []FleetGate{{BeforeStep: 2, Why: upstreamBusy}}

	p := decide(t, spec, releasing(1, v1alpha1.StepPaused, -time.Minute), obs, t0)
	if w := whereOf(&p.Status); w.Index != 1 || w.State != v1alpha1.StepReady {
		t.Fatalf("at %+v, want step 1 Ready waiting for the fleet", w)
	}
	if p.CanaryReplicas != 1 || p.Traffic.Weight != 5 {
		t.Fatalf("canary replicas %d traffic %+v, want step 1's 1 pod and 5%%", p.CanaryReplicas, p.Traffic)
	}
	if p.Conditions.Progressing.Reason != v1alpha1.ReasonWaitingForFleet || !strings.Contains(p.Status.Message, "waits before step 2: "+upstreamBusy) {
		t.Fatalf("reason %q message %q", p.Conditions.Progressing.Reason, p.Status.Message)
	}
	// Held again and again: nothing advances.
	again := decide(t, spec, persist(p), obs, at(time.Minute))
	if w := whereOf(&again.Status); w.Index != 1 || w.State != v1alpha1.StepReady {
		t.Fatalf("at %+v after a minute, want still step 1", w)
	}

	obs.Fleet[0].Open = true
	p = decide(t, spec, persist(again), obs, at(2*time.Minute))
	if w := whereOf(&p.Status); w.Index != 2 {
		t.Fatalf("at %+v, want step 2 once the gate opened", w)
	}

	// Past the last step: the release holds its last step, not completed.
	obs = observed(10, 10)
	obs.Fleet = []FleetGate{{BeforeStep: 4, Why: upstreamBusy}}
	p = decide(t, spec, releasing(3, v1alpha1.StepReady, -time.Minute), obs, t0)
	if w := whereOf(&p.Status); w.Index != 3 || w.State != v1alpha1.StepReady || p.Released || !strings.Contains(p.Status.Message, "before completion") {
		t.Fatalf("at %+v (%q), want the last step held before completion", w, p.Status.Message)
	}
}

// A gate closed for a bake time is looked at again when the bake ends,
// not every fleetPoll.
func TestFleetGateBakingIsLookedAtWhenItEnds(t *testing.T) {
	healthy := &v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseHealthy, StableRevision: "v1", CanaryRevision: "v1"}
	obs := observed(10, 0)
	obs.Fleet = []FleetGate{{BeforeStep: 1, Why: "cluster staging: demo/web released web=web:2; baking", Until: at(time.Hour)}}
	p := decide(t, echoSpec(), healthy, obs, t0)
	if p.Status.CanaryRevision != "v1" || p.RequeueAfter != time.Hour {
		t.Fatalf("canary %s requeue after %s, want held and looked at again in 1h", p.Status.CanaryRevision, p.RequeueAfter)
	}
}
