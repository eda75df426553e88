package gitsource

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rollgate/rollgate/gitsync"
)

// Cleaning up revert branches (gitsync.CleanupRevertBranches deletes the
// revert branches of a Rollout whose change the tracked branch holds).
// The Rollout controller asks for it when a release of the Rollout has
// ended (Completed, or RolledBack) — see rollout.cleanupReverts for
// why then — naming the occasion; each occasion is served once, in the
// background, so neither the reconcile nor the release waits for Git.
// A cleanup that failed is logged and tried again at the next ask, at
// most once a revertCleanupRetry; it never deletes anything it did not
// judge merged, so a late or repeated run is harmless.

// revertCleanupRetry is the least time between two tries of one occasion.
const revertCleanupRetry = time.Minute

// revertCleanupTimeout bounds one cleanup (a listing, a fetch of the
// tracked branch, one of the revert tips, a push).
const revertCleanupTimeout = 4 * gitsync.DefaultTimeout

// revertCleanupState is what was done for a Rollout.
type revertCleanupState struct {
	done    string // the occasion last served
	running bool
	failed  time.Time // when the last try of an unserved occasion failed
}

// revertCleanups holds a Repo's revertCleanupState per Rollout: one entry
// per Rollout that ended a release on the repository, dropped when the
// Rollout is deleted (forget).
type revertCleanups struct {
	mu sync.Mutex
	m  map[types.NamespacedName]*revertCleanupState
}

// forget drops what was done for the Rollout key.
func (c *revertCleanups) forget(key types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, key)
}

// CleanupReverts deletes, in the background, the revert branches of
// Rollout key whose change tracked holds, once per occasion (a string
// the caller changes when there is reason to look again). Outcomes and
// failures go to log.
func (e *Repo) CleanupReverts(log logr.Logger, key types.NamespacedName, tracked, occasion string) {
	c := &e.reverts
	c.mu.Lock()
	if c.m == nil {
		c.m = map[types.NamespacedName]*revertCleanupState{}
	}
	st := c.m[key]
	if st == nil {
		st = &revertCleanupState{}
		c.m[key] = st
	}
	if st.running || st.done == occasion || (!st.failed.IsZero() && time.Since(st.failed) < revertCleanupRetry) {
		c.mu.Unlock()
		return
	}
	st.running = true
	c.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), revertCleanupTimeout)
		defer cancel()
		// The writes clone pushes (approval branches, status): a cleanup
		// never holds up a fetch of the gates' clone.
		res, err := gitsync.CleanupRevertBranches(ctx, e.writes, key.Namespace, key.Name, tracked)
		c.mu.Lock()
		st.running = false
		if err != nil {
			st.failed = time.Now()
		} else {
			st.done, st.failed = occasion, time.Time{}
		}
		c.mu.Unlock()
		log = log.WithValues("repository", e.String(), "rollout", key.String())
		if err != nil {
			log.Error(err, "cleaning up revert branches; tried again at the next occasion")
			return
		}
		if len(res.Deleted) > 0 || len(res.Kept) > 0 {
			log.Info("revert branches cleaned up", "deleted", res.Deleted, "kept (not merged)", res.Kept)
		}
	}()
}
