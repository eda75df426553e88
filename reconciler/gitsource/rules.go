package gitsource

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/strategy/rules"
)

// introducedWithin bounds the walk back through the tracked branch for
// the commit that brought a freeze.
const introducedWithin = 1000

// Rules is a Repository's release rules file (spec.releaseRules.path) as read at
// one head of its tracked branch.
type Rules struct {
	// Parsed says which freezes and windows hold a Rollout.
	Parsed *rules.Parsed
	// Commit is the head it was read at.
	Commit string
	// MergedBy says, per freeze, which commit of the tracked branch
	// brought it and who authored that commit (on a branch changed by
	// merging pull requests, who merged it), or why that is not known.
	MergedBy map[string]string
	// data is the file as read.
	data []byte
}

// Rules reads the release rules file at the head of the tracked branch the
// gates read (see gateManifest), once per head. Without spec.releaseRules it
// returns nil. A missing file, or one that does not parse, is an error
// naming the field and the fix: the caller holds every release on it.
func (e *Repo) Rules(ctx context.Context) (*Rules, error) {
	if e.spec.ReleaseRules == nil {
		return nil, nil
	}
	path := e.spec.ReleaseRules.Path
	snap, data, err := e.gateManifest(e.branch, path)
	if err != nil {
		if errors.Is(err, gitsync.ErrFileNotFound) {
			return nil, fmt.Errorf("the Repository's spec.releaseRules.path %s is not on branch %s of %s: add it (an empty file holds nothing) or remove spec.releaseRules",
				path, e.branch, e.clone)
		}
		e.markStale()
		return nil, fmt.Errorf("reading the release rules file %s from %s of %s: %w", path, e.branch, e.clone, err)
	}
	e.mu.Lock()
	cached := e.rules
	e.mu.Unlock()
	if cached != nil && cached.Commit == snap.Commit {
		return cached, nil
	}
	if cached != nil && bytes.Equal(cached.data, data) {
		// The same file at a new head (a status commit into the tracked
		// branch, another app's merge): the branch moved forward past the
		// commits that brought each freeze, which stay the same, so the
		// history is not walked again. (After a force push that rewrote
		// them, the message names the old commit until the file changes.)
		f := *cached
		f.Commit = snap.Commit
		e.mu.Lock()
		e.rules = &f
		e.mu.Unlock()
		return &f, nil
	}
	parsed, err := rules.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("the release rules file %s (spec.releaseRules.path) at %s of %s %v; fix it with a merge",
			path, shortHash(snap.Commit), e.branch, err)
	}
	f := &Rules{Parsed: parsed, Commit: snap.Commit, MergedBy: e.mergedBy(ctx, snap, path, parsed), data: data}
	e.mu.Lock()
	e.rules = f
	e.mu.Unlock()
	return f, nil
}

// mergedBy finds, in the history copy, the commit that brought each
// freeze of parsed into path.
func (e *Repo) mergedBy(ctx context.Context, snap *gitsync.Snapshot, path string, parsed *rules.Parsed) map[string]string {
	out := map[string]string{}
	names := parsed.FreezeNames()
	if len(names) == 0 {
		return out
	}
	if err := e.historyHolds(ctx, snap); err != nil {
		for _, n := range names {
			out[n] = "who merged it is unknown: " + err.Error()
		}
		return out
	}
	for _, n := range names {
		in, err := e.history.Introduced(snap.Commit, path, func(data []byte) bool {
			p, err := rules.Parse(data)
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
