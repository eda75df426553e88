package gitsource

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sync"
	"time"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
)

// fleetCache holds the status files of every cluster on a Repository's
// status branch, as last fetched.
type fleetCache struct {
	mu     sync.Mutex
	at     time.Time
	head   string
	states map[string]FleetStatus
}

// fleetStates returns the status files of every cluster on e's status
// branch (or under its status path), fetching it at most once per
// interval for all the Rollouts of the Repository.
func (g *Pool) fleetStates(ctx context.Context, e *Repo, now time.Time) (map[string]FleetStatus, error) {
	c := &e.fleet
	c.mu.Lock()
	defer c.mu.Unlock()
	branch := e.statusBranch
	if c.states != nil && now.Sub(c.at) < g.interval(e) {
		return c.states, nil
	}
	var err error
	if branch == e.branch {
		// Status next to the manifests: the tracked branch's fetch wakes
		// gated Rollouts; go through it.
		err = g.fetchIfDue(ctx, e, branch, now)
	} else {
		err = e.clone.Fetch(ctx, branch)
	}
	if errors.Is(err, gitsync.ErrBranchNotFound) {
		return nil, fmt.Errorf("the status branch %s is not on the remote (deleted?); the gates hold until the clusters' controllers write it again: %w", branch, err)
	}
	if err != nil {
		return nil, err
	}
	snap, err := e.clone.LocalSnapshot(branch)
	if err != nil {
		return nil, fmt.Errorf("reading %s of %s: %w", branch, e.clone, err)
	}
	if c.states != nil && snap.Commit == c.head {
		c.at = now
		return c.states, nil
	}
	// A status file that cannot be parsed counts as absent: its gate stays
	// closed, the others are judged.
	states, err := gitsync.ClusterStates(snap, e.spec.Status.Path)
	if states == nil {
		return nil, fmt.Errorf("reading status files from %s of %s: %w", branch, e.clone, err)
	}
	c.at, c.head, c.states = now, snap.Commit, e.judgeTrust(snap, states)
	return c.states, nil
}

// statusPrefix is where the Repository's status files go: under
// spec.status.path, then spec.status.cluster.
func statusPrefix(spec v1alpha1.RepositorySpec) string {
	return path.Join(spec.Status.Path, spec.Status.Cluster)
}
