package gitsync

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-billy/v5/osfs"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/memory"
)

const (
	remoteName = "origin"
	// DefaultPushAttempts is how often a write is tried when pushes lose
	// races with other writers.
	DefaultPushAttempts = 6
	// DefaultRetryBackoff is the first wait after a rejected push; it
	// doubles per attempt (with jitter) up to maxRetryBackoff.
	DefaultRetryBackoff = 200 * time.Millisecond
	maxRetryBackoff     = 5 * time.Second
	// DefaultMaxCachedObjects bounds an in-memory store: past it the store is
	// dropped after a write and the next fetch starts afresh.
	DefaultMaxCachedObjects = 200_000
	// DefaultTimeout bounds each exchange with the remote (a listing, a
	// fetch, a push).
	DefaultTimeout = time.Minute
)

// Operation names one kind of exchange with the remote, as reported to
// Options.Observe.
type Operation string

// Operations reported to Options.Observe.
const (
	// OpList reads the remote's branch heads (the advertisement every
	// fetch and Branches start with).
	OpList Operation = "list"
	// OpFetch downloads the objects of branch heads not present locally.
	OpFetch Operation = "fetch"
	// OpPush updates or deletes remote branches.
	OpPush Operation = "push"
)

// ObserveFunc receives each exchange with the remote: its operation, how
// long it took, and its error (nil on success; a push that found the
// branch up to date succeeds). The error is redacted and classified like
// the errors the Repository returns (test it with errors.Is against
// ErrNonFastForward, ErrAuth, ...). It is called with the Repository's
// lock held: it must return quickly and must not call the Repository.
type ObserveFunc func(op Operation, d time.Duration, err error)

// Options configure a Repository.
type Options struct {
	// URL of the remote: https://, http:// (see InsecureHTTP), ssh:// or
	// scp-like git@host:path. Userinfo in the URL is never printed.
	URL string
	// Credentials authenticate to the remote; nil means anonymous. SSH URLs
	// require credentials with an identity and known_hosts.
	Credentials *Credentials
	// Dir, when set, keeps the objects in a bare repository on disk at Dir
	// (created if missing). When empty, objects live in memory: fine for the
	// status branch and for the Rollout manifests of small to medium
	// repositories, as only the branch heads are fetched (see Depth).
	Dir string
	// Depth is the fetch depth. rollgate never needs history (it commits on
	// top of the fetched head), so 0 means 1: a shallow fetch. A negative
	// value fetches full history.
	Depth int
	// InsecureHTTP allows sending credentials over plain http://. Off by
	// default; meant for tests and in-cluster Git servers.
	InsecureHTTP bool
	// PushAttempts bounds the fetch-rebuild-push cycle of a write when other
	// writers keep moving the branch. 0 means DefaultPushAttempts.
	PushAttempts int
	// RetryBackoff is the first wait between attempts. 0 means
	// DefaultRetryBackoff.
	RetryBackoff time.Duration
	// Signer, if set, signs every commit (e.g. OpenPGPSigner).
	Signer Signer
	// MaxCachedObjects bounds the in-memory store. 0 means
	// DefaultMaxCachedObjects.
	MaxCachedObjects int
	// Now returns the commit time. nil means time.Now.
	Now func() time.Time
	// Timeout bounds each exchange with the remote, so a Git host that
	// accepts connections but never answers cannot hold the Repository
	// (and every caller waiting for it) forever. 0 means DefaultTimeout.
	Timeout time.Duration
	// Observe, when set, is told about every exchange with the remote
	// (metrics). Nil observes nothing.
	Observe ObserveFunc
}

// Repository is a local copy of one remote Git repository, holding only the
// branch heads that were asked for. It reads files at a branch head and
// writes commits to branches, retrying pushes that lose a race. All methods
// are safe for concurrent use; network operations are serialized.
type Repository struct {
	mu      sync.Mutex
	opts    Options
	ep      *transport.Endpoint
	auth    transport.AuthMethod
	red     redactor
	safeURL string
	repo    *git.Repository
	mem     *memory.Storage
	// damaged is set when the on-disk store (Options.Dir) failed to read
	// or write objects; the next fetch drops it and starts afresh.
	damaged bool
}

