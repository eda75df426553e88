package rollout

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/reconciler/gitsource"
)

// gitRepository is what a Rollout's reconcile asks of the Repository its
// spec.git names (gitsource.Repo, the one implementation): the approvals
// its gate reads at a head, a wake-up when a gate waits, the gate's
// approval branch, a revert, the other clusters' progress, and the status
// writer its progress goes to. Only package gitsource fetches from Git.
type gitRepository interface {
	GateWaits(branch string, now time.Time)
	Approvals(ctx context.Context, branch, path, namespace, name string, want gitsync.Approval) (gitsource.Approvals, error)
	Head(branch string) (string, error)
	Propose(key types.NamespacedName, p gitsource.Proposal) (gitsource.Proposed, bool)
	Revert(ctx context.Context, opts gitsync.RevertOptions, req gitsync.RevertRequest) (gitsync.RevertOutcome, error)
	// CleanupReverts deletes, in the background, the Rollout's revert
	// branches whose change the tracked branch holds.
	CleanupReverts(log logr.Logger, key types.NamespacedName, tracked, occasion string)
	FleetStates(ctx context.Context, now time.Time) (map[string]gitsource.FleetStatus, error)
	Rules(ctx context.Context) (*gitsource.Rules, error)
	Writer() *gitsync.Writer
	QueueProgress(ctx context.Context, cache client.Reader, st gitsync.RolloutState)
	StatusBranch() string
	Window() time.Duration
	String() string
}

