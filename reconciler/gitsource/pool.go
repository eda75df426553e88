package gitsource

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
)

// Pool keeps one open gitsync.Repository and status Writer per
// Repository object, reopened when the Repository's spec or its Secret
// changes. It is a manager Runnable: writers live as long as the manager.
type Pool struct {
	reader   client.Reader // uncached: Secrets are read by name, never listed
	defaults Options
	// written gets the Rollouts whose latest progress a flush put in Git
	// (their GitSynced turns True); changed the Repositories whose fetch
	// or flush outcome changed (their status).
	written, changed *notifier
	// moved gets the Rollouts waiting at a gate whose manifest a fetch
	// changed (see wakeGated); rollouts lists them (the manager's cached
	// client; nil wakes none).
	moved    *notifier
	rollouts client.Reader
	// cached reads Repositories from the manager's cache (nil: reader);
	// see repository.
	cached client.Reader
	// proposed gets the Rollouts whose approval branch was pushed, or
	// failed to be (see proposer).
	proposed *notifier

	mu      sync.Mutex
	ctx     context.Context
	entries map[types.NamespacedName]*Repo
	// retired holds, per Repository, the last open repository taken out
	// of use because the Repository could not be opened as it now reads
	// (see retire); the next one that opens adopts its unwritten states.
	retired map[types.NamespacedName]*Repo
	// owned orders a Rollout's progress queued against its writer's
	// Forget when it leaves this shard (QueueProgress).
	owned sync.Mutex

	// fenceMu guards epoch, this process's leadership epoch once read
	// from the Lease (see fence); 0 until then.
	fenceMu sync.Mutex
	epoch   uint64
}

// Repo is one open repository.
type Repo struct {
	pool *Pool
	key  string
	obj  types.NamespacedName // the Repository object
	spec v1alpha1.RepositorySpec
	// clone is the local clone the tracked branch is fetched into and
	// gates read their approvals from. The status writer and the
	// proposer push from writes, a clone of their own, so a fetch never
	// waits behind their pushes.
	clone    *gitsync.Repository
	writes   *gitsync.Repository
	writer   *gitsync.Writer
	proposer *proposer
	// verifier judges approvals under spec.approvals (nil counts them
	// all), in history, a clone that fetches the tracked branch with its
	// history.
	verifier *gitsync.ApprovalVerifier
	history  *gitsync.Repository
	// trust holds, per cluster of spec.fleet.trust, the keys its status
	// files must be signed with.
	trust map[string]*gitsync.Keyring
	stop  context.CancelFunc
	// generation is the Repository's metadata.generation and checked when
	// its Secrets were last read and found unchanged (guarded by the
	// pool's mu; see reuse).
	generation int64
	checked    time.Time
	// branch is the Repository's tracked branch; statusBranch and window
	// where and how often its writer writes.
	branch       string
	statusBranch string
	window       time.Duration

	// fleet caches the status files of every cluster for spec.fleet.
	fleet fleetCache
	// rules caches the release rules file at the last head read (guarded by
	// mu).
	rules *Rules
	// reverts records the cleanups of revert branches per Rollout.
	reverts revertCleanups

	// comparing orders the compares of wakeIfMoved.
	comparing sync.Mutex

	mu sync.Mutex
	// seen is, per branch, the head last compared for wakes and what the
	// gates read at it (wakeIfMoved, gateManifest).
	seen map[string]*gateView
	// polled is when each branch was last fetched, or tried to be.
	polled map[string]time.Time
	stale  bool
	health gitHealth
}

// NewPool returns a pool that reads Repositories and Secrets with reader
// (uncached). Setup builds the controller's.
func NewPool(reader client.Reader, defaults Options) *Pool {
	return &Pool{
		reader: reader, defaults: defaults,
		entries: map[types.NamespacedName]*Repo{}, retired: map[types.NamespacedName]*Repo{},
		written: newNotifier(), changed: newNotifier(), moved: newNotifier(), proposed: newNotifier(),
	}
}

// Start records the manager's context for the status writers and, when it
// ends, stops them (each flushes what it holds).
func (g *Pool) Start(ctx context.Context) error {
	g.mu.Lock()
	g.ctx = ctx
	g.mu.Unlock()
	<-ctx.Done()
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, e := range g.entries {
		e.stop()
	}
	return nil
}

// NeedLeaderElection: only the leader writes to Git.
func (g *Pool) NeedLeaderElection() bool { return true }

