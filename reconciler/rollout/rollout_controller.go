package rollout

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/luascripts"
	"github.com/rollgate/rollgate/reconciler/analysis"
	"github.com/rollgate/rollgate/reconciler/budget"
	"github.com/rollgate/rollgate/reconciler/gitsource"
	"github.com/rollgate/rollgate/reconciler/workload"
	"github.com/rollgate/rollgate/strategy"
	"github.com/rollgate/rollgate/traffic"
)

// errSharedWorkload: another Rollout already releases the workload.
var errSharedWorkload = errors.New("the workload has another Rollout")

// movedRequeue is how soon a Rollout whose release moved is reconciled again.
const movedRequeue = 500 * time.Millisecond

// workloadPoll is how soon a Rollout whose workload is still moving (pods
// to come, to become ready or to go) is looked at again without an
// event. The pod, ReplicaSet and workload watches bring every one of those
// changes, and the one change no object announces, a pod becoming
// available minReadySeconds after it became Ready, has a timer of its own
// (Observation.AvailableAt); this only bounds the wait should the watches
// ever miss one, so it is as long as the release resync. At 1,000 releases
// a 0.5 s poll made 2,000 reconciles a second of nothing and kept the
// Rollouts that had an event waiting behind them; at 200 releases on a
// loaded cluster, whose ReplicaSet controller took a minute to make a pod,
// a 5 s poll was a third of every reconcile.
const workloadPoll = releaseResync

// letGoPoll is how soon a deleted Rollout whose workload is gone looks
// again at routers that do not carry the declared routes yet.
const letGoPoll = 5 * time.Second

// releaseResync bounds the time between two reconciles of a release in
// progress.
const releaseResync = 30 * time.Second

// Work-queue priorities of the Rollout controller (controller-runtime's
// priority queue serves higher ones first; watch events come at 0).
const (
	// priorityWoken: a fetch brought a change to the manifest of a
	// Rollout waiting at a gate (gitsource.Pool.Woken), or the Rollout's
	// spec changed (specChanged): a person is waiting for it.
	priorityWoken = 10
	// priorityInMotion: watch events of a Rollout whose release is in
	// motion (inMotion) and its look again after a move, so that in a
	// wave of releases those already started reach their gates before
	// new ones start (inMotionFirst).
	priorityInMotion = 5
	// priorityNormal: other watch events, a release that just moved to a
	// pause or a gate, a timer (pause, grace period, analysis, Git
	// interval) that is due.
	priorityNormal = 0
	// priorityPoll: a look again in case an event was missed (workload or
	// routers still moving, the release resync) and the GitSynced
	// condition after a status flush. They run when the queue has nothing
	// else ready, so a fleet of waiting Rollouts never delays one whose
	// pods or approval just arrived.
	priorityPoll = -10
)

// Finalizer keeps a Rollout until traffic is restored and its workload is
// handed back to the workload's own controller.
const Finalizer = "rollgate.dev/finalizer"

// Reconciler releases the workload of each Rollout step by step.
type Reconciler struct {
	client.Client
	// APIReader reads Secrets and the Lua ConfigMap without a cache.
	APIReader client.Reader
	Recorder  record.EventRecorder
	Options   Options
	// Routers builds the traffic routers of a Rollout.
	Routers traffic.Registry
	// Scripts caches the compiled Lua scripts, shared by every router.
	Scripts *luascripts.Library
	// Jobs runs the Job checks of analyses; nil refuses them.
	Jobs *analysis.JobProvider

	// repos opens the Repository a Rollout's spec.git names.
	repos *gitsource.Pool
	// workloadOpts are the workload adapters' options (OwnerIndexed once
	// Setup has registered workload.OwnerIndex).
	workloadOpts []workload.Option
	// routes watches the kinds named in customNetworkRefs (nil: none).
	routes *routeWatches
	// writes are the Rollout versions this controller's writes replaced.
	writes ownWrites
	// statusWrites are the times of the last status writes (countsEvery).
	statusWrites statusWrites
	// budgets gives places in the budgets of the release rules.
	budgets budget.Ledger
	// routeWrites are the versions of the routing objects that the
	// routers' own writes produced (their events wake no Rollout).
	routeWrites routeWrites
	// reached are the steps whose routes are in place without a grace
	// period (traffic.Options.Reached).
	reached traffic.Reached
}

