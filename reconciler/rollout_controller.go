package reconciler

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/luascripts"
	"github.com/rollgate/rollgate/reconciler/workload"
	"github.com/rollgate/rollgate/strategy"
	"github.com/rollgate/rollgate/traffic"
)

// movedRequeue is how soon a Rollout whose release moved is reconciled again.
const movedRequeue = 500 * time.Millisecond

// releaseResync bounds the time between two reconciles of a release in
// progress.
const releaseResync = 30 * time.Second

// Finalizer keeps a Rollout until traffic is restored and its workload is
// handed back to the workload's own controller.
const Finalizer = "rollgate.dev/finalizer"

// RolloutReconciler releases the workload of each Rollout step by step.
type RolloutReconciler struct {
	client.Client
	// APIReader reads Secrets and the Lua ConfigMap without a cache.
	APIReader client.Reader
	Recorder  record.EventRecorder
	Options   Options
	// Routers builds the traffic routers of a Rollout.
	Routers traffic.Registry
	// Scripts caches the compiled Lua scripts, shared by every router.
	Scripts *luascripts.Library

	git *gitRepos
	// routes watches the kinds named in customNetworkRefs (nil: none).
	routes *routeWatches
}

// release is everything one reconcile of a Rollout works with.
type release struct {
	ro      *v1alpha1.Rollout
	adapter workload.Adapter
	obs     workload.Observation
	router  traffic.Router
	git     *gitEntry
	repo    *v1alpha1.Repository
	now     time.Time
	// applied is the traffic last sent to the routers in this reconcile;
	// trafficDone, trafficWait and trafficE are their answer.
	applied     strategy.Traffic
	trafficDone bool
	trafficWait time.Duration
	trafficE    error
	// gitFailed is set when Git could not be read in this reconcile.
	gitFailed bool
	// analysisAt is when an analysis measurement is next due.
	analysisAt time.Time
}

