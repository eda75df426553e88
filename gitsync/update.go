package gitsync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// Snapshot is a read-only view of a branch head.
type Snapshot struct {
	// Branch is the branch name.
	Branch string
	// Commit is the head commit, or "" when the branch does not exist.
	Commit string

	commit *object.Commit
	tree   *object.Tree
	// dirs caches the subtrees looked up by directory path ("" is the
	// root): go-git decodes a directory again on every lookup of a file
	// one level down, which made comparing a thousand status files with
	// the head cost more than the race it runs in. Guarded by lock.
	dirs map[string]*object.Tree
	// lock guards reads from the shared object store; nil while the
	// Repository lock is already held (inside Update).
	lock sync.Locker
	// repo and store let a failed read mark the store damaged (see
	// Repository.noteDamage), unless it was replaced since.
	repo  *Repository
	store *git.Repository
}

// noteDamage is Repository.noteDamage for reads of s. Caller holds the
// Repository lock.
func (s *Snapshot) noteDamage(err error) error {
	if s.repo != nil && s.store == s.repo.repo && !errors.Is(err, ErrFileNotFound) {
		s.repo.noteDamage(err)
	}
	return err
}

// Exists reports whether the branch exists.
func (s *Snapshot) Exists() bool { return s.tree != nil }

func (s *Snapshot) acquire() func() {
	if s.lock == nil {
		return func() {}
	}
	s.lock.Lock()
	return s.lock.Unlock
}

// ReadFile returns the content of path, or ErrFileNotFound.
func (s *Snapshot) ReadFile(path string) ([]byte, error) {
	p, err := cleanPath(path)
	if err != nil {
		return nil, err
	}
	defer s.acquire()()
	dir, name := splitDir(p)
	t, err := s.subtree(dir)
	if err != nil {
		return nil, s.noteDamage(err)
	}
	data, err := readBlob(t, name)
	switch {
	case errors.Is(err, ErrFileNotFound):
		err = fmt.Errorf("%w: %s", ErrFileNotFound, p)
	case err != nil && dir != "":
		err = fmt.Errorf("%s: %w", dir, err)
	}
	return data, s.noteDamage(err)
}

// splitDir splits a clean path into its directory ("" at the root) and
// base name.
func splitDir(p string) (dir, name string) {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i], p[i+1:]
	}
	return "", p
}

// subtree returns the tree of directory dir (a clean path, "" for the
// root), nil when the snapshot has no such directory. Caller holds the
// lock.
func (s *Snapshot) subtree(dir string) (*object.Tree, error) {
	if dir == "" || s.tree == nil {
		return s.tree, nil
	}
	if t, ok := s.dirs[dir]; ok {
		return t, nil
	}
	parentDir, name := splitDir(dir)
	parent, err := s.subtree(parentDir)
	if err != nil || parent == nil {
		return nil, err
	}
	var t *object.Tree
	if e, ferr := parent.FindEntry(name); ferr == nil && e.Mode == filemode.Dir {
		if t, err = parent.Tree(name); errors.Is(err, object.ErrDirectoryNotFound) {
			// The tree lists the directory, but its tree is not in the store.
			return nil, fmt.Errorf("reading %s: %w", dir, plumbing.ErrObjectNotFound)
		} else if err != nil {
			return nil, err
		}
	}
	if s.dirs == nil {
		s.dirs = map[string]*object.Tree{}
	}
	s.dirs[dir] = t
	return t, nil
}

// Files lists the regular files under dir ("" for all), sorted.
func (s *Snapshot) Files(dir string) ([]string, error) {
	if s.tree == nil {
		return nil, nil
	}
	defer s.acquire()()
	t := s.tree
	prefix := ""
	if d := strings.Trim(dir, "/"); d != "" {
		sub, err := t.Tree(d)
		if err != nil {
			return nil, nil
		}
		t, prefix = sub, d+"/"
	}
	// Walk the tree entries only: listing needs no blob.
	var out []string
	w := object.NewTreeWalker(t, true, nil)
	defer w.Close()
	var err error
	for {
		name, e, werr := w.Next()
		if werr == io.EOF {
			break
		}
		if werr != nil {
			err = werr
			break
		}
		if e.Mode.IsFile() {
			out = append(out, prefix+name)
		}
	}
	sort.Strings(out)
	return out, s.noteDamage(err)
}

// statusTree returns the tree of directory dir ("" for the root), nil
// when the branch or the directory does not exist.
func (s *Snapshot) statusTree(dir string) (*object.Tree, error) {
	p := strings.Trim(dir, "/")
	if p != "" {
		c, err := cleanPath(p)
		if err != nil {
			return nil, err
		}
		p = c
	}
	defer s.acquire()()
	return s.subtree(p)
}

