package gitsync

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// Introduction is the commit of a branch that brought something into a
// file: on a branch changed by merging pull requests, the merge, whose
// author is whoever merged it.
type Introduction struct {
	Commit string
	Author string // "Name <email>"
	When   time.Time
}

// ErrNotIntroducedWithin says the walk of Introduced reached its limit
// (or the start of a shallow copy) with the thing still present.
var ErrNotIntroducedWithin = errors.New("present in every commit walked")

// Introduced walks the first parents of commit (a commit of this copy,
// which must hold the branch's history: a shallow copy ends the walk
// early) and returns the oldest commit of the unbroken run, from commit
// back, in which present says yes of file: the commit that brought it.
// present is asked once per distinct version of the file. The walk stops
// after limit commits with ErrNotIntroducedWithin.
func (r *Repository) Introduced(commit, file string, present func(data []byte) bool, limit int) (Introduction, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := r.repo.CommitObject(plumbing.NewHash(commit))
	if err != nil {
		return Introduction{}, fmt.Errorf("reading commit %s: %w", commit, err)
	}
	seen := map[plumbing.Hash]bool{}
	has := func(c *object.Commit) (bool, error) {
		h, ok, err := fileHash(c, file)
		if err != nil || !ok {
			return false, err
		}
		if v, ok := seen[h]; ok {
			return v, nil
		}
		data, err := r.blob(h)
		if err != nil {
			return false, err
		}
		seen[h] = present(data)
		return seen[h], nil
	}
	if ok, err := has(c); err != nil || !ok {
		return Introduction{}, fmt.Errorf("%s at %s: not present (%v)", file, commit, err)
	}
	for n := 1; ; n++ {
		if n > limit || len(c.ParentHashes) == 0 {
			if len(c.ParentHashes) == 0 {
				return introduction(c), nil // the branch's first commit
			}
			return Introduction{}, fmt.Errorf("%s: %w (%d)", file, ErrNotIntroducedWithin, limit)
		}
		parent, err := r.repo.CommitObject(c.ParentHashes[0])
		if err != nil {
			return Introduction{}, fmt.Errorf("%s: %w (the copy ends at %s)", file, ErrNotIntroducedWithin, c.Hash.String()[:10])
		}
		ok, err := has(parent)
		if err != nil {
			return Introduction{}, err
		}
		if !ok {
			return introduction(c), nil
		}
		c = parent
	}
}

func introduction(c *object.Commit) Introduction {
	return Introduction{Commit: c.Hash.String(), Author: fmt.Sprintf("%s <%s>", c.Author.Name, c.Author.Email), When: c.Author.When}
}

func (r *Repository) blob(h plumbing.Hash) ([]byte, error) {
	b, err := r.repo.BlobObject(h)
	if err != nil {
		return nil, err
	}
	rd, err := b.Reader()
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	return io.ReadAll(rd)
}