// MarkStale makes the next approvals read fetch at once (push webhook).
func (g *Pool) MarkStale(key types.NamespacedName) {
	g.mu.Lock()
	e := g.entries[key]
	g.mu.Unlock()
	if e == nil {
		return
	}
	e.markStale()
	g.changed.notify(key) // the Repository controller fetches at once
}

// ForRollout returns the open repository a Rollout's spec.git names, and
// that Repository (also when it cannot be opened: it still says which
// approvals may count).
//
// It reads the Repository from the manager's cache and its Secrets only
// when they may have changed something: when the Repository's spec did,
// when they were last read more than SecretsRecheck ago, and at every
// reconcile of a Rollout that judges a gate with the keys they hold (an
// approval gate waits, or spec.fleet trusts other clusters' files), so a
// revoked key counts at once where it decides. A release in motion
// reconciles several times a second; it no longer reads them each time.
func (g *Pool) ForRollout(ctx context.Context, ro *v1alpha1.Rollout) (*Repo, *v1alpha1.Repository, error) {
	key := types.NamespacedName{Namespace: ro.Namespace, Name: ro.Spec.Git.Repository}
	r, err := g.repository(ctx, key)
	if err != nil {
		return nil, nil, fmt.Errorf("getting Repository %s named by spec.git.repository: %w", key, err)
	}
	if e := g.reuse(key, r, judgesWithKeys(ro)); e != nil {
		return e, r, nil
	}
	e, err := g.forRepository(ctx, r)
	if err != nil {
		// The Repository still says which approvals may count.
		return nil, r, err
	}
	return e, r, nil
}

// SecretsRecheck bounds how long ForRollout uses the Secrets of an open
// repository without reading them again (Git credentials, the signing
// key, approvers' and fleet keys) while no gate is judged with them.
const SecretsRecheck = 10 * time.Second

