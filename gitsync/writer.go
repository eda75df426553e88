package gitsync

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/rollgate/rollgate/gitsync/commitmsg"
)

const (
	// DefaultWindow is how long the Writer gathers state changes before
	// writing them in one commit.
	DefaultWindow = 10 * time.Second
	// DefaultBurst is how many Rollouts waiting to be written make Start
	// flush before the window ends (see Writer.Start).
	DefaultBurst = 100
	// DefaultStatusMessageTemplate is the status commit message template.
	DefaultStatusMessageTemplate = `rollgate: status of {{len .Changed}} rollout(s)
{{range .Changed}}
- {{.Namespace}}/{{.Name}}: {{.Phase}}{{if .Step.Total}}, step {{.Step.Current}}/{{.Step.Total}}{{end}}{{end}}
{{- range .Removed}}
- {{.}}: removed{{end}}
`
	finalFlushTimeout = 30 * time.Second
)

// WriterOptions configure a Writer.
type WriterOptions struct {
	// Branch receives the status commits; "" means DefaultStatusBranch. A
	// missing branch is created as an orphan (no shared history) when
	// PathPrefix is empty.
	Branch string
	// PathPrefix puts the status files under a directory. Set it, with
	// Branch set to the tracked branch, to keep status next to the
	// manifests; such a branch must already exist.
	PathPrefix string
	// CreateBranch creates a missing Branch as an orphan even though
	// PathPrefix is set: for a status branch shared by several clusters,
	// each writing under its own directory.
	CreateBranch bool
	// Window is the flush period of Start; 0 means DefaultWindow.
	Window time.Duration
	// Burst is how many Rollouts waiting to be written (changed states
	// and removals) make Start flush early, without waiting for the end
	// of the window; 0 means DefaultBurst, a negative value never flushes
	// early. See Writer.Start for the rule.
	Burst int
	// Author of status commits; zero means the rollgate default.
	Author Signature
	// MessageTemplate is a text/template for the commit message, executed
	// with CommitData by package commitmsg (no method calls but the time
	// formatting ones); "" means DefaultStatusMessageTemplate.
	MessageTemplate string
	// MaxMeasurements bounds the analysis measurements written per
	// Rollout (newest kept); 0 means DefaultMaxMeasurements.
	MaxMeasurements int
	// OnFlush, when set, is called after every flush that had states or
	// removals to write, successful or not, with its result (see
	// FlushResult.Written) and error. It runs on the goroutine that
	// flushed (Start's, for periodic flushes), with no lock of the Writer
	// held, so it may call Written; it must return quickly.
	OnFlush func(FlushResult, error)
	// Fence is the leadership this Writer writes under (see Fence); the
	// zero value fences nothing. With an epoch, Start writes it at once,
	// also when nothing else is pending, and the Writer stops writing for
	// good once a flush is refused with ErrFenced.
	Fence Fence
	// Exists, when set, makes Start collect the status files of deleted
	// Rollouts (see Writer.Collect) when it starts and then every
	// CollectInterval.
	Exists RolloutExists
	// CollectInterval is how often Start collects; 0 means
	// DefaultCollectInterval.
	CollectInterval time.Duration
	// OnCollect, when set, gets the outcome of every collection pass of
	// Start.
	OnCollect func(CollectResult, error)
	// FileSigner, when set, signs every status file: a detached signature
	// is written beside it (StatusSignatureExt), for the fleet gates of
	// other clusters to check (VerifyStatusFile).
	FileSigner Signer
}

// CommitData is the data of the status commit message template.
type CommitData struct {
	// Changed are the Rollouts whose file this commit changes, sorted.
	Changed []RolloutState
	// Removed are the "<namespace>/<name>" whose file this commit deletes.
	Removed []string
}

// FlushResult describes one flush.
type FlushResult struct {
	// Commit is the status commit, or the current head when nothing changed.
	Commit string
	// Changed lists "<namespace>/<name>" of the files written or deleted;
	// empty when the branch already held every state.
	Changed []string
	// Attempts is the number of fetch-build-push cycles used, also by a
	// flush that failed.
	Attempts int
	// Written lists, sorted, the "<namespace>/<name>" whose Written commit
	// this flush set or moved: Rollouts whose latest enqueued state is now
	// in Git (written by this commit or found there already) and had not
	// been reported by an earlier flush, or whose file this flush wrote
	// again. Rollouts already in Git and left untouched are not listed.
	Written []string
}

