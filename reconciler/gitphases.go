package reconciler

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/strategy"
)

// observeApprovals adds the approvals found on the tracked Git branch to
// obs, so a merged approval pull request counts even before the GitOps
// tool has applied the Rollout manifest it changed.
func (r *RolloutReconciler) observeApprovals(ctx context.Context, rel *release, obs *strategy.Observed) error {
	ro := rel.ro
	if ro.Spec.Git == nil {
		return nil
	}
	e, repo, err := r.git.forRollout(ctx, ro)
	if err != nil {
		return err
	}
	rel.git, rel.repo = e, repo
	if ro.Status.AwaitingApproval == nil {
		return nil
	}
	branch := trackedBranch(ro, repo)
	if err := r.git.fetchIfDue(ctx, e, branch, rel.now); err != nil {
		return fmt.Errorf("fetching %s of %s: %w", branch, e.repo, err)
	}
	// Read what the last fetch brought; fetchIfDue keeps to the interval.
	snap, err := e.repo.LocalSnapshot(branch)
	if err != nil {
		e.markStale()
		return fmt.Errorf("reading %s of %s: %w", branch, e.repo, err)
	}
	manifest, err := snap.ReadFile(ro.Spec.Git.Path)
	if err != nil {
		e.markStale()
		return fmt.Errorf("reading %s from %s of %s: %w", ro.Spec.Git.Path, branch, e.repo, err)
	}
	found, err := gitsync.ApprovalsIn(manifest, ro.Namespace, ro.Name)
	if err != nil {
		return fmt.Errorf("reading approvals from %s of %s: %w", ro.Spec.Git.Path, e.repo, err)
	}
	for _, a := range found {
		obs.Approvals = append(obs.Approvals, v1alpha1.Approval{Revision: a.Revision, Step: int32(a.Step), Attempt: int32(a.Attempt), ApprovedBy: "git"})
	}
	return nil
}

// actOnGit proposes the approval branch of a gate that waits and queues
// the Rollout's progress for the status branch.
func (r *RolloutReconciler) actOnGit(ctx context.Context, rel *release, plan strategy.Plan) error {
	ro := rel.ro
	if rel.git == nil {
		return nil
	}
	if a := ro.Status.AwaitingApproval; a != nil && a.Branch == "" {
		p, err := gitsync.ProposeApproval(ctx, rel.git.repo, trackedBranch(ro, rel.repo), ro.Spec.Git.Path,
			ro.Namespace, ro.Name, gitApproval(a.Revision, a.Attempt, a.Step), "rollgate")
		if err != nil {
			return err
		}
		if !p.AlreadyApproved {
			a.Branch = p.Branch
			// Approval branches of earlier gates (earlier steps, revisions
			// or attempts) that were never merged can no longer approve
			// anything: remove them.
			keep := func(b string) bool { return b == p.Branch }
			if _, err := gitsync.CleanupApprovalBranches(ctx, rel.git.repo, ro.Namespace, ro.Name, keep); err != nil {
				return err
			}
		}
	}
	if err := r.openApprovalRequest(ctx, rel); err != nil {
		return fmt.Errorf("approval pull request: %w", err)
	}
	if err := r.revertInGit(ctx, rel); err != nil {
		return err
	}
	if err := r.openRevertRequest(ctx, rel, ro.Status.Message); err != nil {
		return fmt.Errorf("revert pull request: %w", err)
	}
	if ro.Status.Git == nil {
		ro.Status.Git = &v1alpha1.GitStatus{}
	}
	if c, err := rel.git.repo.Head(trackedBranch(ro, rel.repo)); err == nil {
		ro.Status.Git.ObservedCommit = c // before stateOf, which writes it
	}
	rel.git.writer.Enqueue(stateOf(ro, rel, plan))
	ro.Status.Git.StatusBranch = rel.git.statusBranch
	r.markGitWrite(rel)
	return nil
}