// blobHash returns the hash of the file at path and whether the tree lists
// a file there; comparing it with blobHashOf(data) tells whether the file
// holds data without reading the blob.
func (s *Snapshot) blobHash(path string) (plumbing.Hash, bool) {
	p, err := cleanPath(path)
	if err != nil || s.tree == nil {
		return plumbing.ZeroHash, false
	}
	defer s.acquire()()
	dir, name := splitDir(p)
	t, err := s.subtree(dir)
	if err != nil || t == nil {
		return plumbing.ZeroHash, false
	}
	e, err := t.FindEntry(name)
	if err != nil || !e.Mode.IsFile() {
		return plumbing.ZeroHash, false
	}
	return e.Hash, true
}

// blobHashOf is the Git object hash of a file holding data.
func blobHashOf(data []byte) plumbing.Hash {
	return plumbing.ComputeHash(plumbing.BlobObject, data)
}

// Change is the content of one commit.
type Change struct {
	// Files maps a repository path to its new content; nil deletes it.
	// Files whose content is unchanged are dropped.
	Files map[string][]byte
	// Message is the commit message.
	Message string
	// Author of the commit; zero means the rollgate default.
	Author Signature
}

// BuildFunc derives a Change from the head it will be committed on. It is
// called again with the new head after a rejected push, so it must compute
// the change from its inputs and base; it may return the previous call's
// Change, unmodified, when the new head left everything it reads alone,
// and the directories the new head left alone are then not written again.
// A nil Change means there is nothing to write. The Snapshot is valid only
// during the call.
type BuildFunc func(base *Snapshot) (*Change, error)

// UpdateRequest says where a commit goes.
type UpdateRequest struct {
	// Branch receives the commit.
	Branch string
	// From is the branch whose head the commit is built on; "" means
	// Branch. When From differs from Branch, Branch is replaced by the new
	// commit, as for a proposal branch rebuilt on the tracked branch. Either
	// way the push succeeds only if Branch is still where it was fetched.
	From string
	// CreateOrphan allows creating Branch as an orphan (no parent) when
	// From does not exist. Otherwise a missing From is ErrBranchNotFound.
	CreateOrphan bool
	// RetryAtOnce retries a push that lost a race at once instead of
	// after Options.RetryBackoff: for a writer racing another that pushes
	// several times a second, whose next push comes the sooner the longer
	// this one waits. Attempts stay bounded by Options.PushAttempts. A
	// large change is pushed on a head fetched after its upload to the
	// staging ref, and when every attempt lost, the staging ref is left for
	// the next Update, whose upload then sends only what changed.
	RetryAtOnce bool
}

// UpdateResult describes a completed write.
type UpdateResult struct {
	// Commit is the new commit, or the current head of Branch when nothing
	// changed.
	Commit string
	// Changed lists the paths the commit changed; empty when no commit was
	// made.
	Changed []string
	// Attempts is the number of fetch-build-push cycles used.
	Attempts int
}

// Update writes one commit to req.Branch: fetch, build on the fresh head,
// commit, push. When the push loses a race with another writer, it fetches
// the new head and calls build again on top of it, up to PushAttempts
// times with exponential backoff: the other writer's commit is kept and so
// is ours. The returned error wraps ErrNonFastForward when every attempt
// lost.
func (r *Repository) Update(ctx context.Context, req UpdateRequest, build BuildFunc) (UpdateResult, error) {
	if req.From == "" {
		req.From = req.Branch
	}
	repaired := false
	staged, keepStaged := false, false
	memo := &updateMemo{}
	defer func() {
		if staged && !keepStaged {
			r.unstage(ctx, req.Branch)
		}
	}()
	for attempt := 1; ; attempt++ {
		res, err := r.tryUpdate(ctx, req, build, &staged, memo)
		if errors.Is(err, errStaged) {
			// The upload took a while: the push is built on the head as
			// it is now. Not an attempt: nothing was pushed to Branch.
			attempt--
			memo.moved = req.From == req.Branch
			continue
		}
		res.Attempts = attempt
		if err != nil && !repaired && r.isDamaged() {
			// The local copy is damaged: the next attempt drops it and
			// fetches afresh, at once.
			repaired = true
			continue
		}
		if err == nil || !errors.Is(err, ErrNonFastForward) || attempt >= r.attempts() {
			if err != nil && errors.Is(err, ErrNonFastForward) {
				err = fmt.Errorf("%w (after %d attempts)", err, attempt)
				// The writer tries again soon: its next upload then
				// sends only what changed.
				keepStaged = req.RetryAtOnce
			}
			return res, err
		}
		if req.RetryAtOnce {
			if err := ctx.Err(); err != nil {
				return res, r.red.wrap("pushing to "+req.Branch, err)
			}
			memo.moved = req.From == req.Branch
			continue
		}
		t := time.NewTimer(r.backoff(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return res, r.red.wrap("pushing to "+req.Branch, ctx.Err())
		case <-t.C:
		}
	}
}

// isDamaged reports whether the local store was found damaged.
func (r *Repository) isDamaged() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.damaged
}

