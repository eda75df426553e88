package gitsource

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
)

// repositoryCheck bounds the time between two fetches of the tracked
// branch of a Repository that nothing else fetches (no gate waits), or
// its interval when longer: the status stays current without polling
// Git every few seconds for every Repository.
const repositoryCheck = time.Minute

// RepositoryReconciler writes each Repository's status: Ready says whether
// the last fetch of the tracked branch and the last write of progress
// succeeded, and the status names the tracked branch's head and the status
// branch's last commit. The fetches of the Rollout controller and the
// status writers report their outcome as they happen (Pool.changed);
// when nothing has fetched for repositoryCheck, the reconciler fetches
// itself. The status is written only when it changes.
type RepositoryReconciler struct {
	client.Client

	git *Pool
}

// recheckFloor is the shortest wait before the next check of a
// Repository whose fetch took longer than its interval.
const recheckFloor = 50 * time.Millisecond

// Reconcile brings one Repository's status up to date.
func (r *RepositoryReconciler) Reconcile(ctx context.Context, req reconcile.Request) (result reconcile.Result, retErr error) {
	// The next check (checkIfDue) is due an interval after this one's
	// start, not after its end: a fetch and a status write take a second
	// and more on a loaded machine, and gates polled every 5 s waited 6-7 s.
	now := r.git.defaults.now()
	checked := false
	defer func() {
		if checked && result.RequeueAfter > 0 {
			result.RequeueAfter = max(result.RequeueAfter-r.git.defaults.now().Sub(now), recheckFloor)
		}
	}()
	repo := &v1alpha1.Repository{}
	// Read as the Rollout controller reads it (uncached), so both open the
	// repository with the same spec.
	if err := r.git.reader.Get(ctx, req.NamespacedName, repo); err != nil {
		if apierrors.IsNotFound(err) {
			r.git.close(req.NamespacedName)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	// A shard caches only its own Repositories (--watch-label-selector):
	// one that this instance's Rollouts use but another shard owns has
	// its status written by that shard alone; this one only fetches it
	// while one of its Rollouts waits at a gate.
	if err := r.Get(ctx, req.NamespacedName, &v1alpha1.Repository{}); apierrors.IsNotFound(err) {
		e, err := r.git.forRepository(ctx, repo)
		if err != nil {
			return reconcile.Result{}, nil
		}
		if next, gated := r.git.checkIfDue(ctx, e, now); gated {
			checked = true
			return reconcile.Result{RequeueAfter: next}, nil
		}
		return reconcile.Result{}, nil
	}
	patcher := newRepositoryPatcher(r.Client, repo)
	defer func() {
		if err := patcher.patch(ctx, repo); err != nil && !apierrors.IsNotFound(err) {
			retErr = kerrors.NewAggregate([]error{retErr, err})
		}
	}()
	e, err := r.git.forRepository(ctx, repo)
	if err != nil {
		// No Secret, or one that gitsync cannot use. A Secret is read by
		// name (rollgate may get Secrets, never list or watch them), so
		// look again later: every interval while a Rollout waits at a
		// gate on the Repository (a fixed Secret reopens it, and its
		// first fetch wakes every gate), else every repositoryCheck.
		conditions.MarkFalse(repo, v1alpha1.ReadyCondition, v1alpha1.ReasonGitError, "%s", err.Error())
		if len(r.git.gatedRollouts(ctx, req.NamespacedName)) > 0 {
			return reconcile.Result{RequeueAfter: min(r.git.specInterval(repo.Spec), repositoryCheck)}, nil
		}
		return reconcile.Result{RequeueAfter: repositoryCheck}, nil
	}
	next, _ := r.git.checkIfDue(ctx, e, now)
	checked = true
	markRepository(repo, e)
	return reconcile.Result{RequeueAfter: next}, nil
}

func (r *RepositoryReconciler) setupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.Repository{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(r.git.changed.source(0)).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(r.git.defaults.Concurrent, 1)}).
		Complete(r)
}

// checkIfDue fetches the tracked branch of e when it never tried to, a
// push webhook marked it stale, or nothing fetched (or tried to) for
// max(interval, repositoryCheck); and every branch on which a Rollout
// waits at a gate for an approval merged in Git (the tracked one or
// another) every interval. It returns when the next check is due and
// whether a gate waits; the outcome is in e.health.
func (g *Pool) checkIfDue(ctx context.Context, e *Repo, now time.Time) (time.Duration, bool) {
	gated := g.gatedBranches(ctx, e)
	branches := []string{e.branch}
	for _, b := range gated {
		if b != e.branch {
			branches = append(branches, b)
		}
	}
	next := max(g.interval(e), repositoryCheck)
	for _, b := range branches {
		every := max(g.interval(e), repositoryCheck)
		if slices.Contains(gated, b) {
			every = g.interval(e)
		}
		e.mu.Lock()
		last, stale := e.polled[b], e.stale
		due := (stale && b == e.branch) || last.IsZero() || now.Sub(last) >= every
		if due && b == e.branch {
			// A push that arrives during the fetch marks it stale again.
			e.stale = false
		}
		e.mu.Unlock()
		if !due {
			next = min(next, every-now.Sub(last))
			continue
		}
		_ = g.fetch(ctx, e, b, now)
		next = min(next, every)
	}
	return next, len(gated) > 0
}

