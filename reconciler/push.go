package reconciler

import (
	"bytes"
	"context"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
)

// A merged approval reaches its Rollout this way: a push webhook marks the
// Repository stale (gitpush.Server → repoPool.markStale) and its
// controller fetches at once; without a webhook a Rollout waiting at a
// gate fetches once per interval. Whoever fetches, a fetch that moves a
// branch wakes exactly the Rollouts waiting at a gate whose manifest
// changed on it (repoPool.moved): not every Rollout of the Repository,
// whose reconciles would queue in front of the one that was approved.
// The woken Rollouts go to the front of the work queue (priorityWoken).
// The comparison is with the head last compared, not the head before the
// fetch: other reads fetch the tracked branch too (proposing an approval
// branch), and a merge they bring must still wake its Rollout.

// wakeIfMoved wakes the Rollouts gated on branch whose manifest changed
// between the head of branch last looked at here (e.seen) and its local
// head now, whoever moved it: a fetch of the pool, or a read that fetched
// on its own (proposing an approval branch reads the tracked branch, and
// the merges it brings would otherwise never be compared). Caller must
// not hold e.mu.
func (g *repoPool) wakeIfMoved(ctx context.Context, e *repoHandle, branch string) {
	head, err := e.clone.Head(branch)
	if err != nil {
		return
	}
	e.mu.Lock()
	prev, known := e.seen[branch]
	e.mu.Unlock()
	if known && prev.Commit == head {
		return
	}
	cur, err := e.clone.LocalSnapshot(branch)
	if err != nil {
		return
	}
	e.mu.Lock()
	if e.seen == nil {
		e.seen = map[string]*gitsync.Snapshot{}
	}
	e.seen[branch] = cur
	e.mu.Unlock()
	if !known {
		prev = nil // nothing to compare with: wake every gate
	}
	g.wakeGated(ctx, e, branch, prev, cur)
}

// wakeGated notifies g.moved of the Rollouts of e waiting at a gate, on
// branch, whose manifest differs between old (nil when unknown) and cur.
// Caller must not hold e.mu.
//
// Under an approval policy (spec.approvals: signedBy, mergeOnly) the
// verdict on a gate depends on the head commit itself, not only on the
// manifest: a merge signed, or signed again by an approver, after it
// landed changes no file. There every gated Rollout on branch is woken on
// every new head; otherwise it would wait for its next resync.
func (g *repoPool) wakeGated(ctx context.Context, e *repoHandle, branch string, old, cur *gitsync.Snapshot) {
	byCommit := e.verifier != nil
	var keys []types.NamespacedName
	for _, ro := range g.gatedRollouts(ctx, e.obj) {
		if orDefault(ro.Spec.Git.Branch, e.branch) != branch {
			continue
		}
		if old != nil && !byCommit && sameFile(old, cur, ro.Spec.Git.Path) {
			continue
		}
		keys = append(keys, client.ObjectKeyFromObject(ro))
	}
	g.moved.notify(keys...)
}

// sameFile reports whether path reads the same in a and b (false when
// either read fails: better one reconcile too many).
func sameFile(a, b *gitsync.Snapshot, path string) bool {
	x, err := a.ReadFile(path)
	if err != nil {
		return false
	}
	y, err := b.ReadFile(path)
	return err == nil && bytes.Equal(x, y)
}

// gatedRollouts returns the Rollouts of Repository repo that wait at a
// gate for an approval merged in Git (none when the pool has no Rollout
// cache).
func (g *repoPool) gatedRollouts(ctx context.Context, repo types.NamespacedName) []*v1alpha1.Rollout {
	if g.rollouts == nil {
		return nil
	}
	var list v1alpha1.RolloutList
	if err := g.rollouts.List(ctx, &list, client.InNamespace(repo.Namespace), client.MatchingFields{repositoryIndex: repo.Name}); err != nil {
		return nil
	}
	var out []*v1alpha1.Rollout
	for i := range list.Items {
		if ro := &list.Items[i]; ro.Status.AwaitingApproval != nil && ro.Spec.Git != nil {
			out = append(out, ro)
		}
	}
	return out
}

// rolloutKeys are the keys of ros.
func rolloutKeys(ros []*v1alpha1.Rollout) []types.NamespacedName {
	keys := make([]types.NamespacedName, 0, len(ros))
	for _, ro := range ros {
		keys = append(keys, client.ObjectKeyFromObject(ro))
	}
	return keys
}
