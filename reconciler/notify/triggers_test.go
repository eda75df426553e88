package notify

import (
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

func TestFired(t *testing.T) {
	idle := Snapshot{Phase: v1alpha1.PhaseHealthy, Canary: "a", Stable: "a"}
	step1 := Snapshot{Phase: v1alpha1.PhaseProgressing, Canary: "b", Stable: "a", Step: 1}
	gate1 := step1
	gate1.Gate = "b/0/1"
	step2 := step1
	step2.Step = 2
	failed := step2
	failed.Phase, failed.Failure = v1alpha1.PhaseFailed, v1alpha1.ReasonAnalysisFailed
	rolledBack := failed
	rolledBack.RolledBack = true
	reverted := rolledBack
	reverted.Revert = "rollgate/revert/b"
	released := Snapshot{Phase: v1alpha1.PhaseHealthy, Canary: "b", Stable: "b"}
	revertedByGit := Snapshot{Phase: v1alpha1.PhaseHealthy, Canary: "a", Stable: "a", RolledBack: true}
	retried := step1
	retried.Attempt = 1
	aborted := step2
	aborted.Phase, aborted.Failure, aborted.RolledBack = v1alpha1.PhaseFailed, v1alpha1.ReasonAborted, true

	for _, tc := range []struct {
		name          string
		before, after Snapshot
		want          []Trigger
	}{
		{"nothing changed", gate1, gate1, nil},
		{"a Rollout seen for the first time", Snapshot{}, idle, nil},
		{"a release starts", idle, step1, []Trigger{OnReleaseStarted}},
		{"a release starts and reaches its first gate at once", idle, gate1, []Trigger{OnReleaseStarted, OnGateWaiting}},
		{"the gate is announced", step1, gate1, []Trigger{OnGateWaiting}},
		{"the gate approved: step done", gate1, step2, []Trigger{OnStepDone}},
		{"a check fails the release", step2, failed, []Trigger{OnAnalysisFailed}},
		{"the rollback ends", failed, rolledBack, []Trigger{OnRolledBack}},
		{"the check fails and the rollback ends in one reconcile", step2, rolledBack, []Trigger{OnAnalysisFailed, OnRolledBack}},
		{"an abort is rolled back", step2, aborted, []Trigger{OnRolledBack}},
		{"the revert is written to Git", rolledBack, reverted, []Trigger{OnRevertedInGit}},
		{"the release completes", step2, released, []Trigger{OnReleased}},
		{"Git reverts the failed release: told once", reverted, revertedByGit, nil},
		{"Git reverts a release in progress", step2, revertedByGit, []Trigger{OnRolledBack}},
		{"a retry starts the release again", rolledBack, retried, []Trigger{OnReleaseStarted}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Fired(tc.before, tc.after); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Fired = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestSnapshotAnnouncesTheGate: with a forge, a gate is announced once its
// pull request is open (the notification links it); with Git only, once
// its approval branch exists; without Git, when reached.
func TestSnapshotAnnouncesTheGate(t *testing.T) {
	ro := &v1alpha1.Rollout{Spec: v1alpha1.RolloutSpec{Git: &v1alpha1.GitReference{Path: "apps/web.yaml"}}}
	ro.Status.AwaitingApproval = &v1alpha1.ApprovalRequest{Revision: "b", Step: 1, Since: metav1.Now()}
	if g := SnapshotOf(ro, false).Gate; g != "" {
		t.Errorf("gate announced before its branch exists: %q", g)
	}
	ro.Status.AwaitingApproval.Branch = "rollgate/approve/web/b/1"
	if g := SnapshotOf(ro, false).Gate; g != "b/0/1" {
		t.Errorf("Git only, branch written: gate %q, want b/0/1", g)
	}
	if g := SnapshotOf(ro, true).Gate; g != "" {
		t.Errorf("forge, no pull request yet: gate announced %q", g)
	}
	ro.Status.AwaitingApproval.PullRequestURL = "https://forge.example/pr/7"
	if g := SnapshotOf(ro, true).Gate; g != "b/0/1" {
		t.Errorf("forge, pull request open: gate %q, want b/0/1", g)
	}
	ro.Spec.Git = nil
	ro.Status.AwaitingApproval.Branch, ro.Status.AwaitingApproval.PullRequestURL = "", ""
	if g := SnapshotOf(ro, false).Gate; g != "b/0/1" {
		t.Errorf("no Git: gate %q, want b/0/1", g)
	}
}
