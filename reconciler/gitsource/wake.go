package gitsource

import (
	"bytes"
	"cmp"
	"context"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
)

// A merged approval reaches its Rollout this way: a push webhook marks the
// Repository stale (gitpush.Server → Pool.MarkStale) and its
// controller fetches at once; without a webhook a Rollout waiting at a
// gate fetches once per interval. Whoever fetches, a fetch that moves a
// branch wakes exactly the Rollouts waiting at a gate whose manifest
// changed on it (Pool.moved): not every Rollout of the Repository,
// whose reconciles would queue in front of the one that was approved.
// The woken Rollouts go to the front of the Rollout controller's work
// queue (the priority it gives Pool.Woken).
// The comparison is with the head last compared, not the head before the
// fetch: other reads fetch the tracked branch too (writing a revert), and
// a merge they bring must still wake its Rollout. Approval branches are
// pushed from a clone of their own (see proposer): nothing a merged
// approval goes through waits behind their pushes.

// gateView is what the gates on one branch read: the head of the branch
// last compared for wakes, and the manifests of the Rollouts gated on it
// at that head, read by the compare. A woken gate reads its approval from
// here without taking the clone, which a fetch holds for its whole
// exchange with the Git server: in a wave of merges with the push
// webhook the Repository controller fetches almost without pause.
type gateView struct {
	snap  *gitsync.Snapshot
	files map[string][]byte
}

// wakeIfMoved wakes the Rollouts gated on branch whose manifest changed
// between the head of branch last looked at here (e.seen) and its local
// head now, and makes that head the one gates read (gateManifest).
// Whoever moves the local head calls it: a fetch of the pool, a revert
// written to the tracked branch. Caller must not hold e.mu.
func (g *Pool) wakeIfMoved(ctx context.Context, e *Repo, branch string) {
	e.comparing.Lock()
	defer e.comparing.Unlock()
	head, err := e.clone.Head(branch)
	if err != nil {
		// The branch is gone: gates read (and fail to read) the clone.
		e.mu.Lock()
		delete(e.seen, branch)
		e.mu.Unlock()
		return
	}
	e.mu.Lock()
	prev := e.seen[branch]
	e.mu.Unlock()
	if prev != nil && prev.snap.Commit == head {
		return
	}
	snap, err := e.clone.LocalSnapshot(branch)
	if err != nil {
		return
	}
	cur := &gateView{snap: snap, files: map[string][]byte{}}
	keys := g.wakeGated(ctx, e, branch, prev, cur)
	keys = append(keys, g.rulesMoved(ctx, e, branch, prev, cur)...)
	e.mu.Lock()
	if e.seen == nil {
		e.seen = map[string]*gateView{}
	}
	e.seen[branch] = cur
	e.mu.Unlock()
	g.moved.notify(keys...)
}

// wakeGated returns the Rollouts of e waiting at a gate, on branch, whose
// manifest differs between old (nil when unknown: every one) and cur,
// keeping in cur the manifests it read. Caller must not hold e.mu.
//
// Under an approval policy (spec.approvals: signedBy, mergeOnly) the
// verdict on a gate depends on the head commit itself, not only on the
// manifest: a merge signed, or signed again by an approver, after it
// landed changes no file. There every gated Rollout on branch is woken on
// every new head; otherwise it would wait for its next resync.
func (g *Pool) wakeGated(ctx context.Context, e *Repo, branch string, old, cur *gateView) []types.NamespacedName {
	byCommit := e.verifier != nil
	var keys []types.NamespacedName
	for _, ro := range g.gatedRollouts(ctx, e.obj) {
		if cmp.Or(ro.Spec.Git.Branch, e.branch) != branch {
			continue
		}
		data, err := cur.snap.ReadFile(ro.Spec.Git.Path)
		if err == nil {
			cur.files[ro.Spec.Git.Path] = data
		}
		if old != nil && !byCommit && err == nil && old.holds(e, ro.Spec.Git.Path, data) {
			continue
		}
		keys = append(keys, client.ObjectKeyFromObject(ro))
	}
	return keys
}