// errStaged ends an attempt of a RetryAtOnce Update that has just
// uploaded its change to the staging ref: the push follows on a fresh
// head, since the upload may have taken longer than other writers wait
// between their pushes.
var errStaged = errors.New("change staged")

// updateMemo carries the trees written by one attempt of Update to the
// next, while the build returns the same Change on the same store.
type updateMemo struct {
	change *Change
	store  *git.Repository
	trees  treeMemo
	// moved is set when the branch was just found moved by a refused
	// push: the next fetch need not list the remote first.
	moved bool
}

// forChange returns the tree memo for change on the current store. Caller holds
// r.mu.
func (m *updateMemo) forChange(r *Repository, change *Change) treeMemo {
	if m.change != change || m.store != r.repo || m.trees == nil {
		m.change, m.store, m.trees = change, r.repo, treeMemo{}
	}
	return m.trees
}

// tryUpdate runs one fetch-build-commit-push cycle.
func (r *Repository) tryUpdate(ctx context.Context, req UpdateRequest, build BuildFunc, staged *bool, memo *updateMemo) (UpdateResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var heads map[string]plumbing.Hash
	var err error
	if memo.moved {
		memo.moved = false
		heads, err = r.refetch(ctx, req.Branch)
	} else {
		heads, err = r.fetch(ctx, unique(req.From, req.Branch)...)
	}
	if err != nil {
		return UpdateResult{}, r.red.wrap("fetching "+req.Branch+" from "+r.safeURL, err)
	}
	base, err := r.snapshot(req.From, heads)
	if err != nil {
		return UpdateResult{}, r.red.wrap("reading "+req.From, err)
	}
	if !base.Exists() && !req.CreateOrphan {
		return UpdateResult{}, fmt.Errorf("%w: %s on %s", ErrBranchNotFound, req.From, r.safeURL)
	}
	change, err := build(base)
	if err != nil {
		return UpdateResult{}, r.noteDamage(err)
	}
	res := UpdateResult{Commit: base.Commit}
	if change == nil {
		return res, nil
	}
	changes, err := r.effectiveChanges(base, change.Files)
	if err != nil || len(changes) == 0 {
		return res, err
	}
	commit, err := r.commitChanges(base, changes, change, memo.forChange(r, change))
	if err != nil {
		return res, r.red.wrap("committing to "+req.Branch, r.noteDamage(err))
	}
	var expected *plumbing.Hash
	if h, ok := heads[req.Branch]; ok {
		expected = &h
	}
	if !*staged && len(changes) >= stageThreshold {
		if err := r.stage(ctx, req.Branch, commit); err != nil {
			return res, r.red.wrap("staging "+req.Branch+" on "+r.safeURL, r.noteDamage(err))
		}
		*staged = true
		if req.RetryAtOnce {
			return res, errStaged
		}
	}
	if err := r.push(ctx, req.Branch, commit, expected); err != nil {
		return res, r.red.wrap("pushing "+req.Branch+" to "+r.safeURL, r.noteDamage(err))
	}
	r.maybeReset()
	res.Commit = commit.String()
	for p := range changes {
		res.Changed = append(res.Changed, p)
	}
	sort.Strings(res.Changed)
	return res, nil
}

// effectiveChanges cleans paths and drops files identical to base.
func (r *Repository) effectiveChanges(base *Snapshot, files map[string][]byte) (map[string][]byte, error) {
	out := map[string][]byte{}
	for p, data := range files {
		cp, err := cleanPath(p)
		if err != nil {
			return nil, err
		}
		old, exists := base.blobHash(cp)
		switch {
		case data == nil && !exists:
			continue
		case data != nil && exists && old == blobHashOf(data):
			continue
		}
		out[cp] = data
	}
	return out, nil
}