// Reconcile moves one Rollout one step closer to its spec.
func (r *RolloutReconciler) Reconcile(ctx context.Context, req reconcile.Request) (result reconcile.Result, retErr error) {
	ro := &v1alpha1.Rollout{}
	if err := r.Get(ctx, req.NamespacedName, ro); err != nil {
		if apierrors.IsNotFound(err) {
			r.Options.Metrics.Forget(req.Namespace, req.Name)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	defer r.recordMetrics(ro) // deferred first: runs after the status patch
	patcher := newStatusPatcher(r.Client, ro)
	defer func() {
		if err := patcher.patch(ctx, ro); err != nil && !apierrors.IsNotFound(err) {
			retErr = kerrors.NewAggregate([]error{retErr, err})
		}
	}()

	if ro.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(ro, Finalizer) {
		controllerutil.AddFinalizer(ro, Finalizer)
		return reconcile.Result{Requeue: true}, nil
	}
	if !ro.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(ro, Finalizer) {
		return reconcile.Result{}, nil
	}
	return r.reconcileRelease(ctx, ro, patcher)
}

// reconcileRelease runs the phases of one reconcile in order: observe the
// workload, the routes, analysis and approvals; plan; act on the workload,
// the routes and Git; record.
func (r *RolloutReconciler) reconcileRelease(ctx context.Context, ro *v1alpha1.Rollout, patcher *statusPatcher) (reconcile.Result, error) {
	rel := &release{ro: ro, now: r.Options.now()}
	if err := r.observeWorkload(ctx, rel); err != nil {
		return r.stallOrRetry(ro, err)
	}
	r.observeTraffic(ctx, rel)
	if rel.router != nil {
		r.markTraffic(rel) // before a moved status is written
	}
	obs := r.observed(rel)
	if err := r.observeAnalysis(ctx, rel, &obs); err != nil {
		return reconcile.Result{}, err
	}
	if err := r.observeApprovals(ctx, rel, &obs); err != nil {
		// Without Git no approval from Git counts: gates hold, nothing else stops.
		rel.gitFailed = true
		r.markGit(ro, metav1False, v1alpha1.ReasonGitError, err.Error())
	}

	before := ro.Status.DeepCopy()
	plan, err := strategy.Decide(&ro.Spec, &ro.Status, obs, rel.now)
	moved := r.record(ro, plan)
	r.recordTransition(rel, before, obs)
	if err != nil {
		return reconcile.Result{}, nil // Stalled with InvalidSpec; a spec change triggers the next reconcile
	}
	// The status is the planner's only memory: persist a new step or state
	// before acting on it, so a crash right after the action cannot bring
	// back the old state's traffic or pods.
	if moved {
		if rel.git != nil && !rel.gitFailed {
			r.markGitPending(rel) // the new step is not in Git yet
		}
		if err := patcher.patch(ctx, ro); err != nil {
			return reconcile.Result{}, err
		}
	}
	if err := r.actOnWorkload(ctx, rel, plan); err != nil {
		return r.stallOrRetry(ro, err)
	}
	if wait, err := r.actOnTraffic(ctx, rel, plan); err != nil {
		return r.stallOrRetry(ro, err)
	} else if wait > 0 && (plan.RequeueAfter == 0 || wait < plan.RequeueAfter) {
		plan.RequeueAfter = wait
	}
	if err := r.actOnGit(ctx, rel, plan); err != nil {
		r.markGit(ro, metav1False, v1alpha1.ReasonGitError, err.Error())
		log.FromContext(ctx).Error(err, "writing to Git")
	}
	if plan.Released {
		return r.letGo(ctx, rel)
	}
	return reconcile.Result{RequeueAfter: r.requeue(rel, plan, moved)}, nil
}

// observeWorkload reads the workload and makes sure the webhook covers it.
func (r *RolloutReconciler) observeWorkload(ctx context.Context, rel *release) error {
	a, err := workload.For(r.Client, rel.ro)
	if err != nil {
		return err
	}
	rel.adapter = a
	if rel.ro.DeletionTimestamp.IsZero() && !rel.ro.Spec.Disabled {
		if err := a.Cover(ctx); err != nil {
			return fmt.Errorf("labelling %s %s for the admission webhook: %w", rel.ro.Spec.WorkloadRef.Kind, rel.ro.Spec.WorkloadRef.Name, err)
		}
	}
	obs, err := a.Observe(ctx)
	if err != nil {
		return err
	}
	rel.obs = obs
	return nil
}

// observeTraffic asks the routers for the traffic the current status wants,
// so the planner knows whether it is in place. It first makes sure the
// kinds the routing names are watched.
func (r *RolloutReconciler) observeTraffic(ctx context.Context, rel *release) {
	r.routes.ensure(ctx, rel.ro)
	router, err := r.Routers.New(r.Client, rel.ro, r.trafficOptions(ctx))
	if err != nil {
		rel.trafficE = err
		return
	}
	rel.router = router
	rel.applied = strategy.DesiredTraffic(&rel.ro.Spec, &rel.ro.Status)
	done, wait, err := r.applyTraffic(ctx, rel, rel.applied)
	rel.trafficDone, rel.trafficWait, rel.trafficE = done && wait == 0 && err == nil, wait, err
}

// observed builds the planner's view of the world.
func (r *RolloutReconciler) observed(rel *release) strategy.Observed {
	o := rel.obs
	obs := strategy.Observed{
		Replicas:       o.Replicas,
		UpdateRevision: o.Revision,
		Frozen:         o.Held,
		MaxUnavailable: o.MaxUnavailable,
		Pods:           map[string]strategy.PodCounts{},
		Approvals:      append([]v1alpha1.Approval(nil), rel.ro.Spec.Approvals...),
		Deleting:       !rel.ro.DeletionTimestamp.IsZero(),
	}
	if o.Held {
		obs.StableRevision = o.StableRevision
	}
	add := func(rev string, p workload.Pods) {
		if rev == "" {
			rev = "<other>"
		}
		c := obs.Pods[rev]
		c.Total += p.Total
		c.Ready += p.Ready
		obs.Pods[rev] = c
	}
	add(o.StableRevision, o.Stable)
	if o.CanaryRevision != o.StableRevision {
		add(o.CanaryRevision, o.Canary)
	}
	add("", o.Other)
	obs.TrafficDone = rel.trafficDone
	// TrafficChangedAt stays zero: the routers enforce gracePeriodSeconds
	// themselves (they answer "not done" until it has passed).
	return obs
}

// stallOrRetry maps an error: a spec the controller cannot act on stalls
// (no retry until the spec changes); anything else is retried with backoff.
func (r *RolloutReconciler) stallOrRetry(ro *v1alpha1.Rollout, err error) (reconcile.Result, error) {
	var reason string
	switch {
	case errors.Is(err, workload.ErrUnsupported), errors.Is(err, traffic.ErrInvalid),
		errors.Is(err, traffic.ErrConflict), errors.Is(err, strategy.ErrInvalidSpec):
		reason = v1alpha1.ReasonInvalidSpec
	case apierrors.IsNotFound(err), errors.Is(err, traffic.ErrRouteNotFound):
		reason = v1alpha1.ReasonWorkloadNotFound
		if errors.Is(err, traffic.ErrRouteNotFound) {
			reason = v1alpha1.ReasonTrafficError
		}
		r.markStalled(ro, reason, err.Error(), false)
		return reconcile.Result{RequeueAfter: 30 * time.Second}, nil
	default:
		r.markError(ro, err)
		return reconcile.Result{}, err
	}
	r.markStalled(ro, reason, err.Error(), true)
	return reconcile.Result{}, nil
}

// letGo removes the finalizer (deleted Rollout) or the webhook label
// (disabled Rollout) once the workload is back with its own controller.
func (r *RolloutReconciler) letGo(ctx context.Context, rel *release) (reconcile.Result, error) {
	if err := rel.adapter.Uncover(ctx); err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	if !rel.ro.DeletionTimestamp.IsZero() {
		if rel.git != nil {
			rel.git.writer.Remove(rel.ro.Namespace, rel.ro.Name)
		}
		controllerutil.RemoveFinalizer(rel.ro, Finalizer)
	}
	return reconcile.Result{}, nil
}

// requeue says when to look again. A release that just moved is looked at
// again soon: its own status changes trigger no watch event, and the next
// state may already hold.
func (r *RolloutReconciler) requeue(rel *release, plan strategy.Plan, moved bool) time.Duration {
	d := plan.RequeueAfter
	if moved && (d == 0 || d > movedRequeue) {
		d = movedRequeue
	}
	// During a release, look again now and then even without events, so a
	// route or Service re-applied by the GitOps tool is re-asserted.
	if ph := rel.ro.Status.Phase; (ph == v1alpha1.PhaseProgressing || ph == v1alpha1.PhasePaused) && (d == 0 || d > releaseResync) {
		d = releaseResync
	}
	if !rel.analysisAt.IsZero() {
		if a := max(rel.analysisAt.Sub(rel.now), time.Second); d == 0 || a < d {
			d = a
		}
	}
	if rel.ro.Status.AwaitingApproval != nil && rel.git != nil {
		if i := r.git.interval(rel.git); d == 0 || i < d {
			d = i
		}
	}
	return d
}
