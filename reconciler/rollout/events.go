package rollout

import (
	"context"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/metrics"
)

// inMotionFirst queues the Rollouts that an event handler maps an event to
// at priorityInMotion when their release is in motion (inMotion), and at
// the handler's own priority otherwise. In a wave of releases the events
// of the Rollouts that started then go before those of Rollouts yet to
// start, so the releases reach their gates one after another, each soon
// after its own pods are ready, instead of all together after the whole
// wave (every Rollout with an event waiting in a first-in, first-out
// queue, each taking a turn of the whole queue per step).
type inMotionFirst struct {
	handler.EventHandler
	rollouts client.Reader
	// woken counts the Rollouts queued (rollgate_rollout_wakeups_total).
	woken func(n int)
}

// eventsOf maps an event of source (the kind of the watched object) to
// Rollouts with fn, and queues them as inMotionFirst does, counting them
// (rollgate_rollout_wakeups_total). They are counted as queued: the map
// function runs for both copies of an updated object, whose Rollouts the
// handler queues once.
func (r *Reconciler) eventsOf(source string, fn handler.MapFunc) handler.EventHandler {
	woken := func(n int) { r.Options.Metrics.Woken(source, n) }
	return inMotionFirst{EventHandler: handler.EnqueueRequestsFromMapFunc(fn), rollouts: r.Client, woken: woken}
}

func (h inMotionFirst) Create(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	h.EventHandler.Create(ctx, e, h.queue(ctx, q))
}

func (h inMotionFirst) Update(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	h.EventHandler.Update(ctx, e, h.queue(ctx, q))
}

func (h inMotionFirst) Delete(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	h.EventHandler.Delete(ctx, e, h.queue(ctx, q))
}

func (h inMotionFirst) Generic(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	h.EventHandler.Generic(ctx, e, h.queue(ctx, q))
}

// queue is q, whose plain Add queues a Rollout in motion at
// priorityInMotion; a queue without priorities is returned as it is.
func (h inMotionFirst) queue(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
	pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request])
	if !ok {
		return q
	}
	return motionQueue{PriorityQueue: pq, ctx: ctx, rollouts: h.rollouts, woken: h.woken}
}

// motionQueue raises the priority of the plain adds of Rollouts in motion;
// adds with options (the handler's low priority for an unchanged object)
// pass through.
type motionQueue struct {
	priorityqueue.PriorityQueue[reconcile.Request]
	ctx      context.Context
	rollouts client.Reader
	woken    func(n int)
}

func (q motionQueue) Add(req reconcile.Request) {
	prio := priorityNormal
	var ro v1alpha1.Rollout
	// Read only (its status), so the cached Rollout is not copied: this
	// runs for every event of every pod of a release.
	if err := q.rollouts.Get(q.ctx, req.NamespacedName, &ro, client.UnsafeDisableDeepCopy); err == nil && inMotion(&ro.Status) {
		prio = priorityInMotion
	}
	q.AddWithOpts(priorityqueue.AddOpts{Priority: &prio}, req)
}

func (q motionQueue) AddWithOpts(o priorityqueue.AddOpts, reqs ...reconcile.Request) {
	if q.woken != nil {
		q.woken(len(reqs))
	}
	q.PriorityQueue.AddWithOpts(o, reqs...)
}

// specChanged queues a Rollout whose spec changed (its generation moved:
// an approval, an abort, a pause, a retry, written with `rollgate` or
// rendered from Git by the GitOps tool) at priorityWoken. Someone waits
// for it, so in a wave of releases it goes before the events of releases
// in motion. The queue keeps the higher of two priorities of one Rollout.
func (r *Reconciler) specChanged() handler.EventHandler {
	return handler.Funcs{
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(e.ObjectNew)}
			r.Options.Metrics.Woken(metrics.SourceSpec, 1)
			pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request])
			if !ok {
				q.Add(req)
				return
			}
			prio := priorityWoken
			pq.AddWithOpts(priorityqueue.AddOpts{Priority: &prio}, req)
		},
	}
}

// readChanged passes every event of a kind but the updates that change
// nothing rollgate reads of the object, as changed tells
// (workload.PodReadChanged and the like): the workload controllers and
// the kubelet write statuses far more often than what rollgate reads of
// them moves.
func readChanged[T client.Object](changed func(old, cur T) bool) predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		old, ok := e.ObjectOld.(T)
		cur, ok2 := e.ObjectNew.(T)
		return !ok || !ok2 || changed(old, cur)
	}}
}

// createdIf passes every event of a kind but the creations of the objects
// wakes rejects: a pod still starting (workload.PodCreateWakes), a canary
// Service's EndpointSlice without a ready endpoint yet
// (traffic.SliceServes).
func createdIf[T client.Object](wakes func(T) bool) predicate.Predicate {
	return predicate.Funcs{CreateFunc: func(e event.CreateEvent) bool {
		o, ok := e.Object.(T)
		return !ok || wakes(o)
	}}
}