// repository reads the Repository key from the cache and, when the cache
// does not hold it (another shard's Repository, one created a moment
// ago), from the API server.
func (g *Pool) repository(ctx context.Context, key types.NamespacedName) (*v1alpha1.Repository, error) {
	var r v1alpha1.Repository
	if g.cached != nil {
		err := g.cached.Get(ctx, key, &r)
		if err == nil {
			return &r, nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, err
		}
	}
	if err := g.reader.Get(ctx, key, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// judgesWithKeys tells whether a reconcile of ro may judge a gate with the
// keys a Repository's Secrets hold: an approval gate that waits, or the
// fleet gates.
func judgesWithKeys(ro *v1alpha1.Rollout) bool {
	return ro.Status.AwaitingApproval != nil || ro.Spec.Fleet != nil
}

// reuse returns the open repository of key when it was opened from r's
// spec and its Secrets were read within SecretsRecheck; fresh asks for
// them to be read again (nil).
func (g *Pool) reuse(key types.NamespacedName, r *v1alpha1.Repository, fresh bool) *Repo {
	if fresh {
		return nil
	}
	now := g.defaults.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	e := g.entries[key]
	if e == nil || e.generation != r.Generation || r.Generation == 0 || now.Sub(e.checked) >= SecretsRecheck {
		return nil
	}
	return e
}

// forRepository returns the open repository of r, opening it (again) when
// r's spec or its Secrets changed. When r cannot be opened as it reads
// now, the repository opened before is retired: nothing more is written
// with its credentials or signing key.
func (g *Pool) forRepository(ctx context.Context, r *v1alpha1.Repository) (*Repo, error) {
	key := types.NamespacedName{Namespace: r.Namespace, Name: r.Name}
	e, err := g.reopen(ctx, key, r)
	if err != nil {
		g.retire(ctx, key)
		return nil, err
	}
	return e, nil
}

// retire takes the open repository of key out of use: its writer writes
// nothing more and keeps what it had not written for the repository that
// opens once the Repository is fixed. The Rollouts waiting at a gate on
// it are woken, to hold it and say why (GitSynced=False) now rather than
// at their next resync: with the approvers' keys unusable, no approval
// from Git counts.
func (g *Pool) retire(ctx context.Context, key types.NamespacedName) {
	g.mu.Lock()
	e := g.entries[key]
	delete(g.entries, key)
	if e != nil {
		g.retired[key] = e
	}
	g.mu.Unlock()
	if e != nil {
		e.writer.Hold()
		go e.stop()
		g.moved.notify(rolloutKeys(g.gatedRollouts(ctx, key))...)
	}
}

// reopen is forRepository without retiring.
func (g *Pool) reopen(ctx context.Context, key types.NamespacedName, r *v1alpha1.Repository) (*Repo, error) {
	var data map[string][]byte
	secretVersion := ""
	if r.Spec.SecretRef != nil {
		var s corev1.Secret
		if err := g.reader.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: r.Spec.SecretRef.Name}, &s); err != nil {
			return nil, fmt.Errorf("getting Secret %s/%s named by Repository %s spec.secretRef: %w", r.Namespace, r.Spec.SecretRef.Name, key, err)
		}
		data, secretVersion = s.Data, s.ResourceVersion
	}
	var signing map[string][]byte
	if ref := r.Spec.Commit.SigningKeyRef; ref != nil {
		// Signing is asked for: without the key, rollgate writes nothing
		// rather than unsigned commits.
		var s corev1.Secret
		if err := g.reader.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: ref.Name}, &s); err != nil {
			return nil, fmt.Errorf("getting Secret %s/%s named by Repository %s spec.commit.signingKeyRef: %w", r.Namespace, ref.Name, key, err)
		}
		signing = s.Data
		secretVersion += "/" + s.ResourceVersion
	}
	approvers, version, err := g.approverKeys(ctx, r)
	if err != nil {
		return nil, err
	}
	fleetKeys, fleetVersion, err := g.fleetKeys(ctx, r)
	if err != nil {
		return nil, err
	}
	version += "/" + fleetVersion
	// The status writer writes under this process's leadership epoch; a
	// process that cannot tell it opens no writer.
	fence, err := g.fence(ctx)
	if err != nil {
		return nil, err
	}
	secretVersion += "/" + version
	entryKey := entryKey(r.Spec, secretVersion)
	checked := g.defaults.now()
	g.mu.Lock()
	if e := g.entries[key]; e != nil && e.key == entryKey {
		e.generation, e.checked = r.Generation, checked
		g.mu.Unlock()
		return e, nil
	}
	e, err := g.open(key, r.Spec, data, signing, approvers, fleetKeys, entryKey, fence)
	if err != nil {
		g.mu.Unlock()
		return nil, fmt.Errorf("Repository %s: %w", key, err)
	}
	e.generation, e.checked = r.Generation, checked
	old := g.entries[key]
	if old == nil {
		old = g.retired[key]
	}
	delete(g.retired, key)
	g.entries[key] = e
	g.mu.Unlock()
	if old != nil {
		// The spec or its Secret changed: the new writer takes over what
		// the old one had not written yet.
		old.stop()
		e.writer.Adopt(old.writer)
	}
	return e, nil
}

// close stops the writer of a deleted Repository (after a last flush).
func (g *Pool) close(key types.NamespacedName) {
	g.mu.Lock()
	e := g.entries[key]
	delete(g.entries, key)
	delete(g.retired, key)
	g.mu.Unlock()
	if e != nil {
		go e.stop() // a last flush may wait for an unreachable server
	}
}

func entryKey(spec v1alpha1.RepositorySpec, secretVersion string) string {
	b, _ := json.Marshal(spec)
	h := sha256.Sum256(append(b, secretVersion...))
	return hex.EncodeToString(h[:8])
}

// Keys of the Secret named by spec.commit.signingKeyRef.
const (
	// signingKeyKey holds the ASCII-armored OpenPGP private key.
	signingKeyKey = "git.asc"
	// signingPassphraseKey holds the key's passphrase, when it is encrypted.
	signingPassphraseKey = "passphrase"
)