// holds reports whether path reads data in v (false when the read fails:
// better one reconcile too many).
func (v *gateView) holds(e *Repo, path string, data []byte) bool {
	e.mu.Lock()
	was, ok := v.files[path]
	e.mu.Unlock()
	if !ok {
		var err error
		if was, err = v.snap.ReadFile(path); err != nil {
			return false
		}
	}
	return bytes.Equal(was, data)
}

// gateManifest returns the manifest at path on branch as the gates read
// it: at the head last compared for wakes (see gateView), and that head.
// A manifest the compare did not read (its Rollout reached its gate
// since) is read once from the clone; before any compare, the clone's
// local head is read.
func (e *Repo) gateManifest(branch, path string) (*gitsync.Snapshot, []byte, error) {
	e.mu.Lock()
	v := e.seen[branch]
	var data []byte
	ok := false
	if v != nil {
		data, ok = v.files[path]
	}
	e.mu.Unlock()
	if ok {
		return v.snap, data, nil
	}
	if v == nil {
		snap, err := e.clone.LocalSnapshot(branch)
		if err != nil {
			return nil, nil, err
		}
		data, err := snap.ReadFile(path)
		return snap, data, err
	}
	data, err := v.snap.ReadFile(path)
	if err != nil {
		return v.snap, nil, err
	}
	e.mu.Lock()
	v.files[path] = data
	e.mu.Unlock()
	return v.snap, data, nil
}

// Head returns the commit of branch the gates read (gateManifest).
func (e *Repo) Head(branch string) (string, error) {
	e.mu.Lock()
	v := e.seen[branch]
	e.mu.Unlock()
	if v != nil {
		return v.snap.Commit, nil
	}
	return e.clone.Head(branch)
}

// gatedRollouts returns the Rollouts of Repository repo that wait at a
// gate for an approval merged in Git (none when the pool has no Rollout
// cache).
func (g *Pool) gatedRollouts(ctx context.Context, repo types.NamespacedName) []*v1alpha1.Rollout {
	return g.rolloutsOf(ctx, repo, func(ro *v1alpha1.Rollout) bool { return ro.Status.AwaitingApproval != nil })
}

// rolloutsOf returns the Rollouts of Repository repo (with spec.git) that
// keep says yes of (none when the pool has no Rollout cache).
func (g *Pool) rolloutsOf(ctx context.Context, repo types.NamespacedName, keep func(*v1alpha1.Rollout) bool) []*v1alpha1.Rollout {
	if g.rollouts == nil {
		return nil
	}
	var list v1alpha1.RolloutList
	if err := g.rollouts.List(ctx, &list, client.InNamespace(repo.Namespace), client.MatchingFields{repositoryIndex: repo.Name}); err != nil {
		return nil
	}
	var out []*v1alpha1.Rollout
	for i := range list.Items {
		if ro := &list.Items[i]; ro.Spec.Git != nil && keep(ro) {
			out = append(out, ro)
		}
	}
	return out
}

// rulesMoved returns every Rollout of e when its release rules file differs
// between old (nil when unknown) and cur on the tracked branch: a merge
// that lifts a freeze or adds one reaches the Rollouts it concerns at
// the fetch that brings it, not at their next look (freezePoll).
func (g *Pool) rulesMoved(ctx context.Context, e *Repo, branch string, old, cur *gateView) []types.NamespacedName {
	if e.spec.ReleaseRules == nil || branch != e.branch || old == nil {
		return nil
	}
	path := e.spec.ReleaseRules.Path
	was, errOld := old.snap.ReadFile(path)
	now, errCur := cur.snap.ReadFile(path)
	if (errOld == nil) == (errCur == nil) && bytes.Equal(was, now) {
		return nil
	}
	return rolloutKeys(g.rolloutsOf(ctx, e.obj, func(*v1alpha1.Rollout) bool { return true }))
}

// rolloutKeys are the keys of ros.
func rolloutKeys(ros []*v1alpha1.Rollout) []types.NamespacedName {
	keys := make([]types.NamespacedName, 0, len(ros))
	for _, ro := range ros {
		keys = append(keys, client.ObjectKeyFromObject(ro))
	}
	return keys
}