// Reconcile moves one Rollout one step closer to its spec.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (result reconcile.Result, retErr error) {
	ro := &v1alpha1.Rollout{}
	if err := r.Get(ctx, req.NamespacedName, ro); err != nil {
		if apierrors.IsNotFound(err) {
			r.Options.Metrics.Forget(req.Namespace, req.Name)
			r.writes.forget(req.NamespacedName)
			r.statusWrites.forget(req.NamespacedName)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if r.writes.behind(req.NamespacedName, ro.ResourceVersion) {
		// The cache has not shown this controller's last write yet.
		prio := priorityNormal
		if inMotion(&ro.Status) {
			prio = priorityInMotion
		}
		return reconcile.Result{RequeueAfter: cacheLagPoll, Priority: &prio}, nil
	}
	defer r.recordMetrics(ro) // deferred first: runs after the status patch
	sc := newScope(ro, r.Options.now())
	last := r.statusWrites.last(req.NamespacedName)
	patcher := newStatusPatcher(r.Client, ro, sc.now, last)
	read := ro.ResourceVersion
	defer func() {
		var err error
		if !sc.planAgain {
			r.updateStatus(sc)
			err = r.persist(ctx, sc, patcher)
		}
		r.recordEvents(sc)
		if ro.ResourceVersion != read {
			r.writes.wrote(req.NamespacedName, sc.replaced)
		}
		if rec := patcher.record(); rec != last {
			r.statusWrites.set(req.NamespacedName, rec)
		}
		if due := patcher.countsDue; !due.IsZero() && err == nil {
			result = lookAgainBy(result, due.Sub(sc.now))
		}
		if err != nil {
			if !apierrors.IsNotFound(err) {
				retErr = kerrors.NewAggregate([]error{retErr, err})
			}
			return
		}
		if sc.gitState != nil && sc.git != nil {
			sc.git.QueueProgress(ctx, r.Client, *sc.gitState)
		}
	}()

	if ro.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(ro, Finalizer) {
		controllerutil.AddFinalizer(ro, Finalizer)
		patcher.finalizersOnly = true
		return reconcile.Result{Requeue: true}, nil
	}
	if !ro.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(ro, Finalizer) {
		return reconcile.Result{}, nil
	}
	res, err := r.reconcileRelease(ctx, sc, patcher)
	if res.Priority == nil {
		// A woken Rollout's priority would otherwise stay with its requeues.
		res.Priority = new(priorityNormal)
	}
	return res, err
}

// lookAgainBy is res, requeued within d at the latest.
func lookAgainBy(res reconcile.Result, d time.Duration) reconcile.Result {
	if res.RequeueAfter == 0 || res.RequeueAfter > d {
		res.RequeueAfter = d
	}
	if res.Priority == nil {
		res.Priority = new(priorityNormal)
	}
	return res
}

// reconcileRelease runs the phases of one reconcile in order. The
// observe… phases only read (the workload, the objects a release needs,
// analysis, Git); every write is in an act… phase: claim the workload for
// the webhook, keep the traffic the status asks for, then — after the
// planner decided and its status is persisted — move the workload and the
// traffic, start the Jobs of Job checks, call the hooks the plan asks for,
// and write to Git. updateStatus (deferred in Reconcile) writes the
// conditions from what the phases found.
func (r *Reconciler) reconcileRelease(ctx context.Context, sc *scope, patcher *statusPatcher) (reconcile.Result, error) {
	if err := r.observeWorkload(ctx, sc); err != nil {
		if deleting(sc.ro) && workloadGone(err) {
			return r.actLetGoWithoutWorkload(ctx, sc)
		}
		return r.stallOrRetry(sc, err)
	}
	if err := r.actClaimWorkload(ctx, sc); err != nil {
		return r.stallOrRetry(sc, err)
	}
	if err := r.observeDependencies(ctx, sc); err != nil {
		return r.stallOrRetry(sc, err)
	}
	if err := r.observeAnalysis(ctx, sc); err != nil {
		return r.stallOrRetry(sc, err)
	}
	if err := r.observeGroup(ctx, sc); err != nil {
		return r.stallOrRetry(sc, err)
	}
	if err := r.actOpenRepository(ctx, sc); err != nil {
		sc.gitReadErr = err // without Git no approval from Git counts: gates hold
	} else if err := r.observeApprovals(ctx, sc); err != nil {
		sc.gitReadErr = err
	}
	r.observeFleet(ctx, sc)
	r.observeReleaseRules(ctx, sc)
	r.actKeepTraffic(ctx, sc)

	// A release whose new traffic the routers confirmed at once is
	// planned again (actOnRelease).
	moved := false
	for round := 1; ; round++ {
		previous := sc.plan
		if err := r.plan(ctx, sc); err != nil {
			return reconcile.Result{}, nil // Stalled with InvalidSpec; a spec change triggers the next reconcile
		}
		moved = moved || sc.moved
		// The status is the planner's only memory: persist a new step or
		// state before acting on it, so a crash right after the action
		// cannot bring back the old state's traffic or pods.
		if sc.moved {
			r.updateStatus(sc)
			if err := r.persist(ctx, sc, patcher); err != nil {
				return reconcile.Result{}, err
			}
		}
		again, err := r.actOnRelease(ctx, sc, previous)
		if err != nil {
			return r.stallOrRetry(sc, err)
		}
		if !again || round == planRounds {
			sc.planAgain = again && !sc.plan.Released
			break
		}
	}
	sc.moved = moved
	r.actStartChecks(ctx, sc)
	r.actHooks(ctx, sc)
	if err := r.actOnGit(ctx, sc); err != nil {
		sc.gitWriteErr = err
		log.FromContext(ctx).Error(err, "writing to Git")
	}
	if sc.plan.Released {
		return r.actLetGo(ctx, sc)
	}
	return r.requeueResult(sc), nil
}

// persist writes the Rollout's status and finalizers if they changed, and
// records the version a write replaced (ownWrites).
func (r *Reconciler) persist(ctx context.Context, sc *scope, patcher *statusPatcher) error {
	version := sc.ro.ResourceVersion
	err := patcher.patch(ctx, sc.ro)
	if sc.ro.ResourceVersion != version {
		sc.replaced = append(sc.replaced, version)
	}
	return err
}

// planRounds bounds the plans of one reconcile. A reconcile whose last
// plan moved and whose routers confirmed the move at once (actOnRelease
// says again) leaves its status to the next reconcile, which plans again
// right away (planAgain): the status persisted before the move says
// everything a restart needs, and a write now would say only that the
// routers confirmed, which the next plan's write says too. The next
// reconcile waits for the cache to show this one's writes; a third plan
// here would act on objects the cache shows as they were before them.
const planRounds = 2

// actOnRelease moves the workload and the traffic as the plan says. again
// says to plan once more with what the routers just answered: the planner
// judged the traffic the status asked for before the move, so a step whose
// new traffic is confirmed at once would otherwise wait for another
// reconcile (in a wave of releases, another turn of the whole work queue)
// to reach its gate. The workload is moved by the first plan, and by a
// later one only if it asks for another action (previous is the plan
// before, nil in the first round): the cache may not show the first
// round's writes yet, and the same action taken again from it would be
// taken on stale objects.
func (r *Reconciler) actOnRelease(ctx context.Context, sc *scope, previous *strategy.Plan) (again bool, err error) {
	if previous == nil || !sameWorkloadAction(previous, sc.plan) {
		if err := r.actOnWorkload(ctx, sc); err != nil {
			return false, err
		}
	}
	judged := sc.traffic.asked
	if err := r.actOnTraffic(ctx, sc); err != nil {
		return false, err
	}
	return sc.moved && sc.traffic.done && !sc.traffic.asked.Equal(judged), nil
}

// sameWorkloadAction reports whether two plans ask the workload for the
// same thing.
func sameWorkloadAction(a, b *strategy.Plan) bool {
	return a != nil && b != nil && a.Workload == b.Workload && a.CanaryReplicas == b.CanaryReplicas &&
		a.MaxUnavailable == b.MaxUnavailable && a.Status.CanaryRevision == b.Status.CanaryRevision &&
		a.Status.CurrentStepIndex == b.Status.CurrentStepIndex
}

// observeWorkload reads the workload, after making sure this Rollout is
// the one that releases it.
func (r *Reconciler) observeWorkload(ctx context.Context, sc *scope) error {
	if err := r.observeOwnership(ctx, sc.ro); err != nil {
		return err
	}
	a, err := workload.For(r.Client, sc.ro, r.Options.now, r.workloadOpts...)
	if err != nil {
		return err
	}
	sc.adapter = a
	obs, err := a.Observe(ctx)
	if err != nil {
		return err
	}
	sc.workload = obs
	return nil
}

// observeOwnership fails with errSharedWorkload when an older enabled
// Rollout names the same workload: only that one releases it (the
// admission webhook holds the workload for it too), and this one must not
// touch the workload at all.
func (r *Reconciler) observeOwnership(ctx context.Context, ro *v1alpha1.Rollout) error {
	if ro.Spec.Disabled || !ro.DeletionTimestamp.IsZero() {
		return nil
	}
	ref := ro.Spec.WorkloadRef
	owner, err := workload.RolloutFor(ctx, r.Client, ro.Namespace, ref.Kind, ref.Name)
	if err != nil {
		return err
	}
	if owner != nil && owner.Name != ro.Name {
		return fmt.Errorf("%w: spec.workloadRef names %s %s, which Rollout %s already releases; "+
			"give each workload one Rollout (delete this one, or set spec.disabled on one of them)",
			errSharedWorkload, ref.Kind, ref.Name, owner.Name)
	}
	return nil
}

// actClaimWorkload labels the workload so that the admission webhook
// holds its next template change.
func (r *Reconciler) actClaimWorkload(ctx context.Context, sc *scope) error {
	ro := sc.ro
	if !ro.DeletionTimestamp.IsZero() || ro.Spec.Disabled {
		return nil
	}
	if err := sc.adapter.Cover(ctx); err != nil {
		return fmt.Errorf("labelling %s %s for the admission webhook: %w", ro.Spec.WorkloadRef.Kind, ro.Spec.WorkloadRef.Name, err)
	}
	return nil
}

// actKeepTraffic keeps the traffic the current status asks for in place
// (a route re-applied by the GitOps tool is put back here), so the planner
// knows whether it is. It first makes sure the kinds the routing names
// are watched.
func (r *Reconciler) actKeepTraffic(ctx context.Context, sc *scope) {
	r.routes.ensure(ctx, sc.ro)
	opts := r.trafficOptions(ctx)
	opts.RevisionLabel = sc.workload.RevisionLabel
	router, err := r.Routers.New(recordingClient{Client: r.Client, writes: &r.routeWrites}, sc.ro, opts)
	if err != nil {
		sc.routerErr = err
		if deleting(sc.ro) && nothingToRestore(err) {
			// A routing rollgate cannot act on has no route of rollgate's
			// to restore: deletion does not wait for it.
			sc.routerErr = nil
			sc.traffic = trafficAnswer{asked: strategy.Traffic{Mode: strategy.TrafficOriginal}, sent: true, done: true}
		}
		return
	}
	sc.router = router
	desired := strategy.DesiredTraffic(&sc.ro.Spec, &sc.ro.Status)
	if deleting(sc.ro) {
		desired = strategy.Traffic{Mode: strategy.TrafficOriginal}
	}
	r.sendTraffic(ctx, sc, desired)
}

// nothingToRestore reports whether a router error means that no route of
// a deleted Rollout is left to restore: the routing objects are gone, or
// the routing is one rollgate never acted on.
func nothingToRestore(err error) bool {
	return errors.Is(err, traffic.ErrRouteNotFound) || errors.Is(err, traffic.ErrInvalid) ||
		errors.Is(err, traffic.ErrConflict) || apierrors.IsNotFound(err)
}

// plan asks the planner for the next action and records its status and
// event; the planner's conditions are written by updateStatus.
func (r *Reconciler) plan(ctx context.Context, sc *scope) error {
	ro := sc.ro
	obs := observed(sc)
	before := ro.Status.DeepCopy()
	p, err := strategy.Decide(&ro.Spec, &ro.Status, obs, sc.now)
	if err == nil && strategy.StartsRelease(before, &p.Status) {
		// A budget gates only the start of a release: asked here, once
		// the planner would start one, and planned again when it waits.
		if q := r.queueTicket(ctx, sc); q != nil {
			obs.Queue = q
			p, err = strategy.Decide(&ro.Spec, &ro.Status, obs, sc.now)
		}
	}
	sc.plan = &p
	sc.moved = r.applyPlan(sc)
	r.recordTransition(sc, before, obs)
	return err
}

// observed builds the planner's view of the world from the scope.
func observed(sc *scope) strategy.Observed {
	o := sc.workload
	obs := strategy.Observed{
		Replicas:           o.Replicas,
		UpdateRevision:     o.Revision,
		Held:               o.Held,
		HeldWithoutRollout: o.HeldWithoutRollout,
		ApprovalsNeedProof: sc.repository != nil && sc.repository.Spec.Approvals.Enabled(),
		MaxUnavailable:     o.MaxUnavailable,
		Leaving:            o.Leaving,
		Pods:               map[string]strategy.PodCounts{},
		Approvals:          countedApprovals(sc),
		Deleting:           !sc.ro.DeletionTimestamp.IsZero(),
		Missing:            sc.missing,
		Invalid:            sc.analysis.invalid,
		Fleet:              sc.fleet,
		Freezes:            sc.freezes,
		Group:              sc.group,
	}
	if obs.Invalid == nil && sc.groupInvalid != nil {
		obs.Invalid = sc.groupInvalid
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
	obs.TrafficDone = sc.traffic.done
	// TrafficChangedAt stays zero: the routers enforce gracePeriodSeconds
	// themselves (they answer "not done" until it has passed).
	if a := sc.analysis.step; a != nil {
		obs.StepAnalysis = strategy.AnalysisResult{Phase: strategy.AnalysisPhase(a.Phase), Message: a.Message}
	}
	obs.BackgroundAnalysis = sc.analysis.background
	return obs
}

// stallOrRetry records the error a reconcile stopped on: a spec the
// controller cannot act on stalls (no retry until the spec changes), a
// missing workload or route is looked at again in 30 s, anything else is
// retried with backoff. updateStatus turns it into conditions, except for
// a conflict (an object changed since it was read), retried silently.
func (r *Reconciler) stallOrRetry(sc *scope, err error) (reconcile.Result, error) {
	f := &failure{message: err.Error()}
	var res reconcile.Result
	var retErr error
	switch {
	case errors.Is(err, workload.ErrUnsupported), errors.Is(err, workload.ErrInvalidControl), errors.Is(err, traffic.ErrInvalid), errors.Is(err, errSharedWorkload),
		errors.Is(err, traffic.ErrConflict), errors.Is(err, strategy.ErrInvalidSpec):
		f.reason, f.stalled, f.final = v1alpha1.ReasonInvalidSpec, true, true
	case apierrors.IsNotFound(err):
		f.reason, f.stalled = v1alpha1.ReasonWorkloadNotFound, true
		res.RequeueAfter = 30 * time.Second
	case errors.Is(err, traffic.ErrRouteNotFound):
		f.reason, f.stalled = v1alpha1.ReasonTrafficError, true
		res.RequeueAfter = 30 * time.Second
	case apierrors.IsConflict(err):
		// An object changed since it was read (often by this controller's
		// own last write, which the cache did not show yet): retried with
		// backoff from a fresh read, and not reported in the conditions,
		// where it made a Ready/Reconciling flip and back (two status
		// writes) for what the next try resolves.
		return res, err
	default:
		f.reason, retErr = v1alpha1.ReasonProgressing, err
	}
	if f.stalled && r.Recorder != nil {
		if c := conditions.Get(sc.ro, v1alpha1.StalledCondition); c == nil || c.Status != metav1True || c.Message != f.message {
			r.Recorder.Event(sc.ro, corev1.EventTypeWarning, f.reason, f.message) // on the transition only
		}
	}
	sc.failure = f
	return res, retErr
}

// actLetGo removes the finalizer (deleted Rollout) or the webhook label
// (disabled Rollout) once the workload is back with its own controller,
// or marked to stay held (WorkloadLeaveHeld: the label stays, so the
// webhook keeps holding it).
func (r *Reconciler) actLetGo(ctx context.Context, sc *scope) (reconcile.Result, error) {
	if sc.plan.Workload != strategy.WorkloadLeaveHeld {
		if err := sc.adapter.Uncover(ctx); err != nil && !apierrors.IsNotFound(err) {
			return reconcile.Result{}, err
		}
	}
	if deleting(sc.ro) {
		r.removeFinalizer(sc)
	}
	return reconcile.Result{}, nil
}

// removeFinalizer lets a deleted Rollout go: its status file leaves the
// status branch with the next flush, and the finalizer goes with the
// deferred status patch.
func (r *Reconciler) removeFinalizer(sc *scope) {
	if sc.git != nil {
		sc.git.Writer().Remove(sc.ro.Namespace, sc.ro.Name)
	}
	controllerutil.RemoveFinalizer(sc.ro, Finalizer)
}

// deleting reports whether ro has a deletion timestamp.
func deleting(ro *v1alpha1.Rollout) bool { return !ro.DeletionTimestamp.IsZero() }

// workloadGone reports whether a workload read failed for good: the
// workload does not exist, is not something rollgate releases, or its
// control annotation cannot be read. A deleted Rollout then has no
// workload to hand back and must not wait for one.
func workloadGone(err error) bool {
	return apierrors.IsNotFound(err) || errors.Is(err, workload.ErrUnsupported) || errors.Is(err, workload.ErrInvalidControl)
}

// actLetGoWithoutWorkload ends the deletion of a Rollout whose workload is
// gone: the routes go back to what Git declares where the routers can
// carry them (routes already deleted have nothing to restore), then the
// finalizer goes. A router that is only slow is waited for.
func (r *Reconciler) actLetGoWithoutWorkload(ctx context.Context, sc *scope) (reconcile.Result, error) {
	if err := r.actOpenRepository(ctx, sc); err != nil {
		sc.gitReadErr = err // the status file stays in Git; deletion does not wait for Git
	}
	r.actKeepTraffic(ctx, sc) // deleting: asks for the declared routes
	if t := sc.traffic; !t.done {
		if t.wait > 0 {
			return reconcile.Result{RequeueAfter: t.wait}, nil
		}
		if t.err != nil {
			return r.stallOrRetry(sc, t.err)
		}
		return reconcile.Result{RequeueAfter: letGoPoll}, nil
	}
	r.removeFinalizer(sc)
	return reconcile.Result{}, nil
}

// requeueResult says when to look again and how urgently: a poll (nothing
// moved, and the workload or the routers are still moving, or only the
// resync is due) waits behind every other ready reconcile; a timer or a
// release that moved does not.
func (r *Reconciler) requeueResult(sc *scope) reconcile.Result {
	d := r.requeue(sc)
	if d == 0 {
		return reconcile.Result{}
	}
	prio := priorityNormal
	waiting := (!sc.workloadDone && d == workloadPoll) || (!sc.traffic.done && sc.traffic.wait == 0)
	switch {
	case !sc.moved && (d == releaseResync || waiting):
		prio = priorityPoll
	case inMotion(&sc.ro.Status):
		prio = priorityInMotion
	}
	return reconcile.Result{RequeueAfter: d, Priority: &prio}
}

// inMotion reports whether a release is between two waits: a step
// bringing its pods up, moving traffic, analysing or finishing, or a
// rollback, but not a pause or a gate.
func inMotion(st *v1alpha1.RolloutStatus) bool {
	switch {
	case st.CurrentStepState == v1alpha1.StepRollingBack:
		return true
	case st.Phase != v1alpha1.PhaseProgressing:
		return false
	}
	return st.CurrentStepState != v1alpha1.StepPaused
}

// requeue says when to look again. A release that just moved is looked at
// again soon: its own status changes trigger no watch event, and the next
// state may already hold. A workload still moving is looked at again when
// its next pod becomes available (minReadySeconds), else only after
// workloadPoll: its pods and ReplicaSets are watched.
func (r *Reconciler) requeue(sc *scope) time.Duration {
	d := sc.plan.RequeueAfter
	if w := sc.traffic.wait; w > 0 && (d == 0 || w < d) {
		d = w
	}
	// A move is looked at again soon; a workload the adapter has not
	// finished moving, later, even if a watch event is missed.
	if sc.moved && (d == 0 || d > movedRequeue) {
		d = movedRequeue
	}
	// A reconcile that left its status to the next one (planAgain) is
	// followed at once, as soon as the cache can show its writes.
	if sc.planAgain && d > cacheLagPoll {
		d = cacheLagPoll
	}
	moving := sc.plan.Workload != strategy.WorkloadKeep && !sc.workloadDone
	if at := sc.workload.AvailableAt; !at.IsZero() && (moving || inMotion(&sc.ro.Status)) {
		if a := max(at.Sub(sc.now), cacheLagPoll); d == 0 || a < d {
			d = a
		}
	}
	if moving && (d == 0 || d > workloadPoll) {
		d = workloadPoll
	}
	// During a release, look again now and then even without events, so a
	// route or Service re-applied by the GitOps tool is re-asserted.
	if ph := sc.ro.Status.Phase; (ph == v1alpha1.PhaseProgressing || ph == v1alpha1.PhasePaused) && (d == 0 || d > releaseResync) {
		d = releaseResync
	}
	if at := sc.analysis.nextAt; !at.IsZero() {
		if a := max(at.Sub(sc.now), time.Second); d == 0 || a < d {
			d = a
		}
	}
	return d
}