// commitChanges writes the tree and commit for changes on top of base.
func (r *Repository) commitChanges(base *Snapshot, changes map[string][]byte, change *Change, memo treeMemo) (plumbing.Hash, error) {
	st := r.repo.Storer
	tree, _, err := buildTree(st, base.tree, changes, "", memo)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	var parents []plumbing.Hash
	if base.commit != nil {
		parents = []plumbing.Hash{base.commit.Hash}
	}
	msg := r.red.text(change.Message)
	if !strings.HasSuffix(msg, "\n") {
		msg += "\n"
	}
	return writeCommit(st, tree, parents, change.Author.orDefault(), msg, r.now(), r.opts.Signer)
}

// push sets the local branch to commit and pushes it, as a compare-and-swap:
// with expected, the remote branch is updated only if it is still at
// *expected (a lease, checked against the server's advertisement and again
// by the server itself); without, only if it still does not exist. This
// needs no history walk, so it works on shallow copies. Caller holds r.mu.
func (r *Repository) push(ctx context.Context, branch string, commit plumbing.Hash, expected *plumbing.Hash) error {
	local := plumbing.NewBranchReferenceName(branch)
	if err := r.repo.Storer.SetReference(plumbing.NewHashReference(local, commit)); err != nil {
		return err
	}
	opts := &git.PushOptions{
		RemoteName: remoteName,
		RefSpecs:   []config.RefSpec{config.RefSpec(local.String() + ":" + local.String())},
		Auth:       r.auth,
		CABundle:   r.opts.Credentials.caBundleData(),
	}
	if expected != nil {
		opts.ForceWithLease = &git.ForceWithLease{RefName: local, Hash: *expected}
	}
	ctx, cancel := r.netContext(ctx)
	defer cancel()
	start := time.Now()
	err := r.repo.PushContext(ctx, opts)
	switch {
	case errors.Is(err, git.NoErrAlreadyUpToDate):
		err = nil
	case expected == nil && errors.Is(err, plumbing.ErrObjectNotFound):
		// The branch appeared since the fetch and go-git's fast-forward
		// check walked into history a shallow copy lacks.
		err = fmt.Errorf("%w: %s was created concurrently", ErrNonFastForward, branch)
	}
	r.observe(OpPush, start, err)
	if err != nil {
		return err
	}
	return r.repo.Storer.SetReference(plumbing.NewHashReference(trackingRef(branch), commit))
}

// unique returns its arguments without duplicates, in order.
func unique(xs ...string) []string {
	var out []string
	for _, x := range xs {
		dup := false
		for _, o := range out {
			dup = dup || o == x
		}
		if !dup {
			out = append(out, x)
		}
	}
	return out
}

// stageThreshold is the size of a change (files) that Update first
// uploads to a staging ref: see stage.
const stageThreshold = 64

// stagingRef is the ref a large change of branch is uploaded to before
// the push to branch itself. It is not a branch: forges and GitOps tools
// do not list it.
func stagingRef(branch string) plumbing.ReferenceName {
	return plumbing.ReferenceName("refs/rollgate/staging/" + branch)
}

// stage uploads commit and its objects to branch's staging ref (forced:
// only this writer uses it). The push to branch that follows then sends
// only the objects the server lacks — the commit and a few trees, also
// when it is rebuilt on a head another writer moved — so it is short
// enough to win against a writer pushing several times a second, where
// uploading every file of a large change again on each attempt would
// lose every race. Caller holds r.mu.
func (r *Repository) stage(ctx context.Context, branch string, commit plumbing.Hash) error {
	ref := stagingRef(branch)
	if err := r.repo.Storer.SetReference(plumbing.NewHashReference(ref, commit)); err != nil {
		return err
	}
	ctx, cancel := r.netContext(ctx)
	defer cancel()
	start := time.Now()
	err := r.repo.PushContext(ctx, &git.PushOptions{
		RemoteName: remoteName,
		RefSpecs:   []config.RefSpec{config.RefSpec("+" + ref.String() + ":" + ref.String())},
		Auth:       r.auth,
		CABundle:   r.opts.Credentials.caBundleData(),
	})
	if errors.Is(err, git.NoErrAlreadyUpToDate) {
		err = nil
	}
	r.observe(OpPush, start, err)
	return err
}

// unstage deletes branch's staging ref, remote and local; best effort (a
// leftover ref holds objects the branch has anyway, and the next stage
// overwrites it).
func (r *Repository) unstage(ctx context.Context, branch string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ref := stagingRef(branch)
	ctx, cancel := r.netContext(context.WithoutCancel(ctx))
	defer cancel()
	_ = r.repo.PushContext(ctx, &git.PushOptions{
		RemoteName: remoteName,
		RefSpecs:   []config.RefSpec{config.RefSpec(":" + ref.String())},
		Auth:       r.auth,
		CABundle:   r.opts.Credentials.caBundleData(),
	})
	_ = r.repo.Storer.RemoveReference(ref)
}
