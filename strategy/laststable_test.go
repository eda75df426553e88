package strategy

import (
	"testing"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// TestLastStablePodStaysUntilTrafficLeavesIt: a step replacing every pod
// keeps one stable pod while the stable Service still gets requests, and
// lets it go once the routers carry the step's 100%.
func TestLastStablePodStaysUntilTrafficLeavesIt(t *testing.T) {
	spec := echoSpec() // step 3: 100% traffic, 100% replicas
	// Step 3 begins: step 2's 40% still sends 60% of requests to stable.
	p, err := Decide(spec, releasing(3, v1alpha1.StepUpgrade, 0), observed(10, 4), at(0))
	if err != nil {
		t.Fatal(err)
	}
	if p.Workload != WorkloadScale || p.CanaryReplicas != 9 {
		t.Fatalf("upgrade of a 100%% step: %s %d canary pods, want Scale 9 (one stable pod left)", p.Workload, p.CanaryReplicas)
	}
	// 9 canary pods ready: on to traffic; the routers have not confirmed 100% yet.
	obs := observed(10, 9)
	obs.TrafficDone = false
	p, err = Decide(spec, releasing(3, v1alpha1.StepTrafficRouting, 0), obs, at(0))
	if err != nil {
		t.Fatal(err)
	}
	if p.CanaryReplicas != 9 || p.Traffic.Weight != 100 {
		t.Fatalf("while 100%% traffic is not confirmed: %d canary pods, traffic %v; want 9 and 100%%", p.CanaryReplicas, p.Traffic)
	}
	// The routers carry 100%: the last stable pod may go.
	p, err = Decide(spec, releasing(3, v1alpha1.StepTrafficRouting, 0), observed(10, 9), at(0))
	if err != nil {
		t.Fatal(err)
	}
	// (The last step completes the release: declared routes come back,
	// then the workload's own controller replaces the last stable pod.)
	if p.Status.CurrentStepState != v1alpha1.StepCompleted && !(p.Workload == WorkloadScale && p.CanaryReplicas == 10) {
		t.Fatalf("after 100%% traffic is confirmed: %s, %s with %d canary pods; want all pods on the new revision or the release completing",
			p.Status.CurrentStepState, p.Workload, p.CanaryReplicas)
	}
}