// Open prepares a Repository for opts. It does not touch the network.
func Open(opts Options) (*Repository, error) {
	ep, err := transport.NewEndpoint(opts.URL)
	if err != nil {
		// The parser quotes the URL, which may hold a password: say nothing.
		return nil, fmt.Errorf("%w: the repository URL cannot be parsed", ErrInvalidCredentials)
	}
	red := newRedactor(append(opts.Credentials.secrets(), ep.Password)...)
	auth, err := opts.Credentials.authMethod(ep, opts.InsecureHTTP)
	if err != nil {
		return nil, red.wrap("", err)
	}
	if auth == nil && ep.User != "" && ep.Password != "" && (ep.Protocol == "http" || ep.Protocol == "https") {
		return nil, red.wrap("", fmt.Errorf("%w: put the password in a Secret, not in the URL", ErrInvalidCredentials))
	}
	r := &Repository{opts: opts, ep: ep, auth: auth, red: red, safeURL: red.text(opts.URL)}
	err = r.initStorage()
	if err != nil && opts.Dir != "" {
		// An on-disk copy that cannot be opened (a garbled config, a
		// half-written HEAD) holds nothing that is not on the remote.
		if err = clearStore(opts.Dir); err == nil {
			err = r.initStorage()
		}
	}
	if err != nil {
		return nil, r.red.wrap("initializing repository", err)
	}
	return r, nil
}

// String returns the repository URL without userinfo.
func (r *Repository) String() string { return r.safeURL }

func (r *Repository) initStorage() error {
	var st storage.Storer
	var mem *memory.Storage
	if r.opts.Dir != "" {
		st = filesystem.NewStorage(osfs.New(r.opts.Dir), cache.NewObjectLRUDefault())
	} else {
		mem = memory.NewStorage()
		st = mem
	}
	repo, err := git.Open(st, nil)
	if errors.Is(err, git.ErrRepositoryNotExists) {
		repo, err = git.Init(st, nil)
	}
	if err != nil {
		return err
	}
	if _, err := repo.Remote(remoteName); errors.Is(err, git.ErrRemoteNotFound) {
		_, err = repo.CreateRemote(&config.RemoteConfig{
			Name:  remoteName,
			URLs:  []string{r.opts.URL},
			Fetch: []config.RefSpec{"+refs/heads/*:refs/remotes/origin/*"},
		})
		if err != nil {
			return err
		}
	}
	r.repo, r.mem = repo, mem
	return nil
}

func (r *Repository) depth() int {
	switch {
	case r.opts.Depth == 0:
		return 1
	case r.opts.Depth < 0:
		return 0
	default:
		return r.opts.Depth
	}
}

// netContext bounds one exchange with the remote by Options.Timeout.
func (r *Repository) netContext(ctx context.Context) (context.Context, context.CancelFunc) {
	d := r.opts.Timeout
	if d <= 0 {
		d = DefaultTimeout
	}
	return context.WithTimeout(ctx, d)
}

// observe reports one exchange with the remote that started at start to
// Options.Observe. Caller holds r.mu.
func (r *Repository) observe(op Operation, start time.Time, err error) {
	if r.opts.Observe != nil {
		r.opts.Observe(op, time.Since(start), r.red.wrap("", err))
	}
}

func (r *Repository) now() time.Time {
	if r.opts.Now != nil {
		return r.opts.Now()
	}
	return time.Now()
}

func trackingRef(branch string) plumbing.ReferenceName {
	return plumbing.ReferenceName("refs/remotes/" + remoteName + "/" + branch)
}

// listRemote returns the remote branch heads (name without refs/heads/).
func (r *Repository) listRemote(ctx context.Context) (map[string]plumbing.Hash, error) {
	remote, err := r.repo.Remote(remoteName)
	if err != nil {
		// initStorage configured the remote: the local copy is damaged.
		r.noteDamage(git.ErrRemoteNotFound)
		return nil, err
	}
	ctx, cancel := r.netContext(ctx)
	defer cancel()
	start := time.Now()
	refs, err := remote.ListContext(ctx, &git.ListOptions{Auth: r.auth, CABundle: r.opts.Credentials.caBundleData()})
	if errors.Is(err, transport.ErrEmptyRemoteRepository) {
		r.observe(OpList, start, nil)
		return map[string]plumbing.Hash{}, nil
	}
	r.observe(OpList, start, err)
	if err != nil {
		return nil, err
	}
	heads := map[string]plumbing.Hash{}
	for _, ref := range refs {
		if ref.Name().IsBranch() && ref.Type() == plumbing.HashReference {
			heads[ref.Name().Short()] = ref.Hash()
		}
	}
	return heads, nil
}

