package reconciler

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
)

// gitRepos keeps one open gitsync.Repository and status Writer per
// Repository object, reopened when the Repository's spec or its Secret
// changes. It is a manager Runnable: writers live as long as the manager.
type gitRepos struct {
	reader   client.Reader // uncached: Secrets are read by name, never listed
	defaults Options

	mu      sync.Mutex
	ctx     context.Context
	entries map[types.NamespacedName]*gitEntry
}

// gitEntry is one open repository.
type gitEntry struct {
	key    string
	spec   v1alpha1.RepositorySpec
	repo   *gitsync.Repository
	writer *gitsync.Writer
	stop   context.CancelFunc

	mu        sync.Mutex
	lastFetch time.Time
	stale     bool
}

func newGitRepos(reader client.Reader, defaults Options) *gitRepos {
	return &gitRepos{reader: reader, defaults: defaults, entries: map[types.NamespacedName]*gitEntry{}}
}

// Start records the manager's context for the status writers and, when it
// ends, stops them (each flushes what it holds).
func (g *gitRepos) Start(ctx context.Context) error {
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
func (g *gitRepos) NeedLeaderElection() bool { return true }

// markStale makes the next approvals read fetch at once (push webhook).
func (g *gitRepos) markStale(key types.NamespacedName) bool {
	g.mu.Lock()
	e := g.entries[key]
	g.mu.Unlock()
	if e == nil {
		return false
	}
	e.markStale()
	return true
}

// forRollout returns the open repository a Rollout's spec.git names.
func (g *gitRepos) forRollout(ctx context.Context, ro *v1alpha1.Rollout) (*gitEntry, *v1alpha1.Repository, error) {
	key := types.NamespacedName{Namespace: ro.Namespace, Name: ro.Spec.Git.Repository}
	var r v1alpha1.Repository
	if err := g.reader.Get(ctx, key, &r); err != nil {
		return nil, nil, fmt.Errorf("getting Repository %s named by spec.git.repository: %w", key, err)
	}
	var data map[string][]byte
	secretVersion := ""
	if r.Spec.SecretRef != nil {
		var s corev1.Secret
		if err := g.reader.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: r.Spec.SecretRef.Name}, &s); err != nil {
			return nil, nil, fmt.Errorf("getting Secret %s/%s named by Repository %s spec.secretRef: %w", r.Namespace, r.Spec.SecretRef.Name, key, err)
		}
		data, secretVersion = s.Data, s.ResourceVersion
	}
	entryKey := entryKey(r.Spec, secretVersion)
	g.mu.Lock()
	if e := g.entries[key]; e != nil && e.key == entryKey {
		g.mu.Unlock()
		return e, &r, nil
	}
	e, err := g.open(key, r.Spec, data, entryKey)
	if err != nil {
		g.mu.Unlock()
		return nil, nil, fmt.Errorf("Repository %s: %w", key, err)
	}
	old := g.entries[key]
	g.entries[key] = e
	g.mu.Unlock()
	if old != nil {
		// The spec or its Secret changed: the new writer takes over what
		// the old one had not written yet.
		old.stop()
		e.writer.Adopt(old.writer)
	}
	return e, &r, nil
}

func entryKey(spec v1alpha1.RepositorySpec, secretVersion string) string {
	b, _ := json.Marshal(spec)
	h := sha256.Sum256(append(b, secretVersion...))
	return hex.EncodeToString(h[:8])
}

// open builds the repository of the Repository object obj and starts its
// status writer. Called with g.mu held.
func (g *gitRepos) open(obj types.NamespacedName, spec v1alpha1.RepositorySpec, secret map[string][]byte, key string) (*gitEntry, error) {
	var creds *gitsync.Credentials
	if secret != nil {
		c, err := gitsync.CredentialsFromSecret(secret)
		if err != nil {
			return nil, err
		}
		creds = c
	}
	repo, err := gitsync.Open(gitsync.Options{
		URL: spec.URL, Credentials: creds, InsecureHTTP: g.defaults.GitInsecureHTTP,
		Observe: g.defaults.Metrics.GitObserver(obj.Namespace, obj.Name),
	})
	if err != nil {
		return nil, err
	}
	w, err := gitsync.NewWriter(repo, g.writerOptions(spec))
	if err != nil {
		return nil, err
	}
	parent := g.ctx
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithCancel(parent)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Start(ctx)
	}()
	stop := func() {
		cancel()
		<-done
	}
	return &gitEntry{key: key, spec: spec, repo: repo, writer: w, stop: stop}, nil
}

func (g *gitRepos) writerOptions(spec v1alpha1.RepositorySpec) gitsync.WriterOptions {
	o := gitsync.WriterOptions{
		Branch:          orDefault(spec.Status.Branch, g.defaults.GitStatusBranch),
		Window:          g.defaults.GitStatusWindow,
		MessageTemplate: spec.Commit.MessageTemplate,
		Author:          gitsync.Signature{Name: spec.Commit.AuthorName, Email: spec.Commit.AuthorEmail},
	}
	if spec.Status.Window != nil {
		o.Window = spec.Status.Window.Duration
	}
	if spec.Status.Path != "" {
		o.Branch = orDefault(spec.Branch, "main")
		o.PathPrefix = spec.Status.Path
	}
	return o
}

// interval is how often the tracked branch is fetched.
func (g *gitRepos) interval(e *gitEntry) time.Duration {
	if e.spec.Interval != nil && e.spec.Interval.Duration > 0 {
		return e.spec.Interval.Duration
	}
	if g.defaults.GitDefaultInterval > 0 {
		return g.defaults.GitDefaultInterval
	}
	return 5 * time.Second
}

// fetchIfDue fetches branch when the interval has passed or a push webhook
// marked the repository stale.
func (g *gitRepos) fetchIfDue(ctx context.Context, e *gitEntry, branch string, now time.Time) error {
	e.mu.Lock()
	due := e.stale || now.Sub(e.lastFetch) >= g.interval(e)
	e.mu.Unlock()
	if !due {
		return nil
	}
	if err := e.repo.Fetch(ctx, branch); err != nil {
		return err
	}
	e.mu.Lock()
	e.lastFetch, e.stale = now, false
	e.mu.Unlock()
	return nil
}

// markStale makes the next read fetch at once.
func (e *gitEntry) markStale() {
	e.mu.Lock()
	e.stale = true
	e.mu.Unlock()
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
