package gitsync

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"
)

// Cleaning up revert branches. A failed release leaves a revert branch
// (RevertBranch) for a user to merge, and nothing else removes it: a year
// of releases left dozens. CleanupRevertBranches deletes the revert
// branches of one Rollout whose change is already in the tracked branch,
// and only those:
//
//   - the tip of the branch is rollgate's own revert commit (its message
//     starts "rollgate: revert "), with one parent: a branch a user added
//     commits to is kept, as it holds more than the revert;
//   - for every file that commit changed (tip against its parent), the
//     tracked branch's head holds exactly the tip's content (a file the
//     commit removed is absent there too).
//
// This asks nothing of history, which the shallow clones do not have, and
// holds however the revert reached the tracked branch: a merge commit, a
// squash or a rebase, or the same edit made by hand. It is the same
// answer in every cluster that writes to the repository (spec.fleet,
// where the branch name, which carries only namespace, name and
// revision, is shared), because it reads only Git. A revert that was not
// merged differs from the tracked branch in the very files it changes
// (it was computed from that branch and pushed only when it changed
// something), so it is kept whenever the cleanup runs; the one exception
// is a tracked branch that was given the same content another way, and
// then the revert has nothing left to propose.
//
// A branch is deleted only at the commit that was judged: the deletion
// requires the remote branch to still point there (the push carries the
// old value, which the server compares), so a revert pushed again under
// the same name meanwhile is not taken with it.
//
// The tips and their parents are fetched into a throwaway in-memory store
// at depth 2: the Repository's own clone stays as shallow as it was.
//
// Kept branches are bounded: at most one per failed revision whose revert
// was not merged (or was merged and then changed again, in the same file,
// before a cleanup saw it).

// revertSubject starts the message of every revert commit (revertMessage).
const revertSubject = "rollgate: revert "

// RevertCleanup is the outcome of CleanupRevertBranches.
type RevertCleanup struct {
	// Deleted lists the branches deleted: their change is in the tracked
	// branch.
	Deleted []string
	// Kept lists the branches left: not merged (or not rollgate's commit
	// at their tip).
	Kept []string
}

// CleanupRevertBranches deletes the revert branches of Rollout
// namespace/name whose change the head of tracked already holds (see
// above), and says which it deleted and which it kept. It reads the
// head of tracked through repo (fetching it). With no revert branch it
// costs one listing of the remote.
func CleanupRevertBranches(ctx context.Context, repo *Repository, namespace, name, tracked string) (RevertCleanup, error) {
	var out RevertCleanup
	branches, err := repo.Branches(ctx, RevertBranchesOf(namespace, name))
	if err != nil || len(branches) == 0 {
		return out, err
	}
	snap, err := repo.Snapshot(ctx, tracked)
	if err != nil {
		return out, err
	}
	if !snap.Exists() {
		return out, fmt.Errorf("%w: %s", ErrBranchNotFound, tracked)
	}
	names := make([]string, 0, len(branches))
	for b := range branches {
		names = append(names, b)
	}
	sort.Strings(names)
	tips, err := repo.fetchTips(ctx, names)
	if err != nil {
		return out, err
	}
	merged := map[string]string{}
	for _, b := range names {
		h, ok := tips[b]
		if !ok {
			continue // deleted since the listing
		}
		in, err := revertIn(snap, h)
		if err != nil {
			return out, fmt.Errorf("judging %s: %w", b, err)
		}
		if in {
			merged[b] = h.Hash.String()
			out.Deleted = append(out.Deleted, b)
		} else {
			out.Kept = append(out.Kept, b)
		}
	}
	if err := repo.deleteBranchesAt(ctx, merged); err != nil {
		out.Kept = append(out.Kept, out.Deleted...)
		sort.Strings(out.Kept)
		out.Deleted = nil
		return out, err
	}
	return out, nil
}

// revertIn reports whether every file the revert commit c changed has,
// at the head of snap, the content it has at c.
func revertIn(snap *Snapshot, c *object.Commit) (bool, error) {
	if !strings.HasPrefix(c.Message, revertSubject) || c.NumParents() != 1 {
		return false, nil
	}
	parent, err := c.Parent(0)
	if err != nil {
		return false, err
	}
	from, err := parent.Tree()
	if err != nil {
		return false, err
	}
	to, err := c.Tree()
	if err != nil {
		return false, err
	}
	changes, err := object.DiffTree(from, to)
	if err != nil {
		return false, err
	}
	if len(changes) == 0 {
		return false, nil // nothing to tell by
	}
	for _, ch := range changes {
		path := ch.To.Name
		if path == "" {
			path = ch.From.Name
		}
		want, wantOK, err := fileAt(to, path)
		if err != nil {
			return false, err
		}
		have, err := snap.ReadFile(path)
		haveOK := err == nil
		if err != nil && !errors.Is(err, ErrFileNotFound) {
			return false, err
		}
		if wantOK != haveOK || !bytes.Equal(want, have) {
			return false, nil
		}
	}
	return true, nil
}