// Writer writes Rollout states to Git, coalesced: Enqueue only records the
// latest state per Rollout; each flush writes one commit with every file
// that differs from the branch, plus the overview README.md. Files of other
// writers on the branch are kept (and listed in the overview). Writer is
// safe for concurrent use.
type Writer struct {
	repo *Repository
	opts WriterOptions
	tmpl *commitmsg.Template

	flushMu sync.Mutex // one flush at a time
	// renders caches rendered status files by key; guarded by flushMu.
	renders map[string]render

	mu      sync.Mutex
	states  map[string]RolloutState
	seq     map[string]uint64 // gen of each state's last change
	removed map[string]bool
	gen     uint64 // bumped on every Enqueue of a changed state and on Remove
	flushed uint64 // gen covered by the last successful flush
	// written holds, per key, the status commit that holds the key's
	// current state; absent while that state is pending.
	written map[string]string
	last    flushOutcome
	// held makes every flush write nothing (see Hold).
	held bool
	// fenced is the ErrFenced a flush was refused with: the Writer writes
	// nothing more.
	fenced error
	// claimed is set once the branch is known to hold the Fence's epoch.
	claimed bool
	// burst holds a token once Burst Rollouts wait to be written (see
	// Start).
	burst chan struct{}

	// afterBuild, when set (tests only), runs between building a commit
	// and pushing it; rebuilt is false when the change built for the
	// previous attempt was reused.
	afterBuild func(rebuilt bool)
}

// render is a rendered status file and the Enqueue it came from; hash is
// its Git blob hash, prev the hash of the render it replaced (the file
// this Writer last had there, so not another writer's).
type render struct {
	seq        uint64
	data       []byte
	hash, prev plumbing.Hash
	// sig is data's detached signature, with a FileSigner.
	sig []byte
}

type flushOutcome struct {
	result FlushResult
	at     time.Time
	err    error
}

// NewWriter returns a Writer for repo. It fails only on an invalid message
// template.
func NewWriter(repo *Repository, opts WriterOptions) (*Writer, error) {
	if opts.Branch == "" {
		opts.Branch = DefaultStatusBranch
	}
	if opts.Window <= 0 {
		opts.Window = DefaultWindow
	}
	if opts.Burst == 0 {
		opts.Burst = DefaultBurst
	}
	if opts.MaxMeasurements <= 0 {
		opts.MaxMeasurements = DefaultMaxMeasurements
	}
	if opts.MessageTemplate == "" {
		opts.MessageTemplate = DefaultStatusMessageTemplate
	}
	if opts.CollectInterval <= 0 {
		opts.CollectInterval = DefaultCollectInterval
	}
	opts.PathPrefix = strings.Trim(opts.PathPrefix, "/")
	if opts.Fence.Epoch > 0 && (opts.Fence.Lease == "" || strings.Count(opts.Fence.Lease, "/") != 1) {
		return nil, fmt.Errorf("Fence.Lease %q: want the Lease of Fence.Epoch as <namespace>/<name>", opts.Fence.Lease)
	}
	tmpl, err := commitmsg.Parse("status-commit", opts.MessageTemplate)
	if err != nil {
		return nil, fmt.Errorf("status commit message template: %w", err)
	}
	return &Writer{
		repo: repo, opts: opts, tmpl: tmpl,
		renders: map[string]render{}, burst: make(chan struct{}, 1),
		states: map[string]RolloutState{}, seq: map[string]uint64{}, removed: map[string]bool{}, written: map[string]string{},
	}, nil
}

// PathOf is the path of Rollout namespace/name's status file on the
// status branch.
func (w *Writer) PathOf(namespace, name string) string {
	return StatusPath(w.opts.PathPrefix, namespace, name)
}

// Enqueue records the latest state of a Rollout for the next flush.
// Free text is passed through the repository's redactor, so a credential
// or a URL with userinfo never reaches Git. A state equal to the one held
// changes nothing: Written keeps its commit and nothing becomes pending.
// A different state makes Written return "" until a flush writes it.
func (w *Writer) Enqueue(s RolloutState) {
	s = w.clean(s)
	w.mu.Lock()
	defer w.mu.Unlock()
	k := s.key()
	if old, ok := w.states[k]; ok && reflect.DeepEqual(old, s) {
		return
	}
	w.gen++
	w.states[k] = s
	w.seq[k] = w.gen
	delete(w.removed, k)
	delete(w.written, k)
	w.noteBurst()
}

