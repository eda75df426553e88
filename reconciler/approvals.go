package reconciler

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
)

// approverKeys reads the Secret named by spec.approvals.signedBy of r: the
// trusted public keys, and its version (for reopening the repository when
// the keys change). Without signedBy it returns nothing.
func (g *repoPool) approverKeys(ctx context.Context, r *v1alpha1.Repository) (map[string][]byte, string, error) {
	p := r.Spec.Approvals
	if p == nil || p.SignedBy == nil {
		return nil, "", nil
	}
	// Signatures are asked for: without the keys, no approval counts (the
	// Repository fails to open, and gates hold).
	var s corev1.Secret
	if err := g.reader.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: p.SignedBy.Name}, &s); err != nil {
		return nil, "", fmt.Errorf("getting Secret %s/%s named by Repository %s/%s spec.approvals.signedBy: %w",
			r.Namespace, p.SignedBy.Name, r.Namespace, r.Name, err)
	}
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	return s.Data, s.ResourceVersion, nil
}

// approvalVerifier builds the verifier of policy p from the keys of its
// signedBy Secret; nil without a policy.
func approvalVerifier(p *v1alpha1.ApprovalPolicy, keys map[string][]byte) (*gitsync.ApprovalVerifier, error) {
	if !p.Enabled() {
		return nil, nil
	}
	if p.SignedBy == nil {
		keys = nil
	}
	v, err := gitsync.NewApprovalVerifier(keys, p.MergeOnly)
	if err != nil {
		return nil, fmt.Errorf("spec.approvals.signedBy (Secret %s): %w", p.SignedBy.Name, err)
	}
	return v, nil
}

// observeVerifiedApproval judges the approval of the gate the Rollout
// waits at, found at the head of the tracked branch (snap, as the main
// clone last fetched it), under the Repository's approval policy, in the
// history clone (fetched when its head differs). Only an approval that
// passes counts; the verdict goes to the scope either way, for the
// ApprovalVerified condition.
func observeVerifiedApproval(ctx context.Context, sc *scope, snap *gitsync.Snapshot) error {
	ro, e := sc.ro, sc.git
	a := ro.Status.AwaitingApproval
	want := gitApproval(a.Revision, a.Attempt, a.Step)
	if h, err := e.history.Head(snap.Branch); err != nil || h != snap.Commit {
		if err := e.history.Fetch(ctx, snap.Branch); err != nil {
			return fmt.Errorf("fetching the history of %s of %s: %w", snap.Branch, e.clone, err)
		}
	}
	full, err := e.history.LocalSnapshot(snap.Branch)
	if err != nil {
		return fmt.Errorf("reading the history of %s of %s: %w", snap.Branch, e.clone, err)
	}
	v, found, err := e.verifier.Verify(full, ro.Spec.Git.Path, ro.Namespace, ro.Name, want)
	if err != nil {
		return fmt.Errorf("verifying the approval in %s of %s: %w", snap.Branch, e.clone, err)
	}
	if !found {
		return nil
	}
	sc.approvalVerdict = &v
	if v.Counts() {
		sc.gitApprovals = append(sc.gitApprovals, v1alpha1.Approval{Revision: a.Revision, Step: a.Step, Attempt: int32(want.Attempt), ApprovedBy: "git " + shortCommit(v.Commit)})
	}
	return nil
}

// countedApprovals are the approvals the planner may count: those of the
// Rollout object and those found on the tracked branch, or, when the
// Repository restricts approvals (spec.approvals), only the ones found on
// the tracked branch that passed its checks.
func countedApprovals(sc *scope) []v1alpha1.Approval {
	if r := sc.repository; r != nil && r.Spec.Approvals.Enabled() {
		return append([]v1alpha1.Approval(nil), sc.gitApprovals...)
	}
	return append(append([]v1alpha1.Approval(nil), sc.ro.Spec.Approvals...), sc.gitApprovals...)
}