// gatedBranches returns the branches on which Rollouts of e wait at a
// gate for an approval merged in Git, and the tracked branch while a
// freeze from Git holds one (a merge lifts it).
func (g *Pool) gatedBranches(ctx context.Context, e *Repo) []string {
	var out []string
	for _, ro := range g.rolloutsOf(ctx, e.obj, func(ro *v1alpha1.Rollout) bool {
		return ro.Status.AwaitingApproval != nil || waitsForFreeze(ro)
	}) {
		b := cmp.Or(ro.Spec.Git.Branch, e.branch)
		if ro.Status.AwaitingApproval == nil {
			b = e.branch // the freezes file is on the Repository's branch
		}
		if !slices.Contains(out, b) {
			out = append(out, b)
		}
	}
	return out
}

// waitsForFreeze reports whether a freeze or window holds ro (the
// Progressing reason its last reconcile wrote).
func waitsForFreeze(ro *v1alpha1.Rollout) bool {
	return conditions.GetReason(ro, v1alpha1.ProgressingCondition) == v1alpha1.ReasonWaitingForFreeze
}

// gitHealth is what the last fetch and the last status flush of a
// repository said, for its Repository's status.
type gitHealth struct {
	fetchErr error
	// tracked is set once a fetch of the tracked branch succeeded; head
	// is that branch's head at the last such fetch ("" when the branch
	// does not exist), headAt when that head was first fetched.
	tracked bool
	head    string
	headAt  time.Time

	flushErr error
	// statusCommit is the status branch's head after the last successful
	// flush.
	statusCommit string
}

// fetched records a fetch (of the tracked branch when tracked) and
// reports whether the Repository's status may change.
func (h *gitHealth) fetched(tracked bool, head string, at time.Time, err error) bool {
	changed := errText(h.fetchErr) != errText(err)
	h.fetchErr = err
	if tracked && err == nil && (!h.tracked || head != h.head) {
		h.tracked, h.head, h.headAt, changed = true, head, at, true
	}
	return changed
}

// flushed records a status flush and reports whether the Repository's
// status may change.
func (h *gitHealth) flushed(commit string, err error) bool {
	changed := errText(h.flushErr) != errText(err)
	h.flushErr = err
	if err == nil && commit != "" && commit != h.statusCommit {
		h.statusCommit, changed = commit, true
	}
	return changed
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// markRepository writes what e last saw into repo's status. Errors come
// from gitsync, which redacts credentials out of them.
func markRepository(repo *v1alpha1.Repository, e *Repo) {
	e.mu.Lock()
	h := e.health
	e.mu.Unlock()
	st := &repo.Status
	if h.head != "" && h.head != st.LastFetchedCommit {
		st.LastFetchedCommit = h.head
		st.LastFetchTime = &metav1.Time{Time: h.headAt.UTC().Truncate(time.Second)}
	}
	if h.statusCommit != "" {
		st.LastStatusCommit = h.statusCommit
	}
	failed := ""
	switch {
	case h.fetchErr != nil:
		failed = h.fetchErr.Error()
	case h.flushErr != nil:
		failed = h.flushErr.Error()
	case h.head == "":
		failed = gitsync.ErrBranchNotFound.Error() + ": " + e.branch + " in " + e.clone.String()
	}
	if failed != "" {
		conditions.MarkFalse(repo, v1alpha1.ReadyCondition, v1alpha1.ReasonGitError, "%s", strings.TrimSpace(failed))
		return
	}
	// The message depends on the status only, not on what this process
	// has done yet, so a restart does not rewrite it.
	msg := "last fetch of " + e.branch + " succeeded"
	if st.LastStatusCommit != "" {
		msg = "last fetch of " + e.branch + " and last write to " + e.statusBranch + " succeeded"
	}
	conditions.MarkTrue(repo, v1alpha1.ReadyCondition, v1alpha1.ReasonGitReachable, "%s", msg)
}

// repositoryPatcher writes a Repository's status in one merge patch, only
// when it changed since the last write (as the Rollout controller writes
// a Rollout's).
type repositoryPatcher struct {
	c      client.Client
	before *v1alpha1.Repository
}

func newRepositoryPatcher(c client.Client, repo *v1alpha1.Repository) *repositoryPatcher {
	return &repositoryPatcher{c: c, before: repo.DeepCopy()}
}

// patch writes the status if it changed; observedGeneration records the
// generation this reconcile acted on.
func (p *repositoryPatcher) patch(ctx context.Context, repo *v1alpha1.Repository) error {
	repo.Status.ObservedGeneration = repo.Generation
	if equality.Semantic.DeepEqual(p.before.Status, repo.Status) {
		return nil
	}
	patch := client.MergeFromWithOptions(p.before.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if err := p.c.Status().Patch(ctx, repo, patch, client.FieldOwner("rollgate")); err != nil {
		return err
	}
	p.before = repo.DeepCopy()
	return nil
}