// open builds the repository of the Repository object obj and starts its
// status writer and its proposer; with signing (the data of the
// signingKeyRef Secret) every commit is signed; approvers are the keys of
// spec.approvals.signedBy, fleetKeys those of spec.fleet.trust; the
// writer writes under fence and collects the status files of deleted
// Rollouts.
// Called with g.mu held.
func (g *Pool) open(obj types.NamespacedName, spec v1alpha1.RepositorySpec, secret, signing, approvers map[string][]byte,
	fleetKeys map[string]map[string][]byte, key string, fence gitsync.Fence) (*Repo, error) {
	var creds *gitsync.Credentials
	if secret != nil {
		c, err := gitsync.CredentialsFromSecret(secret)
		if err != nil {
			return nil, err
		}
		creds = c
	}
	var signer gitsync.Signer
	if signing != nil {
		s, err := gitsync.NewOpenPGPSigner(signing[signingKeyKey], string(signing[signingPassphraseKey]))
		if err != nil {
			return nil, fmt.Errorf("spec.commit.signingKeyRef (key %q): %w", signingKeyKey, err)
		}
		signer = s
	}
	verifier, err := approvalVerifier(spec.Approvals, approvers)
	if err != nil {
		return nil, err
	}
	trust, err := fleetKeyrings(spec.Fleet, fleetKeys)
	if err != nil {
		return nil, err
	}
	gitOpts := gitsync.Options{
		URL: spec.URL, Credentials: creds, InsecureHTTP: g.defaults.InsecureHTTP,
		Observe: g.defaults.Metrics.GitObserver(obj.Namespace, obj.Name),
		Signer:  signer,
	}
	repo, err := gitsync.Open(gitOpts)
	if err != nil {
		return nil, err
	}
	writes, err := gitsync.Open(gitOpts)
	if err != nil {
		return nil, err
	}
	// The approval branches go through a copy of their own: pushing one
	// (a fetch of the tracked branch and a push, at the moment a gate
	// shows) on the status writer's copy held the gate's own status write
	// behind it, and other clusters' fleet gates wait for that write. In
	// TestFleetGraphThroughGit beside TestFleetShareThroughGit, canary's
	// gate reached the status branch 7.8 and 6.8 s after it showed with a
	// shared copy, 1.6 to 3.6 s (four runs) with its own.
	proposals, err := gitsync.Open(gitOpts)
	if err != nil {
		return nil, err
	}
	var history *gitsync.Repository
	if verifier != nil || spec.ReleaseRules != nil {
		// A copy of its own, with history, for the tracked branch only: the
		// shallow fetches of the main copy would hide history from it.
		gitOpts.Depth, gitOpts.Signer = -1, nil
		if history, err = gitsync.Open(gitOpts); err != nil {
			return nil, err
		}
	}
	opts := g.writerOptions(spec)
	e := &Repo{pool: g, key: key, obj: obj, spec: spec, clone: repo, writes: writes, verifier: verifier, history: history, trust: trust,
		branch: cmp.Or(spec.Branch, "main"), statusBranch: opts.Branch, window: opts.Window}
	opts.OnFlush = func(res gitsync.FlushResult, err error) { g.flushed(e, res, err) }
	opts.Fence = fence
	if spec.Status.Cluster != "" {
		// Other clusters' fleet gates check these (spec.fleet.trust).
		opts.FileSigner = signer
	}
	opts.Exists, opts.CollectInterval = g.rolloutExists, g.defaults.CollectInterval
	opts.OnCollect = func(res gitsync.CollectResult, err error) { g.collected(e, res, err) }
	w, err := gitsync.NewWriter(writes, opts)
	if err != nil {
		return nil, err
	}
	e.writer = w
	e.proposer = newProposer(proposals, g.proposed)
	parent := g.ctx
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithCancel(parent)
	var done sync.WaitGroup
	done.Go(func() { _ = w.Start(ctx) })
	done.Go(func() { e.proposer.start(ctx) })
	e.stop = func() {
		cancel()
		done.Wait()
	}
	return e, nil
}

// collected logs a collection pass of e's status writer.
func (g *Pool) collected(e *Repo, res gitsync.CollectResult, err error) {
	g.mu.Lock()
	ctx := g.ctx
	g.mu.Unlock()
	if ctx == nil {
		ctx = context.Background()
	}
	log := ctrllog.FromContext(ctx).WithValues("repository", e.obj.String(), "branch", e.statusBranch)
	if err != nil {
		log.Error(err, "collecting the status files of deleted Rollouts", "checked", res.Checked, "removed", res.Removed, "kept", res.Kept)
		return
	}
	if len(res.Removed) > 0 {
		log.Info("removed the status files of deleted Rollouts", "removed", res.Removed, "checked", res.Checked)
	}
}

