package gitsource

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
)

// Approvals is what a gate reads from Git: without an approval policy
// (spec.approvals) every approval of the Rollout found on the branch
// (Found); under one, the verdict on the approval the gate waits for
// (Verdict, nil when the branch does not hold it).
type Approvals struct {
	Found   []gitsync.Approval
	Verdict *gitsync.Verdict
}

// Approvals reads the approvals of Rollout namespace/name in its manifest
// at path on branch, as the last fetch brought it and as the fetch read
// it (gateManifest), so a merged approval pull request counts even before
// the GitOps tool has applied the manifest it changed. Under an approval
// policy it judges want, found at that head, in the history clone
// (fetched when its head differs); only an approval that passes counts.
func (e *Repo) Approvals(ctx context.Context, branch, path, namespace, name string, want gitsync.Approval) (Approvals, error) {
	snap, manifest, err := e.gateManifest(branch, path)
	if err != nil {
		e.markStale()
		return Approvals{}, fmt.Errorf("reading %s from %s of %s: %w", path, branch, e.clone, err)
	}
	found, err := gitsync.ApprovalsIn(manifest, namespace, name)
	if err != nil {
		return Approvals{}, fmt.Errorf("reading approvals from %s of %s: %w", path, e.clone, err)
	}
	if e.verifier == nil {
		return Approvals{Found: found}, nil
	}
	v, err := e.verify(ctx, snap, path, namespace, name, want)
	return Approvals{Verdict: v}, err
}

// verify judges want at snap, the tracked branch's head as the Repository
// last fetched it, under the Repository's approval policy, in the history
// clone; nil when that head holds no want. The history clone is fetched
// only when it does not hold that head yet, and a newer head it may hold
// is not judged: a merge counts once the Repository itself fetched it (its
// interval or its push webhook), with or without a policy.
func (e *Repo) verify(ctx context.Context, snap *gitsync.Snapshot, path, namespace, name string, want gitsync.Approval) (*gitsync.Verdict, error) {
	if err := e.historyHolds(ctx, snap); err != nil {
		return nil, err
	}
	full, err := e.history.SnapshotAt(snap.Branch, snap.Commit)
	if err != nil {
		return nil, fmt.Errorf("reading the history of %s of %s: %w", snap.Branch, e.clone, err)
	}
	v, found, err := e.verifier.Verify(full, path, namespace, name, want)
	if err != nil {
		return nil, fmt.Errorf("verifying the approval in %s of %s: %w", snap.Branch, e.clone, err)
	}
	if !found {
		return nil, nil
	}
	return &v, nil
}

// historyHolds fetches snap's branch into the history clone when the clone
// does not hold snap's commit yet. A branch rewritten between the two
// fetches may leave it without that commit: an error, and the gate holds
// until the Repository fetches the new head.
func (e *Repo) historyHolds(ctx context.Context, snap *gitsync.Snapshot) error {
	if e.history.HasCommit(snap.Commit) {
		return nil
	}
	if err := e.history.Fetch(ctx, snap.Branch); err != nil {
		return fmt.Errorf("fetching the history of %s of %s: %w", snap.Branch, e.clone, err)
	}
	if !e.history.HasCommit(snap.Commit) {
		return fmt.Errorf("the history of %s of %s no longer holds %s (the branch was rewritten): "+
			"waiting for the Repository's next fetch", snap.Branch, e.clone, shortHash(snap.Commit))
	}
	return nil
}

// approverKeys reads the Secret named by spec.approvals.signedBy of r: the
// trusted public keys, and its version (for reopening the repository when
// the keys change). Without signedBy it returns nothing.
func (g *Pool) approverKeys(ctx context.Context, r *v1alpha1.Repository) (map[string][]byte, string, error) {
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