// noteBurst tells Start when Burst Rollouts wait to be written: changed
// states not yet in Git, and removals. Caller holds mu.
func (w *Writer) noteBurst() {
	if !w.bursting() {
		return
	}
	select {
	case w.burst <- struct{}{}:
	default:
	}
}

// clean normalizes s and redacts its free text.
func (w *Writer) clean(s RolloutState) RolloutState {
	s = s.normalize(w.opts.MaxMeasurements)
	s.Message = w.repo.red.text(s.Message)
	s.Git.Repository = w.repo.red.text(s.Git.Repository)
	for i := range s.Analysis {
		s.Analysis[i].Message = w.repo.red.text(s.Analysis[i].Message)
	}
	return s
}

// Adopt takes over the states and removals old holds for Rollouts this
// Writer has none for, so nothing is lost when a Writer replaces another
// (new credentials, a changed Repository spec) while the old one still
// had states it could not write. States already in Git cost nothing: a
// flush writes only the files that differ from the branch.
func (w *Writer) Adopt(old *Writer) {
	if old == nil || old == w {
		return
	}
	old.mu.Lock()
	states := make([]RolloutState, 0, len(old.states))
	for _, s := range old.states {
		states = append(states, s)
	}
	removed := make([]string, 0, len(old.removed))
	for k := range old.removed {
		removed = append(removed, k)
	}
	old.mu.Unlock()
	for i, s := range states {
		states[i] = w.clean(s)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range states {
		k := s.key()
		if _, ok := w.states[k]; ok || w.removed[k] {
			continue
		}
		w.gen++
		w.states[k] = s
		w.seq[k] = w.gen
	}
	for _, k := range removed {
		if _, ok := w.states[k]; ok || w.removed[k] {
			continue
		}
		w.removed[k] = true
		w.gen++
	}
	w.noteBurst()
}

// Remove deletes a Rollout's status file at the next flush (the Rollout
// was deleted).
func (w *Writer) Remove(namespace, name string) {
	k := namespace + "/" + name
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.states, k)
	delete(w.seq, k)
	delete(w.written, k)
	w.removed[k] = true
	w.gen++
	w.noteBurst()
}

// bursting reports whether Burst Rollouts wait to be written. Caller
// holds mu.
func (w *Writer) bursting() bool {
	// written only holds keys of states, so the difference counts the
	// states waiting.
	return w.opts.Burst > 0 && len(w.states)-len(w.written)+len(w.removed) >= w.opts.Burst
}

// Forget drops what the Writer holds for a Rollout without touching its
// file on the branch: another Writer (the controller of another shard, the
// Rollout having been relabelled) writes that Rollout from now on, and
// this one must not write its last state over that Writer's. A removal
// queued by Remove stays queued.
func (w *Writer) Forget(namespace, name string) {
	k := namespace + "/" + name
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.states, k)
	delete(w.seq, k)
	delete(w.written, k)
}

// WrittenAs returns the status commit that wrote s as the Rollout's
// latest state, or "" while s is pending or differs from the state the
// Writer holds (s not queued yet: it will be pending once queued).
func (w *Writer) WrittenAs(s RolloutState) string {
	s = w.clean(s)
	w.mu.Lock()
	defer w.mu.Unlock()
	if old, ok := w.states[s.key()]; !ok || !reflect.DeepEqual(old, s) {
		return ""
	}
	return w.written[s.key()]
}

// Written returns the status commit that wrote the Rollout's latest
// enqueued state (or found it already on the branch), or "" while that
// state is pending. Later commits for other Rollouts keep the file, so
// the state is also in every commit after it until the Rollout changes.
func (w *Writer) Written(namespace, name string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.written[namespace+"/"+name]
}