// fetch brings the heads of branches up to date and returns them; a branch
// missing on the remote is absent from the result. Heads whose commit is
// already present locally are not downloaded again. Caller holds r.mu.
func (r *Repository) fetch(ctx context.Context, branches ...string) (map[string]plumbing.Hash, error) {
	if err := r.repair(); err != nil {
		return nil, err
	}
	heads, err := r.fetchHeads(ctx, branches...)
	return heads, r.noteDamage(err)
}

func (r *Repository) fetchHeads(ctx context.Context, branches ...string) (map[string]plumbing.Hash, error) {
	remote, err := r.listRemote(ctx)
	if err != nil {
		return nil, err
	}
	heads := map[string]plumbing.Hash{}
	var specs []config.RefSpec
	var fetched []string
	for _, b := range branches {
		h, ok := remote[b]
		if !ok {
			_ = r.repo.Storer.RemoveReference(trackingRef(b))
			continue
		}
		heads[b] = h
		if _, err := r.repo.CommitObject(h); err == nil {
			if err := r.repo.Storer.SetReference(plumbing.NewHashReference(trackingRef(b), h)); err != nil {
				return nil, err
			}
			continue
		}
		specs = append(specs, config.RefSpec(fmt.Sprintf("+refs/heads/%s:%s", b, trackingRef(b))))
		fetched = append(fetched, b)
	}
	if len(specs) == 0 {
		return heads, nil
	}
	fctx, cancel := r.netContext(ctx)
	defer cancel()
	start := time.Now()
	err = r.repo.FetchContext(fctx, &git.FetchOptions{
		RemoteName: remoteName,
		RefSpecs:   specs,
		Depth:      r.depth(),
		Auth:       r.auth,
		Tags:       git.NoTags,
		Force:      true,
		CABundle:   r.opts.Credentials.caBundleData(),
	})
	if errors.Is(err, git.NoErrAlreadyUpToDate) {
		err = nil
	}
	r.observe(OpFetch, start, err)
	if err != nil {
		return nil, err
	}
	// The branch may have moved between the listing and the fetch, which
	// then brought the newer head (and, shallow, not the listed one): the
	// head is what the tracking ref now points at.
	for _, b := range fetched {
		ref, err := r.repo.Storer.Reference(trackingRef(b))
		if err != nil {
			return nil, err
		}
		heads[b] = ref.Hash()
	}
	return heads, nil
}

// refetch brings branch up to date when it is known to exist (a refused
// push just showed that it moved, or it was fetched before): it fetches
// at once, without listing the remote first (one exchange less), and
// falls back to fetch when the branch is gone. Caller holds r.mu.
func (r *Repository) refetch(ctx context.Context, branch string) (map[string]plumbing.Hash, error) {
	if err := r.repair(); err != nil {
		return nil, err
	}
	fctx, cancel := r.netContext(ctx)
	defer cancel()
	start := time.Now()
	err := r.repo.FetchContext(fctx, &git.FetchOptions{
		RemoteName: remoteName,
		RefSpecs:   []config.RefSpec{config.RefSpec(fmt.Sprintf("+refs/heads/%s:%s", branch, trackingRef(branch)))},
		Depth:      r.depth(),
		Auth:       r.auth,
		Tags:       git.NoTags,
		Force:      true,
		CABundle:   r.opts.Credentials.caBundleData(),
	})
	var missing git.NoMatchingRefSpecError
	if errors.As(err, &missing) {
		return r.fetch(ctx, branch)
	}
	if errors.Is(err, git.NoErrAlreadyUpToDate) {
		err = nil
	}
	r.observe(OpFetch, start, err)
	if err != nil {
		return nil, r.noteDamage(err)
	}
	ref, err := r.repo.Storer.Reference(trackingRef(branch))
	if err != nil {
		return nil, r.noteDamage(err)
	}
	return map[string]plumbing.Hash{branch: ref.Hash()}, nil
}

