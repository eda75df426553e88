package gitsync

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// Checkout is a local Git working copy, read at any commit (for `rollgate
// plan --base`): nothing is fetched or written.
type Checkout struct {
	root string
	repo *git.Repository
}

// OpenCheckout opens the working copy that holds dir (dir or one of its
// parents has the .git folder).
func OpenCheckout(dir string) (*Checkout, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	r, err := git.PlainOpenWithOptions(abs, &git.PlainOpenOptions{DetectDotGit: true, EnableDotGitCommonDir: true})
	if err != nil {
		return nil, fmt.Errorf("%s is not inside a Git working copy: %w", dir, err)
	}
	wt, err := r.Worktree()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return &Checkout{root: wt.Filesystem.Root(), repo: r}, nil
}

// Root is the top folder of the working copy.
func (c *Checkout) Root() string { return c.root }

// Tree returns the files of the commit ref names (a branch, tag, commit
// hash or anything `git rev-parse` takes that go-git resolves, such as
// origin/main or HEAD~1).
func (c *Checkout) Tree(ref string) (*object.Tree, error) {
	h, err := c.repo.ResolveRevision(plumbing.Revision(ref))
	if err != nil {
		return nil, fmt.Errorf("--base %s: %w (fetch it first, e.g. git fetch origin main)", ref, err)
	}
	commit, err := c.repo.CommitObject(*h)
	if err != nil {
		return nil, fmt.Errorf("--base %s: %w", ref, err)
	}
	return commit.Tree()
}

// ReadFileAt returns the file at path (relative to Root, or absolute
// inside it) in tree, or an error wrapping ErrFileNotFound.
func (c *Checkout) ReadFileAt(tree *object.Tree, path string) ([]byte, error) {
	if filepath.IsAbs(path) {
		rel, err := filepath.Rel(c.root, path)
		if err != nil || strings.HasPrefix(rel, "..") {
			return nil, fmt.Errorf("%s is outside the working copy %s", path, c.root)
		}
		path = rel
	}
	f, err := tree.File(filepath.ToSlash(path))
	if errors.Is(err, object.ErrFileNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrFileNotFound, path)
	}
	if err != nil {
		return nil, err
	}
	s, err := f.Contents()
	return []byte(s), err
}