// Unwritten returns, sorted, the "<namespace>/<name>" of the Rollouts
// whose latest enqueued state is not in Git yet.
func (w *Writer) Unwritten() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var keys []string
	for k := range w.states {
		if _, ok := w.written[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// LastFlush returns the outcome of the last flush attempt, for the
// reconciler's GitSynced condition.
func (w *Writer) LastFlush() (FlushResult, time.Time, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last.result, w.last.at, w.last.err
}

// Pending reports whether states were enqueued since the last successful
// flush.
func (w *Writer) Pending() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gen != w.flushed
}

// Hold stops w from writing: every later flush, the last one of Start
// included, writes nothing and leaves the states for a Writer that adopts
// them (Adopt). A flush already under way ends first. It is for a Writer
// whose Repository can no longer be written as it is declared now (a
// signing key that cannot be used, a Secret gone): it must not go on with
// the credentials or the key it was opened with.
func (w *Writer) Hold() {
	w.flushMu.Lock()
	defer w.flushMu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.held = true
}

// Flush writes every enqueued state that differs from the branch in one
// commit (none when all are identical). Concurrent pushes by others are
// merged by rebuilding on their head; see Repository.Update. OnFlush is
// called once the outcome is recorded.
func (w *Writer) Flush(ctx context.Context) (FlushResult, error) {
	out, wrote, err := w.flush(ctx)
	if wrote && w.opts.OnFlush != nil {
		w.opts.OnFlush(out, err)
	}
	return out, err
}

// flush is Flush without the callback; wrote reports whether there was
// anything to write.
func (w *Writer) flush(ctx context.Context) (out FlushResult, wrote bool, err error) {
	w.flushMu.Lock()
	defer w.flushMu.Unlock()
	w.mu.Lock()
	if w.held {
		w.mu.Unlock()
		return FlushResult{}, false, nil
	}
	if w.fenced != nil {
		w.mu.Unlock()
		return FlushResult{}, false, w.fenced
	}
	claim := w.claiming()
	gen := w.gen
	states := make(map[string]RolloutState, len(w.states))
	seq := make(map[string]uint64, len(w.states))
	for k, s := range w.states {
		states[k], seq[k] = s, w.seq[k]
	}
	removed := make([]string, 0, len(w.removed))
	for k := range w.removed {
		removed = append(removed, k)
	}
	w.mu.Unlock()
	sort.Strings(removed)

	wrote = len(states) > 0 || len(removed) > 0 || claim
	if wrote {
		if err = w.renderAll(states, seq); err == nil {
			out, err = w.write(ctx, states, removed)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = flushOutcome{result: out, at: time.Now(), err: err}
	if errors.Is(err, ErrFenced) {
		w.fenced = err
	}
	if err != nil {
		return out, wrote, err
	}
	w.flushed = max(w.flushed, gen)
	w.claimed = true
	for _, k := range removed {
		delete(w.removed, k)
	}
	rewritten := make(map[string]bool, len(out.Changed))
	for _, k := range out.Changed {
		rewritten[k] = true
	}
	for _, k := range sortedKeys(states) {
		// A state enqueued again since the snapshot is not the one written.
		if w.seq[k] != seq[k] {
			continue
		}
		if _, ok := w.written[k]; !ok || rewritten[k] {
			w.written[k] = out.Commit
			out.Written = append(out.Written, k)
		}
	}
	w.last.result = out
	return out, wrote, nil
}

// renderAll refreshes the render cache for states; unchanged states are not
// rendered again. Caller holds flushMu.
func (w *Writer) renderAll(states map[string]RolloutState, seq map[string]uint64) error {
	for k := range w.renders {
		if _, ok := states[k]; !ok {
			delete(w.renders, k)
		}
	}
	for k, s := range states {
		if r, ok := w.renders[k]; ok && r.seq == seq[k] {
			continue
		}
		data, err := RenderStatus(s)
		if err != nil {
			return fmt.Errorf("rendering status of %s: %w", k, err)
		}
		r := render{seq: seq[k], data: data, hash: blobHashOf(data), prev: w.renders[k].hash}
		if w.opts.FileSigner != nil {
			if r.sig, err = w.opts.FileSigner.Sign(bytes.NewReader(data)); err != nil {
				return fmt.Errorf("signing the status of %s: %w", k, err)
			}
		}
		w.renders[k] = r
	}
	return nil
}

// write commits states and removals to the status branch.
func (w *Writer) write(ctx context.Context, states map[string]RolloutState, removed []string) (FlushResult, error) {
	var changed []string
	// A push that lost the race is retried at once on the new head. When
	// the other writer left the status files and the overview alone (it
	// wrote elsewhere on the branch), the change built for the old head is
	// the change for the new one: it is reused, not built again, which
	// keeps the retry short enough to win the next race.
	var last struct {
		status *object.Tree
		epoch  string
		change *Change
	}
	res, err := w.repo.Update(ctx, UpdateRequest{Branch: w.opts.Branch, CreateOrphan: w.opts.PathPrefix == "" || w.opts.CreateBranch, RetryAtOnce: true},
		func(base *Snapshot) (*Change, error) {
			status, serr := base.statusTree(w.opts.PathPrefix)
			epoch := w.epochHash(base)
			change := last.change
			rebuild := change == nil || serr != nil || epoch != last.epoch || !sameStatusFiles(last.status, status)
			if rebuild {
				var keys []string
				var err error
				if change, keys, err = w.build(base, states, removed); err != nil {
					return nil, err
				}
				changed = keys
			}
			last.status, last.epoch, last.change = status, epoch, change
			if serr != nil {
				last.change = nil
			}
			if w.afterBuild != nil {
				w.afterBuild(rebuild)
			}
			return change, nil
		})
	if err != nil {
		return FlushResult{Attempts: res.Attempts}, fmt.Errorf("writing rollout status to %s: %w", w.opts.Branch, err)
	}
	if len(res.Changed) == 0 {
		changed = nil
	}
	return FlushResult{Commit: res.Commit, Changed: changed, Attempts: res.Attempts}, nil
}

// build derives the status commit from the in-memory states on top of
// base, keeping the files of other writers.
func (w *Writer) build(base *Snapshot, states map[string]RolloutState, removed []string) (*Change, []string, error) {
	// The fence first: a Writer with a lower epoch than base's reads and
	// writes nothing else.
	leaderPath, leader, err := w.fenceCheck(base)
	if err != nil {
		return nil, nil, err
	}
	// Parse only the files of other writers, for the overview; ours are
	// rendered from memory. Files that do not parse are left alone; a tree
	// that cannot be read (a damaged local store) is an error.
	all, err := readStates(base, w.opts.PathPrefix, func(key string) bool { _, ours := states[key]; return ours })
	if all == nil {
		return nil, nil, err
	}
	files := map[string][]byte{}
	var data CommitData
	var keys []string
	for _, k := range sortedKeys(states) {
		s := states[k]
		r := w.renders[k]
		p := StatusPath(w.opts.PathPrefix, s.Namespace, s.Name)
		h, exists := base.blobHash(p)
		if !exists || h != r.hash {
			// A file that is not this Writer's previous render must be a
			// status file before it is overwritten.
			if exists && h != r.prev {
				if old, err := base.ReadFile(p); err == nil && !isStatusFile(old) {
					return nil, nil, fmt.Errorf("%w: %s (set a PathPrefix)", ErrNotOwned, p)
				}
			}
			files[p] = r.data
			data.Changed = append(data.Changed, s)
			keys = append(keys, k)
		}
		if r.sig != nil {
			// Signed with the file; and once when signing was turned on
			// for a file already current.
			if _, signed := base.blobHash(p + StatusSignatureExt); files[p] != nil || !signed {
				files[p+StatusSignatureExt] = r.sig
			}
		}
		all[k] = s
	}
	gone := w.dropRemoved(base, removed, files, all)
	data.Removed = append(data.Removed, gone...)
	keys = append(keys, gone...)
	if len(files) == 0 {
		if leader == nil {
			return nil, nil, nil
		}
		// A new leader claims the branch even when every status file is
		// current.
		return &Change{Files: map[string][]byte{leaderPath: leader}, Author: w.opts.Author,
			Message: fmt.Sprintf("rollgate: leader epoch %d of Lease %s\n", w.opts.Fence.Epoch, w.opts.Fence.Lease)}, nil, nil
	}
	if leader != nil {
		files[leaderPath] = leader
	}
	overview := make([]RolloutState, 0, len(all))
	for _, s := range all {
		overview = append(overview, s)
	}
	readme := path.Join(w.opts.PathPrefix, OverviewFile)
	if old, err := base.ReadFile(readme); err == nil && !bytes.HasPrefix(old, []byte(overviewTitle)) {
		return nil, nil, fmt.Errorf("%w: %s (set a PathPrefix)", ErrNotOwned, readme)
	}
	files[readme] = RenderOverview(overview)
	var msg bytes.Buffer
	if err := w.tmpl.Execute(&msg, data); err != nil {
		return nil, nil, fmt.Errorf("status commit message template: %w", err)
	}
	sort.Strings(keys)
	return &Change{Files: files, Message: msg.String(), Author: w.opts.Author}, keys, nil
}

// dropRemoved deletes, in files, the status files (and signatures) of the
// removed Rollouts that base holds, drops them from all, and returns the
// keys of those it deleted. A file there that is not a status file is
// left alone.
func (w *Writer) dropRemoved(base *Snapshot, removed []string, files map[string][]byte, all map[string]RolloutState) []string {
	var gone []string
	for _, k := range removed {
		ns, name, _ := strings.Cut(k, "/")
		p := StatusPath(w.opts.PathPrefix, ns, name)
		if old, err := base.ReadFile(p); err == nil && isStatusFile(old) {
			files[p] = nil
			if _, signed := base.blobHash(p + StatusSignatureExt); signed {
				files[p+StatusSignatureExt] = nil
			}
			gone = append(gone, k)
		}
		delete(all, k)
	}
	return gone
}

// Start flushes every Window while states are pending, until ctx ends,
// then flushes once more (bounded by a timeout). A burst is written
// early: once Burst Rollouts (DefaultBurst) wait to be written, Start
// flushes burstSettle later (so the rest of the burst joins the same
// commit), but never sooner than Window/5 after the previous flush ended:
// a trickle of changes is still written once per window, and a storm of
// changes makes at most about five commits per window. Flush errors are
// kept for LastFlush and retried at the next tick, or after raceRetry
// when the flush lost every attempt to other writers moving the branch.
// It fits controller-runtime's manager.Runnable.
//
// With a Fence epoch, Start flushes at once, writing the epoch even when
// nothing else is pending, so a former leader is fenced from the first
// moment; once a flush is refused with ErrFenced, Start stops flushing
// (no retry, no last flush) and returns when ctx ends. With Exists set,
// it also collects the status files of deleted Rollouts (Collect) at once
// and then every CollectInterval.
func (w *Writer) Start(ctx context.Context) error {
	var collecting sync.WaitGroup
	defer collecting.Wait()
	if w.opts.Exists != nil {
		collecting.Go(func() { w.collectEvery(ctx) })
	}
	first := w.opts.Window
	if w.opts.Fence.Epoch > 0 {
		first = 0
	}
	t := time.NewTimer(first)
	defer t.Stop()
	due := time.Now().Add(first)
	for {
		select {
		case <-ctx.Done():
			if w.isFenced() {
				return nil
			}
			if w.Pending() {
				final, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalFlushTimeout)
				_, _ = w.Flush(final)
				cancel()
			}
			return nil
		case <-w.burst:
			w.mu.Lock()
			bursting, last := w.bursting(), w.last.at
			w.mu.Unlock()
			if !bursting {
				// Written since the token was left.
				continue
			}
			at := time.Now().Add(burstSettle)
			if gap := last.Add(w.opts.Window / 5); gap.After(at) {
				at = gap
			}
			if at.Before(due) {
				t.Reset(time.Until(at))
				due = at
			}
		case <-t.C:
			next := w.opts.Window
			if w.Pending() || w.needsClaim() {
				// A flush that lost every race with other writers tries
				// again soon, not a whole window later.
				_, err := w.Flush(ctx)
				if errors.Is(err, ErrNonFastForward) {
					next = min(next, raceRetry)
				}
				if errors.Is(err, ErrFenced) {
					// Another replica leads: nothing more to write.
					<-ctx.Done()
					return nil
				}
			}
			t.Reset(next)
			due = time.Now().Add(next)
		}
	}
}

// claiming reports whether the branch is not yet known to hold the
// Fence's epoch. Caller holds mu.
func (w *Writer) claiming() bool { return w.opts.Fence.Epoch > 0 && !w.claimed }

// needsClaim is claiming for Start.
func (w *Writer) needsClaim() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.claiming()
}

// isFenced reports whether a flush was refused with ErrFenced.
func (w *Writer) isFenced() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fenced != nil
}