// Fetch brings the heads of the given branches up to date. Branches missing
// on the remote are not an error (see Head). One branch fetched before is
// fetched without listing the remote first (refetch): a poll that finds
// it moved costs two exchanges with the remote instead of three, and one
// that finds it unchanged one, as before.
func (r *Repository) Fetch(ctx context.Context, branches ...string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	fetch := r.fetch
	if len(branches) == 1 && !r.damaged {
		if _, err := r.repo.Storer.Reference(trackingRef(branches[0])); err == nil {
			fetch = func(ctx context.Context, branches ...string) (map[string]plumbing.Hash, error) {
				return r.refetch(ctx, branches[0])
			}
		}
	}
	_, err := fetch(ctx, branches...)
	if err != nil && r.damaged {
		_, err = r.fetch(ctx, branches...)
	}
	return r.red.wrap("fetching "+strings.Join(branches, ", ")+" from "+r.safeURL, err)
}

// Head returns the commit of branch as last fetched, or ErrBranchNotFound.
func (r *Repository) Head(branch string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ref, err := r.repo.Storer.Reference(trackingRef(branch))
	if err != nil {
		return "", fmt.Errorf("%w: %s", ErrBranchNotFound, branch)
	}
	return ref.Hash().String(), nil
}

// Branches lists the remote branches whose name starts with prefix, with
// their head commits. It reads the remote's advertisement only.
func (r *Repository) Branches(ctx context.Context, prefix string) (map[string]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	heads, err := r.listRemote(ctx)
	if err != nil {
		return nil, r.red.wrap("listing branches of "+r.safeURL, err)
	}
	out := map[string]string{}
	for b, h := range heads {
		if strings.HasPrefix(b, prefix) {
			out[b] = h.String()
		}
	}
	return out, nil
}

// DeleteBranches deletes the given branches on the remote in one push.
// Branches that do not exist are ignored.
func (r *Repository) DeleteBranches(ctx context.Context, branches ...string) error {
	if len(branches) == 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	specs := make([]config.RefSpec, 0, len(branches))
	for _, b := range branches {
		specs = append(specs, config.RefSpec(":refs/heads/"+b))
	}
	ctx, cancel := r.netContext(ctx)
	defer cancel()
	start := time.Now()
	err := r.repo.PushContext(ctx, &git.PushOptions{
		RemoteName: remoteName, RefSpecs: specs, Auth: r.auth,
		CABundle: r.opts.Credentials.caBundleData(),
	})
	if errors.Is(err, git.NoErrAlreadyUpToDate) {
		err = nil
	}
	r.observe(OpPush, start, err)
	for _, b := range branches {
		_ = r.repo.Storer.RemoveReference(trackingRef(b))
		_ = r.repo.Storer.RemoveReference(plumbing.NewBranchReferenceName(b))
	}
	return r.red.wrap("deleting branches on "+r.safeURL, err)
}

// Snapshot fetches branch and returns a read-only view of its head. A
// missing branch yields an empty snapshot (Exists reports false).
func (r *Repository) Snapshot(ctx context.Context, branch string) (*Snapshot, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for retried := false; ; retried = true {
		heads, err := r.fetch(ctx, branch)
		if err == nil {
			var s *Snapshot
			if s, err = r.snapshot(branch, heads); err == nil {
				s.lock = &r.mu
				return s, nil
			}
			err = fmt.Errorf("reading %s: %w", branch, err)
		} else {
			err = fmt.Errorf("fetching %s from %s: %w", branch, r.safeURL, err)
		}
		if retried || !r.damaged {
			return nil, r.red.wrap("", err)
		}
	}
}

// LocalSnapshot returns the head of branch as last fetched (by Fetch,
// Snapshot, ReadFile or a write), without network access; a branch never
// fetched or gone at the last fetch gives an empty snapshot. Use it with
// ApprovalsIn to poll on your own schedule.
func (r *Repository) LocalSnapshot(branch string) (*Snapshot, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	heads := map[string]plumbing.Hash{}
	if ref, err := r.repo.Storer.Reference(trackingRef(branch)); err == nil {
		heads[branch] = ref.Hash()
	}
	s, err := r.snapshot(branch, heads)
	if err != nil {
		return nil, r.red.wrap("reading "+branch, err)
	}
	s.lock = &r.mu
	return s, nil
}

// HasCommit reports whether commit is in the local copy (fetched before),
// without network access.
func (r *Repository) HasCommit(commit string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, err := r.repo.CommitObject(plumbing.NewHash(commit))
	return err == nil
}