// markGitWrite sets GitSynced from where the progress just queued is: in
// Git (a flush wrote it, or found it there), failing to get there, or
// waiting for the next flush, whose callback reconciles the Rollout again.
func (r *RolloutReconciler) markGitWrite(rel *release) {
	ro, w := rel.ro, rel.git.writer
	branch := ro.Status.Git.StatusBranch
	if h := w.Written(ro.Namespace, ro.Name); h != "" {
		if h != ro.Status.Git.StatusCommit {
			ro.Status.Git.StatusCommit = h
			now := metav1.NewTime(rel.now)
			ro.Status.Git.LastWriteTime = &now
		}
		if !rel.gitFailed {
			r.markGit(ro, metav1True, v1alpha1.ReasonGitSynced, "progress written to "+branch+" in "+shortCommit(h))
		}
		return
	}
	if _, _, err := w.LastFlush(); err != nil {
		r.markGit(ro, metav1False, v1alpha1.ReasonGitError, "writing progress to "+branch+": "+err.Error())
		return
	}
	if !rel.gitFailed {
		r.markGitPending(rel)
	}
}

// markGitPending sets GitSynced=False, reason GitPending: the Rollout's
// current progress is not in Git yet.
func (r *RolloutReconciler) markGitPending(rel *release) {
	r.markGit(rel.ro, metav1False, v1alpha1.ReasonGitPending,
		fmt.Sprintf("progress queued for %s, written within %s", rel.git.statusBranch, rel.git.window))
}

func shortCommit(h string) string {
	if len(h) > 7 {
		return h[:7]
	}
	return h
}

func trackedBranch(ro *v1alpha1.Rollout, repo *v1alpha1.Repository) string {
	if ro.Spec.Git != nil && ro.Spec.Git.Branch != "" {
		return ro.Spec.Git.Branch
	}
	return orDefault(repo.Spec.Branch, "main")
}

// stateOf maps a Rollout's status to the file written to Git.
func stateOf(ro *v1alpha1.Rollout, rel *release, plan strategy.Plan) gitsync.RolloutState {
	s := ro.Status
	st := gitsync.RolloutState{
		Namespace: ro.Namespace, Name: ro.Name,
		Phase:   string(s.Phase),
		Step:    gitsync.StepState{Current: int(s.CurrentStepIndex), Total: int(s.StepCount), State: string(s.CurrentStepState)},
		Stable:  gitsync.VersionState{Revision: s.StableRevision, Replicas: s.StableReplicas, ReadyReplicas: s.StableReadyReplicas, TrafficPercent: 100 - s.CanaryWeight},
		Canary:  gitsync.VersionState{Revision: s.CanaryRevision, Replicas: s.CanaryReplicas, ReadyReplicas: s.CanaryReadyReplicas, TrafficPercent: s.CanaryWeight},
		Message: s.Message,
		Git:     gitsync.GitInfo{Repository: rel.git.repo.String(), Branch: trackedBranch(ro, rel.repo), Path: ro.Spec.Git.Path},
	}
	if s.StepStartedAt != nil {
		st.LastTransitionTime = s.StepStartedAt.Time
	}
	for _, a := range ro.Spec.Approvals {
		st.Approvals = append(st.Approvals, gitApproval(a.Revision, a.Attempt, a.Step))
	}
	if a := s.AwaitingApproval; a != nil {
		st.AwaitingApproval = &gitsync.AwaitingApproval{Revision: a.Revision, Step: int(a.Step), Attempt: int(a.Attempt),
			Branch: a.Branch, PullRequestURL: a.PullRequestURL, Since: a.Since.Time}
	}
	for _, m := range s.Analysis {
		for _, x := range m.Measurements {
			st.Analysis = append(st.Analysis, gitsync.Measurement{Name: m.Template + "/" + m.Metric, Phase: x.Phase, Value: x.Value, Time: x.At.Time, Message: x.Message})
		}
	}
	if c := ro.Status.Git; c != nil {
		st.Git.Revision = c.ObservedCommit
	}
	return st
}

// gitApproval is the approval of step of attempt of revision as gitsync
// writes it: attempt 1 (or unset) is left out.
func gitApproval(revision string, attempt, step int32) gitsync.Approval {
	a := gitsync.Approval{Revision: revision, Step: int(step)}
	if attempt > 1 {
		a.Attempt = int(attempt)
	}
	return a
}
