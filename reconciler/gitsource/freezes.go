package gitsource

import (
	"context"
	"errors"
	"fmt"

	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/strategy/freeze"
)

// introducedWithin bounds the walk back through the tracked branch for
// the commit that brought a freeze.
const introducedWithin = 1000

// Freezes is a Repository's freezes file (spec.freezes.path) as read at
// one head of its tracked branch.
type Freezes struct {
	// Parsed says which freezes and windows hold a Rollout.
	Parsed *freeze.Parsed
	// Commit is the head it was read at.
	Commit string
	// MergedBy says, per freeze, which commit of the tracked branch
	// brought it and who authored that commit (on a branch changed by
	// merging pull requests, who merged it), or why that is not known.
	MergedBy map[string]string
}

// Freezes reads the freezes file at the head of the tracked branch the
// gates read (see gateManifest), once per head. Without spec.freezes it
// returns nil. A missing file, or one that does not parse, is an error
// naming the field and the fix: the caller holds every release on it.
func (e *Repo) Freezes(ctx context.Context) (*Freezes, error) {
	if e.spec.Freezes == nil {
		return nil, nil
	}
	path := e.spec.Freezes.Path
	snap, data, err := e.gateManifest(e.branch, path)
	if err != nil {
		if errors.Is(err, gitsync.ErrFileNotFound) {
			return nil, fmt.Errorf("the Repository's spec.freezes.path %s is not on branch %s of %s: add it (an empty file freezes nothing) or remove spec.freezes",
				path, e.branch, e.clone)
		}
		e.markStale()
		return nil, fmt.Errorf("reading the freezes file %s from %s of %s: %w", path, e.branch, e.clone, err)
	}
	e.mu.Lock()
	cached := e.freezes
	e.mu.Unlock()
	if cached != nil && cached.Commit == snap.Commit {
		return cached, nil
	}
	parsed, err := freeze.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("the freezes file %s (spec.freezes.path) at %s of %s %v; fix it with a merge",
			path, shortHash(snap.Commit), e.branch, err)
	}
	f := &Freezes{Parsed: parsed, Commit: snap.Commit, MergedBy: e.mergedBy(ctx, snap, path, parsed)}
	e.mu.Lock()
	e.freezes = f
	e.mu.Unlock()
	return f, nil
}

// mergedBy finds, in the history copy, the commit that brought each
// freeze of parsed into path.
func (e *Repo) mergedBy(ctx context.Context, snap *gitsync.Snapshot, path string, parsed *freeze.Parsed) map[string]string {
	out := map[string]string{}
	names := parsed.FreezeNames()
	if len(names) == 0 {
		return out
	}
	if h, err := e.history.Head(snap.Branch); err != nil || h != snap.Commit {
		if err := e.history.Fetch(ctx, snap.Branch); err != nil {
			for _, n := range names {
				out[n] = "who merged it is unknown: fetching the history failed"
			}
			return out
		}
	}
	for _, n := range names {
		in, err := e.history.Introduced(snap.Commit, path, func(data []byte) bool {
			p, err := freeze.Parse(data)
			return err == nil && p.Declares(n)
		}, introducedWithin)
		if err != nil {
			out[n] = fmt.Sprintf("who merged it is unknown (%v)", err)
			continue
		}
		out[n] = fmt.Sprintf("merged in %s by %s", shortHash(in.Commit), in.Author)
	}
	return out
}

func shortHash(h string) string {
	if len(h) > 7 {
		return h[:7]
	}
	return h
}
