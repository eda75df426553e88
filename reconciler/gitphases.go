package reconciler

import (
	"context"
	"errors"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
)

// actOpenRepository opens (or finds open) the clone and status writer of
// the Repository spec.git names.
func (r *RolloutReconciler) actOpenRepository(ctx context.Context, sc *scope) error {
	if sc.ro.Spec.Git == nil {
		return nil
	}
	h, repo, err := r.repos.forRollout(ctx, sc.ro)
	sc.repository = repo
	if err != nil {
		return err
	}
	sc.git = h
	return nil
}

// observeApprovals reads the approvals on the tracked Git branch, so a
// merged approval pull request counts even before the GitOps tool has
// applied the Rollout manifest it changed. It reads what the last fetch
// brought, as the fetch read it (gateManifest): the Repository controller
// fetches the branch every interval while a gate waits on it (at once
// after a push webhook) and wakes the Rollouts whose manifest changed.
func (r *RolloutReconciler) observeApprovals(ctx context.Context, sc *scope) error {
	ro, e := sc.ro, sc.git
	if e == nil || ro.Status.AwaitingApproval == nil {
		return nil
	}
	branch := trackedBranch(ro, sc.repository)
	r.repos.gateWaits(e, branch, sc.now)
	snap, manifest, err := e.gateManifest(branch, ro.Spec.Git.Path)
	if err != nil {
		e.markStale()
		return fmt.Errorf("reading %s from %s of %s: %w", ro.Spec.Git.Path, branch, e.clone, err)
	}
	found, err := gitsync.ApprovalsIn(manifest, ro.Namespace, ro.Name)
	if err != nil {
		return fmt.Errorf("reading approvals from %s of %s: %w", ro.Spec.Git.Path, e.clone, err)
	}
	if e.verifier != nil {
		return observeVerifiedApproval(ctx, sc, snap)
	}
	for _, a := range found {
		sc.gitApprovals = append(sc.gitApprovals, v1alpha1.Approval{Revision: a.Revision, Step: int32(a.Step), Attempt: int32(a.Attempt), ApprovedBy: "git"})
	}
	return nil
}

// actOnGit proposes the approval branch of a gate that waits, writes a
// failed release's revert, and prepares the Rollout's progress for the
// status branch (queued once the status is persisted: queueProgress).
// The progress goes out even when a proposal or the revert failed: other
// clusters (spec.fleet) and people read it there.
func (r *RolloutReconciler) actOnGit(ctx context.Context, rel *scope) error {
	ro := rel.ro
	if rel.git == nil {
		return nil
	}
	var errs []error
	if err := r.proposeApproval(ctx, rel); err != nil {
		errs = append(errs, err)
	} else if err := r.openApprovalRequest(ctx, rel); err != nil {
		errs = append(errs, fmt.Errorf("approval pull request: %w", err))
	}
	if err := r.revertInGit(ctx, rel); err != nil {
		errs = append(errs, err)
	} else if err := r.openRevertRequest(ctx, rel, ro.Status.Message); err != nil {
		errs = append(errs, fmt.Errorf("revert pull request: %w", err))
	}
	if ro.Status.Git == nil {
		ro.Status.Git = &v1alpha1.GitStatus{}
	}
	if c, err := rel.git.head(trackedBranch(ro, rel.repository)); err == nil {
		ro.Status.Git.ObservedCommit = c // before stateOf, which writes it
	}
	st := stateOf(ro, rel)
	rel.gitState = &st // queued by Reconcile once the status is persisted
	ro.Status.Git.StatusBranch = rel.git.statusBranch
	rel.gitQueued = true
	return errors.Join(errs...)
}

// proposeApproval records the approval branch of a gate that waits and
// has none yet, once the repository's proposer has pushed it (see
// proposer): the reconcile never waits for Git's network. The branch's
// commit also prunes spec.approvals down to the entries of the stable and
// canary revisions, so the list never outgrows the CRD's cap, and the
// approval branches of earlier gates are removed.
func (r *RolloutReconciler) proposeApproval(_ context.Context, rel *scope) error {
	ro := rel.ro
	a := ro.Status.AwaitingApproval
	if a == nil || a.Branch != "" {
		return nil
	}
	res, ok := rel.git.proposer.ask(client.ObjectKeyFromObject(ro), proposal{
		tracked: trackedBranch(ro, rel.repository), path: ro.Spec.Git.Path,
		approval: gitApproval(a.Revision, a.Attempt, a.Step), live: []string{ro.Status.StableRevision, ro.Status.CanaryRevision},
	})
	if !ok || res.approved {
		return res.err
	}
	a.Branch = res.branch
	return res.err
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
func stateOf(ro *v1alpha1.Rollout, rel *scope) gitsync.RolloutState {
	s := ro.Status
	st := gitsync.RolloutState{
		Namespace: ro.Namespace, Name: ro.Name,
		Phase:   string(s.Phase),
		Step:    gitsync.StepState{Current: int(s.CurrentStepIndex), Total: int(s.StepCount), State: string(s.CurrentStepState)},
		Stable:  gitsync.VersionState{Revision: s.StableRevision, Replicas: s.StableReplicas, ReadyReplicas: s.StableReadyReplicas, TrafficPercent: 100 - s.CanaryWeight},
		Canary:  gitsync.VersionState{Revision: s.CanaryRevision, Replicas: s.CanaryReplicas, ReadyReplicas: s.CanaryReadyReplicas, TrafficPercent: s.CanaryWeight},
		Message: s.Message,
		Git:     gitsync.GitInfo{Repository: rel.git.clone.String(), Branch: trackedBranch(ro, rel.repository), Path: ro.Spec.Git.Path},
	}
	// The images of the workload's template identify the version across
	// clusters (spec.fleet of Rollouts elsewhere compares them).
	if w := rel.workload; w.Revision != "" {
		if s.CanaryRevision == w.Revision && s.CanaryRevision != s.StableRevision {
			st.Canary.Images = w.Images
		}
		if s.StableRevision == w.Revision {
			st.Stable.Images = w.Images
		}
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