// flushed records a status flush of e for its Repository's status and
// asks for reconciles of the Rollouts whose latest progress it put in Git.
func (g *Pool) flushed(e *Repo, res gitsync.FlushResult, err error) {
	e.mu.Lock()
	failing := e.health.flushErr != nil
	changed := e.health.flushed(res.Commit, err)
	e.mu.Unlock()
	if changed {
		g.changed.notify(e.obj)
	}
	written := res.Written
	if err != nil && !failing {
		// The first failure of a run of them wakes the Rollouts whose
		// progress waits, so that GitSynced names the error instead of
		// promising a write within the window; a Rollout at a gate may
		// not be reconciled again for hours. The flush that succeeds again
		// wakes them through Written.
		written = e.writer.Unwritten()
	}
	keys := make([]types.NamespacedName, 0, len(written))
	for _, k := range written {
		ns, name, _ := strings.Cut(k, "/")
		keys = append(keys, types.NamespacedName{Namespace: ns, Name: name})
	}
	g.written.notify(keys...)
}

func (g *Pool) writerOptions(spec v1alpha1.RepositorySpec) gitsync.WriterOptions {
	o := gitsync.WriterOptions{
		Branch:          cmp.Or(spec.Status.Branch, g.defaults.StatusBranch),
		Window:          g.defaults.StatusWindow,
		MessageTemplate: spec.Commit.MessageTemplate,
		Author:          gitsync.Signature{Name: spec.Commit.AuthorName, Email: spec.Commit.AuthorEmail},
	}
	if spec.Status.Window != nil {
		o.Window = spec.Status.Window.Duration
	}
	o.PathPrefix = statusPrefix(spec)
	// A status branch of its own is created when missing, also when
	// several clusters share it, each under its spec.status.cluster.
	o.CreateBranch = spec.Status.Path == ""
	if spec.Status.Path != "" {
		o.Branch = cmp.Or(spec.Branch, "main")
	}
	return o
}

// interval is how often the tracked branch is fetched.
func (g *Pool) interval(e *Repo) time.Duration { return g.specInterval(e.spec) }

// specInterval is spec.interval, or the controller's default.
func (g *Pool) specInterval(spec v1alpha1.RepositorySpec) time.Duration {
	if spec.Interval != nil && spec.Interval.Duration > 0 {
		return spec.Interval.Duration
	}
	if g.defaults.DefaultInterval > 0 {
		return g.defaults.DefaultInterval
	}
	return 5 * time.Second
}

// fetchIfDue fetches branch when it was not fetched (or tried to be) for
// an interval.
func (g *Pool) fetchIfDue(ctx context.Context, e *Repo, branch string, now time.Time) error {
	e.mu.Lock()
	due := now.Sub(e.polled[branch]) >= g.interval(e)
	e.mu.Unlock()
	if !due {
		return nil
	}
	return g.fetch(ctx, e, branch, now)
}

// fetch fetches branch, wakes the Rollouts gated on a manifest it changed
// and records the outcome for the Repository's status.
func (g *Pool) fetch(ctx context.Context, e *Repo, branch string, now time.Time) error {
	e.mu.Lock()
	if e.polled == nil {
		e.polled = map[string]time.Time{}
	}
	e.polled[branch] = now
	e.mu.Unlock()
	err := e.clone.Fetch(ctx, branch)
	head := ""
	if err == nil && branch == e.branch {
		head, _ = e.clone.Head(branch)
	}
	if err == nil {
		g.wakeIfMoved(ctx, e, branch)
	}
	e.mu.Lock()
	changed := e.health.fetched(branch == e.branch, head, now, err)
	e.mu.Unlock()
	if changed {
		g.changed.notify(e.obj)
	}
	return err
}

// gatePollMargin is how late the Repository controller's fetch of a
// branch with a gate on it may be before a gated Rollout asks for it.
const gatePollMargin = 2 * time.Second

// gateWaits tells the Repository controller that a Rollout waits at a
// gate for an approval merged on branch, when branch was not fetched for
// an interval and gatePollMargin: the controller then finds the gate
// (gatedBranches) and fetches the branch every interval until no gate
// waits on it. A Rollout at a gate does not poll Git itself: one fetch
// per interval serves all of them, and it is never queued behind the
// Rollouts' own work.
func (g *Pool) gateWaits(e *Repo, branch string, now time.Time) {
	e.mu.Lock()
	at, stale := e.polled[branch], e.stale
	e.mu.Unlock()
	if !stale && now.Sub(at) > g.interval(e)+gatePollMargin {
		g.changed.notify(e.obj)
	}
}

// markStale makes the next read fetch at once.
func (e *Repo) markStale() {
	e.mu.Lock()
	e.stale = true
	e.mu.Unlock()
}
