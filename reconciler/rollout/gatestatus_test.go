package rollout

import (
	"strings"
	"testing"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// TestNextGateStatus: the pull request of a gate shows pending while the
// gate waits, success once its step went on or the release completed,
// failure when the release failed (also after success) or was superseded;
// a new gate first settles the previous one; nothing is reported twice.
func TestNextGateStatus(t *testing.T) {
	gate := func(branch, rev string, step int32, state string) *v1alpha1.GateStatus {
		return &v1alpha1.GateStatus{Branch: branch, Revision: rev, Step: step, State: state}
	}
	awaiting := func(branch, rev string, step int32) *v1alpha1.ApprovalRequest {
		return &v1alpha1.ApprovalRequest{Branch: branch, Revision: rev, Step: step, PullRequestURL: "https://forge.example/pr/1"}
	}
	for _, tc := range []struct {
		name   string
		status v1alpha1.RolloutStatus
		want   *v1alpha1.GateStatus // nil: nothing to report
		desc   string
	}{
		{"no gate yet", v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseProgressing, CanaryRevision: "b", CurrentStepIndex: 1}, nil, ""},
		{"a gate without its pull request", v1alpha1.RolloutStatus{AwaitingApproval: &v1alpha1.ApprovalRequest{Branch: "g1", Revision: "b", Step: 1}}, nil, ""},
		{"the gate's pull request opened", v1alpha1.RolloutStatus{StepCount: 3, CanaryRevision: "b", AwaitingApproval: awaiting("g1", "b", 1)},
			gate("g1", "b", 1, "pending"), "Step 1 of 3 of b waits for this pull request to be merged"},
		{"pending already reported", v1alpha1.RolloutStatus{CanaryRevision: "b", AwaitingApproval: awaiting("g1", "b", 1),
			Git: &v1alpha1.GitStatus{GateStatus: gate("g1", "b", 1, "pending")}}, nil, ""},
		{"approved: the next step runs", v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseProgressing, CanaryRevision: "b", CurrentStepIndex: 2,
			Git: &v1alpha1.GitStatus{GateStatus: gate("g1", "b", 1, "pending")}}, gate("g1", "b", 1, "success"), "Step 1 of b approved and rolled out"},
		{"approved at the last step: released", v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseHealthy, StableRevision: "b", CanaryRevision: "b",
			Git: &v1alpha1.GitStatus{GateStatus: gate("g3", "b", 3, "pending")}}, gate("g3", "b", 3, "success"), "approved and rolled out"},
		{"still at the gate's step", v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseProgressing, CanaryRevision: "b", CurrentStepIndex: 1,
			Git: &v1alpha1.GitStatus{GateStatus: gate("g1", "b", 1, "pending")}}, nil, ""},
		{"success reported, release goes on", v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseProgressing, CanaryRevision: "b", CurrentStepIndex: 3,
			Git: &v1alpha1.GitStatus{GateStatus: gate("g1", "b", 1, "success")}}, nil, ""},
		{"the release failed after the gate", v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseFailed, CanaryRevision: "b", Message: "analysis failed",
			Git: &v1alpha1.GitStatus{GateStatus: gate("g1", "b", 1, "success")}}, gate("g1", "b", 1, "failure"), "The release of b failed and is rolled back: analysis failed"},
		{"the release failed at the gate", v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseFailed, CanaryRevision: "b", Message: "aborted",
			Git: &v1alpha1.GitStatus{GateStatus: gate("g1", "b", 1, "pending")}}, gate("g1", "b", 1, "failure"), "failed and is rolled back: aborted"},
		{"failure already reported", v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseFailed, CanaryRevision: "b",
			Git: &v1alpha1.GitStatus{GateStatus: gate("g1", "b", 1, "failure")}}, nil, ""},
		{"superseded by another revision", v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseProgressing, CanaryRevision: "c", CurrentStepIndex: 1,
			Git: &v1alpha1.GitStatus{GateStatus: gate("g1", "b", 1, "pending")}}, gate("g1", "b", 1, "failure"), "Superseded: the release of b ended before step 1 (now c"},
		{"the next gate settles the previous one first", v1alpha1.RolloutStatus{Phase: v1alpha1.PhasePaused, CanaryRevision: "b", CurrentStepIndex: 2,
			AwaitingApproval: awaiting("g2", "b", 2), Git: &v1alpha1.GitStatus{GateStatus: gate("g1", "b", 1, "pending")}},
			gate("g1", "b", 1, "success"), "Step 1 of b approved"},
		{"then the next gate is pending", v1alpha1.RolloutStatus{Phase: v1alpha1.PhasePaused, StepCount: 3, CanaryRevision: "b", CurrentStepIndex: 2,
			AwaitingApproval: awaiting("g2", "b", 2), Git: &v1alpha1.GitStatus{GateStatus: gate("g1", "b", 1, "success")}},
			gate("g2", "b", 2, "pending"), "Step 2 of 3 of b waits"},
		{"a retry's gate supersedes the failed attempt's", v1alpha1.RolloutStatus{Phase: v1alpha1.PhasePaused, CanaryRevision: "b", CurrentStepIndex: 1,
			AwaitingApproval: awaiting("g1-attempt-2", "b", 1), Git: &v1alpha1.GitStatus{GateStatus: gate("g1", "b", 1, "pending")}},
			gate("g1", "b", 1, "failure"), "Superseded by the gate of branch g1-attempt-2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next, desc, ok := nextGateStatus(&tc.status)
			switch {
			case tc.want == nil && ok:
				t.Fatalf("reports %+v %q, want nothing", next, desc)
			case tc.want != nil && (!ok || next != *tc.want || !strings.Contains(desc, tc.desc)):
				t.Fatalf("= %+v %q (report %v), want %+v with %q", next, desc, ok, *tc.want, tc.desc)
			}
		})
	}
}
