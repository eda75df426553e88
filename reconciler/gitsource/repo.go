package gitsource

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/rollgate/rollgate/gitsync"
)

// What a Rollout's reconcile asks of the open repository its spec.git
// names, besides its gate's approvals (Approvals) and the head they are
// read at (Head).

// GateWaits says that a Rollout waits at a gate for an approval merged on
// branch: when branch was not fetched for an interval and
// gatePollMargin, the Repository controller is asked for a check, which
// fetches it (see Pool.gateWaits).
func (e *Repo) GateWaits(branch string, now time.Time) { e.pool.gateWaits(e, branch, now) }

// Propose returns the outcome of proposal p of Rollout key once the
// repository's proposer has pushed its approval branch (ok), and until
// then queues it; the Rollout is woken (Pool.Proposed) when it ends.
func (e *Repo) Propose(key types.NamespacedName, p Proposal) (res Proposed, ok bool) {
	return e.proposer.ask(key, p)
}

// Revert writes the revert req to Git (gitsync.Revert) and wakes the
// gates of what writing it fetched: it fetched the tracked branch, and
// moved it with gitsync.RevertDirect.
func (e *Repo) Revert(ctx context.Context, opts gitsync.RevertOptions, req gitsync.RevertRequest) (gitsync.RevertOutcome, error) {
	out, err := gitsync.Revert(ctx, e.clone, opts, req)
	if err != nil {
		return out, err
	}
	e.pool.wakeIfMoved(ctx, e, opts.TrackedBranch)
	return out, nil
}

// FleetStates returns the status files of every cluster on the status
// branch (or under the status path), keyed "<cluster>/<namespace>/<name>",
// fetched at most once per interval for all the Rollouts of the
// Repository.
func (e *Repo) FleetStates(ctx context.Context, now time.Time) (map[string]FleetStatus, error) {
	return e.pool.fleetStates(ctx, e, now)
}

// Writer is the status writer: progress goes out through QueueProgress,
// and a deleted Rollout's file leaves with Writer().Remove.
func (e *Repo) Writer() *gitsync.Writer { return e.writer }

// StatusBranch is where the writer writes progress; Window how often.
func (e *Repo) StatusBranch() string { return e.statusBranch }

// Window is the writer's coalescing window.
func (e *Repo) Window() time.Duration { return e.window }

// String names the repository (its URL, without credentials).
func (e *Repo) String() string { return e.clone.String() }