// fileAt reads path in tree t; ok is false when it is absent.
func fileAt(t *object.Tree, path string) (data []byte, ok bool, err error) {
	f, err := t.File(path)
	if errors.Is(err, object.ErrFileNotFound) || errors.Is(err, object.ErrDirectoryNotFound) || errors.Is(err, object.ErrEntryNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	rd, err := f.Reader()
	if err != nil {
		return nil, false, err
	}
	defer rd.Close()
	data, err = io.ReadAll(rd)
	return data, err == nil, err
}

// tipCommit is a branch tip fetched by fetchTips.
type tipCommit = *object.Commit

// fetchTips fetches the heads of branches and their parents (depth 2)
// into a throwaway in-memory store, with the Repository's URL and
// credentials, and returns the tip commits of the branches that exist.
// The Repository's own store is not touched (nor locked: this may take
// a while on a large repository).
func (r *Repository) fetchTips(ctx context.Context, branches []string) (map[string]tipCommit, error) {
	repo, err := git.Init(memory.NewStorage(), nil)
	if err != nil {
		return nil, err
	}
	remote, err := repo.CreateRemote(&config.RemoteConfig{Name: remoteName, URLs: []string{r.opts.URL}})
	if err != nil {
		return nil, r.red.wrap("", err)
	}
	specs := make([]config.RefSpec, 0, len(branches))
	for _, b := range branches {
		specs = append(specs, config.RefSpec(fmt.Sprintf("+refs/heads/%s:%s", b, trackingRef(b))))
	}
	fctx, cancel := r.netContext(ctx)
	defer cancel()
	start := time.Now()
	err = remote.FetchContext(fctx, &git.FetchOptions{
		RemoteName: remoteName, RefSpecs: specs, Depth: 2, Auth: r.auth,
		Tags: git.NoTags, Force: true, CABundle: r.opts.Credentials.caBundleData(),
	})
	var missing git.NoMatchingRefSpecError
	if errors.Is(err, git.NoErrAlreadyUpToDate) || errors.As(err, &missing) {
		err = nil
	}
	r.mu.Lock()
	r.observe(OpFetch, start, err)
	r.mu.Unlock()
	if err != nil {
		return nil, r.red.wrap("fetching revert branches from "+r.safeURL, err)
	}
	out := map[string]tipCommit{}
	for _, b := range branches {
		ref, err := repo.Storer.Reference(trackingRef(b))
		if err != nil {
			continue
		}
		c, err := repo.CommitObject(ref.Hash())
		if err != nil {
			return nil, err
		}
		out[b] = c
	}
	return out, nil
}

// deleteBranchesAt deletes each branch of at (name to commit) on the
// remote in one push, only if the remote branch still points at that
// commit: a branch that moved meanwhile makes the push fail, and nothing
// is deleted.
func (r *Repository) deleteBranchesAt(ctx context.Context, at map[string]string) error {
	if len(at) == 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	specs := make([]config.RefSpec, 0, len(at))
	require := make([]config.RefSpec, 0, len(at))
	for b, h := range at {
		specs = append(specs, config.RefSpec(":refs/heads/"+b))
		require = append(require, config.RefSpec(h+":refs/heads/"+b))
	}
	ctx, cancel := r.netContext(ctx)
	defer cancel()
	start := time.Now()
	err := r.repo.PushContext(ctx, &git.PushOptions{
		RemoteName: remoteName, RefSpecs: specs, RequireRemoteRefs: require,
		Auth: r.auth, CABundle: r.opts.Credentials.caBundleData(),
	})
	if errors.Is(err, git.NoErrAlreadyUpToDate) {
		err = nil
	}
	r.observe(OpPush, start, err)
	if err == nil {
		for b := range at {
			_ = r.repo.Storer.RemoveReference(trackingRef(b))
			_ = r.repo.Storer.RemoveReference(plumbing.NewBranchReferenceName(b))
		}
	}
	return r.red.wrap("deleting revert branches on "+r.safeURL, err)
}