// actOpenRepository opens (or finds open) the clone and status writer of
// the Repository spec.git names.
func (r *Reconciler) actOpenRepository(ctx context.Context, sc *scope) error {
	if sc.ro.Spec.Git == nil {
		return nil
	}
	h, repo, err := r.repos.ForRollout(ctx, sc.ro)
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
// brought, as the fetch read it (gitsource.Repo.Approvals): the
// Repository controller fetches the branch every interval while a gate
// waits on it (at once after a push webhook) and wakes the Rollouts whose
// manifest changed.
func (r *Reconciler) observeApprovals(ctx context.Context, sc *scope) error {
	ro, git := sc.ro, sc.git
	if git == nil || ro.Status.AwaitingApproval == nil {
		return nil
	}
	branch := trackedBranch(ro, sc.repository)
	git.GateWaits(branch, sc.now)
	a := ro.Status.AwaitingApproval
	want := gitApproval(a.Revision, a.Attempt, a.Step)
	seen, err := git.Approvals(ctx, branch, ro.Spec.Git.Path, ro.Namespace, ro.Name, want)
	if err != nil {
		return err
	}
	// Under an approval policy only the verdict on the gate's approval
	// counts; it goes to the scope either way, for ApprovalVerified.
	if v := r.checkReviews(ctx, sc, seen.Verdict); v != nil {
		sc.approvalVerdict = v
		if v.Counts() {
			sc.gitApprovals = append(sc.gitApprovals, v1alpha1.Approval{Revision: a.Revision, Step: a.Step, Attempt: int32(want.Attempt), ApprovedBy: "git " + shortCommit(v.Commit)})
		}
	}
	for _, a := range seen.Found {
		sc.gitApprovals = append(sc.gitApprovals, v1alpha1.Approval{Revision: a.Revision, Step: int32(a.Step), Attempt: int32(a.Attempt), ApprovedBy: "git"})
	}
	return nil
}

// actOnGit proposes the approval branch of a gate that waits, writes a
// failed release's revert, and prepares the Rollout's progress for the
// status branch (queued once the status is persisted: QueueProgress).
// The progress goes out even when a proposal or the revert failed: other
// clusters (spec.fleet) and people read it there.
func (r *Reconciler) actOnGit(ctx context.Context, sc *scope) error {
	ro := sc.ro
	if sc.git == nil {
		return nil
	}
	var errs []error
	if err := r.proposeApproval(ctx, sc); err != nil {
		errs = append(errs, err)
	} else if err := r.openApprovalRequest(ctx, sc); err != nil {
		errs = append(errs, fmt.Errorf("approval pull request: %w", err))
	}
	if err := r.reportGateStatus(ctx, sc); err != nil {
		errs = append(errs, fmt.Errorf("approval pull request status: %w", err))
	}
	if err := r.revertInGit(ctx, sc); err != nil {
		errs = append(errs, err)
	} else if err := r.openRevertRequest(ctx, sc, ro.Status.Message); err != nil {
		errs = append(errs, fmt.Errorf("revert pull request: %w", err))
	}
	if ro.Status.Git == nil {
		ro.Status.Git = &v1alpha1.GitStatus{}
	}
	if c, err := sc.git.Head(trackedBranch(ro, sc.repository)); err == nil {
		ro.Status.Git.ObservedCommit = c // before stateOf, which writes it
	}
	st := stateOf(ro, sc)
	sc.gitState = &st // queued by Reconcile once the status is persisted
	ro.Status.Git.StatusBranch = sc.git.StatusBranch()
	sc.gitQueued = true
	return errors.Join(errs...)
}

// proposeApproval records the approval branch of a gate that waits and
// has none yet, once the repository's proposer has pushed it (see
// gitsource.Repo.Propose): the reconcile never waits for Git's network.
// The branch's commit also prunes spec.approvals down to the entries of
// the stable and canary revisions, so the list never outgrows the CRD's
// cap, and the approval branches of earlier gates are removed.
func (r *Reconciler) proposeApproval(_ context.Context, sc *scope) error {
	ro := sc.ro
	a := ro.Status.AwaitingApproval
	if a == nil || a.Branch != "" {
		return nil
	}
	res, ok := sc.git.Propose(client.ObjectKeyFromObject(ro), gitsource.Proposal{
		Tracked: trackedBranch(ro, sc.repository), Path: ro.Spec.Git.Path,
		Approval: gitApproval(a.Revision, a.Attempt, a.Step), Live: []string{ro.Status.StableRevision, ro.Status.CanaryRevision},
	})
	if !ok || res.Approved {
		return res.Err
	}
	a.Branch = res.Branch
	return res.Err
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
	return cmp.Or(repo.Spec.Branch, "main")
}

// stateOf maps a Rollout's status to the file written to Git.
func stateOf(ro *v1alpha1.Rollout, sc *scope) gitsync.RolloutState {
	s := ro.Status
	st := gitsync.RolloutState{
		Namespace: ro.Namespace, Name: ro.Name,
		Phase:   string(s.Phase),
		Step:    gitsync.StepState{Current: int(s.CurrentStepIndex), Total: int(s.StepCount), State: string(s.CurrentStepState)},
		Stable:  gitsync.VersionState{Revision: s.StableRevision, Replicas: s.StableReplicas, ReadyReplicas: s.StableReadyReplicas, TrafficPercent: 100 - s.CanaryWeight},
		Canary:  gitsync.VersionState{Revision: s.CanaryRevision, Replicas: s.CanaryReplicas, ReadyReplicas: s.CanaryReadyReplicas, TrafficPercent: s.CanaryWeight},
		Message: s.Message,
		Git:     gitsync.GitInfo{Repository: sc.git.String(), Branch: trackedBranch(ro, sc.repository), Path: ro.Spec.Git.Path},
	}
	// The images of the workload's template identify the version across
	// clusters (spec.fleet of Rollouts elsewhere compares them).
	if w := sc.workload; w.Revision != "" {
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
	st.ApprovalRecord = approvalRecord(ro)
	if sc.plan != nil {
		// Only the waits: each comes with a message of its own, so the
		// reason never makes a status write of its own.
		switch r := sc.plan.Conditions.Progressing.Reason; r {
		case v1alpha1.ReasonWaitingForApproval, v1alpha1.ReasonWaitingForFleet, v1alpha1.ReasonWaitingForFreeze,
			v1alpha1.ReasonWaitingForBudget, v1alpha1.ReasonWaitingForHook, v1alpha1.ReasonWaitingForGroup:
			st.Reason = r
		}
	}
	if g := ro.Spec.Group; g != nil {
		st.Group = g.Name
	}
	if q := s.Queue; q != nil {
		st.Queue = &gitsync.QueueState{Budget: q.Budget, Position: int(q.Position), Since: q.Since.Time}
	}
	if f := ro.Spec.Fleet; f != nil {
		for _, w := range f.WaitFor {
			for _, c := range append([]string{w.Cluster}, w.Clusters...) {
				if c != "" {
					// A pattern of a share as written ("prod-*/demo/web"):
					// readers match it against the branch.
					st.WaitsFor = append(st.WaitsFor, c+"/"+upstreamName(w, ro))
				}
			}
		}
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
