// Package notify tells people where a release stands, through argoproj's
// notifications-engine: the same services (Slack, Teams, email, webhook,
// and the others the engine knows), the same ConfigMap and Secret format
// and the same subscription annotations as Argo CD and Argo Rollouts.
// rollgate decides when a trigger fires, from each stored change of a
// Rollout: its status before and after (Fired, pure); the engine renders
// the templates and sends. It runs as a process of its own,
// rollgate-notifier (Watch); docs/notifications.md is the user's page.
package notify

import (
	"fmt"

	"github.com/fluxcd/pkg/runtime/conditions"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// Trigger is the name of a notification trigger, as subscriptions and
// the ConfigMap's trigger.<name> keys spell it.
type Trigger string

// The triggers rollgate fires, each once per transition of a release.
const (
	// OnReleaseStarted: a new revision (or a new attempt of one) began.
	OnReleaseStarted Trigger = "on-release-started"
	// OnGateWaiting: a step waits at its gate, once the approval is
	// requested (the pull request is open where a forge is configured,
	// the approval branch exists where only Git is).
	OnGateWaiting Trigger = "on-gate-waiting"
	// OnStepDone: a step finished and the next began.
	OnStepDone Trigger = "on-step-done"
	// OnAnalysisFailed: a check failed the release.
	OnAnalysisFailed Trigger = "on-analysis-failed"
	// OnRolledBack: a failed or aborted release is rolled back.
	OnRolledBack Trigger = "on-rolled-back"
	// OnReleased: the new revision is the stable one.
	OnReleased Trigger = "on-released"
	// OnRevertedInGit: the revert of a failed release was written to Git
	// (its pull request opened, where a forge is configured).
	OnRevertedInGit Trigger = "on-reverted-in-git"
)

// Triggers lists every trigger rollgate fires, in a release's order.
var Triggers = []Trigger{OnReleaseStarted, OnGateWaiting, OnStepDone, OnAnalysisFailed, OnRolledBack, OnReleased, OnRevertedInGit}

// Snapshot is what the triggers are decided from: a few fields of a
// Rollout's status, taken of the versions before and after a change.
type Snapshot struct {
	Phase          v1alpha1.RolloutPhase
	Canary, Stable string
	Attempt, Step  int32
	// RolledBack: pods and traffic are back on the stable revision after
	// a failed or reverted release (a failed release stays Failed, its
	// workload held, until Git reverts it; its rollback is done once no
	// canary pod and no canary traffic is left).
	RolledBack bool
	// Gate names the gate whose approval is requested ("" when none).
	Gate string
	// Failure is the reason of a failed release (Ready=False), "" else.
	Failure string
	// Revert is the written revert ("" when none).
	Revert string
}

// SnapshotOf takes a Snapshot of status. forge says whether the Rollout's
// Repository opens pull requests: a gate or a revert is then announced
// once its pull request is open, so that the notification can link it.
func SnapshotOf(ro *v1alpha1.Rollout, forge bool) Snapshot {
	s := &ro.Status
	out := Snapshot{
		Phase: s.Phase, Canary: s.CanaryRevision, Stable: s.StableRevision,
		Attempt: s.Attempt, Step: s.CurrentStepIndex,
		RolledBack: s.CurrentStepState == v1alpha1.StepRolledBack ||
			(s.Phase == v1alpha1.PhaseFailed && s.CurrentStepState == v1alpha1.StepRollingBack && s.CanaryReplicas == 0 && s.CanaryWeight == 0),
	}
	if a := s.AwaitingApproval; a != nil && (!forge || a.PullRequestURL != "") && (a.Branch != "" || a.PullRequestURL != "" || ro.Spec.Git == nil) {
		out.Gate = fmt.Sprintf("%s/%d/%d", a.Revision, a.Attempt, a.Step)
	}
	if s.Phase == v1alpha1.PhaseFailed {
		if c := conditions.Get(ro, v1alpha1.ReadyCondition); c != nil && c.Status == "False" {
			out.Failure = c.Reason
		}
	}
	if g := s.Git; g != nil && g.RevertBranch != "" && (!forge || g.RevertPullRequestURL != "") {
		out.Revert = g.RevertBranch
	}
	return out
}

// Fired returns the triggers the change from before to after fires, in a
// release's order. A Rollout seen for the first time (no stable revision
// before) fires nothing: adopting a workload is not a release.
func Fired(before, after Snapshot) []Trigger {
	var out []Trigger
	sameRelease := before.Canary == after.Canary && before.Attempt == after.Attempt
	inRelease := after.Canary != "" && after.Canary != after.Stable
	if inRelease && !sameRelease && after.Phase != v1alpha1.PhaseFailed && before.Stable != "" {
		out = append(out, OnReleaseStarted)
	}
	if sameRelease && after.Step > before.Step && before.Step > 0 && after.Phase != v1alpha1.PhaseFailed {
		out = append(out, OnStepDone)
	}
	if after.Gate != "" && after.Gate != before.Gate {
		out = append(out, OnGateWaiting)
	}
	if after.Failure == v1alpha1.ReasonAnalysisFailed && (before.Failure != after.Failure || !sameRelease) {
		out = append(out, OnAnalysisFailed)
	}
	if after.RolledBack && !before.RolledBack {
		out = append(out, OnRolledBack)
	}
	if after.Phase == v1alpha1.PhaseHealthy && after.Stable != "" && after.Stable != before.Stable && before.Stable != "" {
		out = append(out, OnReleased)
	}
	if after.Revert != "" && after.Revert != before.Revert {
		out = append(out, OnRevertedInGit)
	}
	return out
}