// raceRetry is how soon Start flushes again after a flush lost every
// attempt to other writers moving the branch.
const raceRetry = time.Second

// burstSettle is how long Start lets a burst of changes gather before it
// flushes early.
const burstSettle = 100 * time.Millisecond

// NeedLeaderElection makes controller-runtime run the Writer on the leader
// only: one writer per status branch.
func (w *Writer) NeedLeaderElection() bool { return true }

func sortedKeys(m map[string]RolloutState) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// statusHeader ends the fixed header RenderStatus writes after its first
// (per-Rollout) comment line.
var statusHeader = []byte("\n# Do not edit: the controller overwrites this file.\n" +
	"apiVersion: " + StatusAPIVersion + "\nkind: " + StatusKind + "\n")

// isStatusFile reports whether data is a status file. A file that starts
// as RenderStatus writes it is one without parsing: the check runs for
// every changed file on every push attempt, inside the window in which
// another writer can win the race.
func isStatusFile(data []byte) bool {
	if bytes.HasPrefix(data, []byte("# Progress of Rollout ")) {
		if i := bytes.IndexByte(data, '\n'); i > 0 && bytes.HasPrefix(data[i:], statusHeader) {
			return true
		}
	}
	_, ok, err := ParseStatus(data)
	return ok && err == nil
}