// SnapshotAt returns a read-only view of commit as a head of branch, from
// the local copy and without network access: what LocalSnapshot returned
// when branch's head was commit. The commit must be in the local copy
// (HasCommit).
func (r *Repository) SnapshotAt(branch, commit string) (*Snapshot, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.repo.CommitObject(plumbing.NewHash(commit)); err != nil {
		return nil, fmt.Errorf("commit %s of %s is not in the local copy of %s", commit, branch, r.safeURL)
	}
	s, err := r.snapshot(branch, map[string]plumbing.Hash{branch: plumbing.NewHash(commit)})
	if err != nil {
		return nil, r.red.wrap("reading "+commit+" of "+branch, err)
	}
	s.lock = &r.mu
	return s, nil
}

// ReadFile fetches branch and returns the file at path of its head.
func (r *Repository) ReadFile(ctx context.Context, branch, path string) ([]byte, error) {
	var data []byte
	err := r.retryDamaged(func() error {
		s, err := r.Snapshot(ctx, branch)
		if err != nil {
			return err
		}
		if !s.Exists() {
			return fmt.Errorf("%w: %s", ErrBranchNotFound, branch)
		}
		data, err = s.ReadFile(path)
		return err
	})
	return data, err
}

// snapshot builds a Snapshot of branch from fetched heads. Caller holds r.mu.
func (r *Repository) snapshot(branch string, heads map[string]plumbing.Hash) (*Snapshot, error) {
	s := &Snapshot{Branch: branch, repo: r, store: r.repo}
	h, ok := heads[branch]
	if !ok {
		return s, nil
	}
	c, err := r.repo.CommitObject(h)
	if err != nil {
		return nil, r.noteDamage(err)
	}
	t, err := c.Tree()
	if err != nil {
		return nil, r.noteDamage(err)
	}
	s.Commit, s.commit, s.tree = h.String(), c, t
	return s, nil
}

// backoff returns the wait before attempt n+1 (n >= 1), with jitter.
func (r *Repository) backoff(n int) time.Duration {
	d := r.opts.RetryBackoff
	if d <= 0 {
		d = DefaultRetryBackoff
	}
	for i := 1; i < n && d < maxRetryBackoff; i++ {
		d *= 2
	}
	d = min(d, maxRetryBackoff)
	return d/2 + rand.N(d/2+1)
}

func (r *Repository) attempts() int {
	if r.opts.PushAttempts > 0 {
		return r.opts.PushAttempts
	}
	return DefaultPushAttempts
}

// maybeReset drops an in-memory store that grew past its bound, so a
// long-running controller does not keep every status commit forever.
// Caller holds r.mu.
func (r *Repository) maybeReset() {
	limit := r.opts.MaxCachedObjects
	if limit <= 0 {
		limit = DefaultMaxCachedObjects
	}
	if r.mem == nil || len(r.mem.ObjectStorage.Objects) <= limit {
		return
	}
	// On failure the old store is kept; it is still consistent.
	_ = r.initStorage()
}

// noteDamage records err as damage of the on-disk store when it says that
// objects or repository files cannot be read, and returns err. Caller holds
// r.mu.
func (r *Repository) noteDamage(err error) error {
	if err != nil && r.opts.Dir != "" && isStorageError(err) {
		r.damaged = true
	}
	return err
}

// repair replaces a damaged on-disk store by an empty one; the caller then
// fetches afresh. Caller holds r.mu.
func (r *Repository) repair() error {
	if !r.damaged {
		return nil
	}
	if err := clearStore(r.opts.Dir); err != nil {
		return fmt.Errorf("dropping the damaged local copy: %w", err)
	}
	if err := r.initStorage(); err != nil {
		return err
	}
	r.damaged = false
	return nil
}

// retryDamaged runs f, and once more when it failed on a damaged store
// (f's next fetch repairs it).
func (r *Repository) retryDamaged(f func() error) error {
	err := f()
	if err == nil {
		return nil
	}
	r.mu.Lock()
	damaged := r.damaged
	r.mu.Unlock()
	if !damaged {
		return err
	}
	return f()
}

// clearStore removes the bare repository files in dir (not dir itself,
// which may be a mounted volume, nor files that are not Git's).
func clearStore(dir string) error {
	for _, name := range []string{"objects", "refs", "packed-refs", "shallow", "HEAD", "config", "index", "info", "logs", "FETCH_HEAD", "ORIG_HEAD", "description", "hooks"} {
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return nil
}
