package rollout

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// customRouteKey is the routeIndex value of an object a customNetworkRefs
// entry names: "<group>/<kind>/<name>" (the version does not matter, every
// version shows the same object).
func customRouteKey(gk schema.GroupKind, name string) string {
	return gk.Group + "/" + gk.Kind + "/" + name
}

// customRefKind returns the group, kind and version a customNetworkRefs
// entry names; ok is false for an entry that does not parse (the router
// reports it).
func customRefKind(ref v1alpha1.ObjectRef) (gvk schema.GroupVersionKind, ok bool) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil || ref.Kind == "" || ref.Name == "" {
		return schema.GroupVersionKind{}, false
	}
	return gv.WithKind(ref.Kind), true
}

// routeWatches adds to the running Rollout controller a watch of each kind
// of object that Rollouts name in customNetworkRefs (Istio VirtualService
// and DestinationRule, APISIX, Traefik, ...), the first time a Rollout
// names that kind: the kinds are not known when the controller starts, and
// their CRDs may be installed later. Events map to the Rollouts through
// routeIndex, so that a GitOps re-apply of a routing object is undone at
// once rather than at the next resync.
//
// The watches are metadata-only: an event is all that is needed, the
// routers read the objects themselves. A kind whose CRD is not installed
// is skipped, and tried again at the Rollout's next reconcile.
type routeWatches struct {
	ctrl   controller.Controller
	cache  cache.Cache
	mapper meta.RESTMapper
	// rollouts maps an event of an object of a kind to its Rollouts and
	// queues them.
	rollouts func(gk schema.GroupKind) handler.EventHandler
	// predicates filter the events of every such watch.
	predicates []predicate.TypedPredicate[client.Object]

	mu      sync.Mutex
	watched map[schema.GroupKind]bool
	missing map[schema.GroupKind]bool // logged once until found
}

func newRouteWatches(c controller.Controller, ca cache.Cache, mapper meta.RESTMapper, rollouts func(schema.GroupKind) handler.EventHandler,
	predicates ...predicate.TypedPredicate[client.Object]) *routeWatches {
	return &routeWatches{ctrl: c, cache: ca, mapper: mapper, rollouts: rollouts, predicates: predicates,
		watched: map[schema.GroupKind]bool{}, missing: map[schema.GroupKind]bool{}}
}

// ensure starts the watches of the kinds ro names that are not watched
// yet. It never fails the reconcile: a kind it cannot watch now is logged
// and tried again later. A nil routeWatches (a reconciler built without
// its controller, in tests) does nothing.
func (w *routeWatches) ensure(ctx context.Context, ro *v1alpha1.Rollout) {
	if w == nil {
		return
	}
	for _, t := range ro.Spec.Strategy.TrafficRoutings() {
		for _, ref := range t.CustomNetworkRefs {
			if gvk, ok := customRefKind(ref); ok {
				w.watch(ctx, gvk)
			}
		}
	}
}

func (w *routeWatches) watch(ctx context.Context, gvk schema.GroupVersionKind) {
	gk := gvk.GroupKind()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.watched[gk] {
		return
	}
	logger := log.FromContext(ctx).WithValues("group", gk.Group, "kind", gk.Kind, "version", gvk.Version)
	if _, err := w.mapper.RESTMapping(gk, gvk.Version); err != nil {
		if !w.missing[gk] {
			w.missing[gk] = true
			logger.Info("not watching a routing kind the API server does not serve (its CRD is not installed?): "+
				"a re-apply of its objects is undone at the next resync only; will try again", "error", err.Error())
		}
		return
	}
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(gvk)
	var o client.Object = obj
	if err := w.ctrl.Watch(source.Kind(w.cache, o, w.rollouts(gk), w.predicates...)); err != nil {
		logger.Error(err, "watching a routing kind; will try again")
		return
	}
	delete(w.missing, gk)
	w.watched[gk] = true
	logger.Info("watching a routing kind named in customNetworkRefs")
}

// rolloutsOfCustomRoute queues, for an event of an object of kind gk, the
// Rollouts whose customNetworkRefs name it.
func (r *Reconciler) rolloutsOfCustomRoute(gk schema.GroupKind) handler.EventHandler {
	return r.eventsOf(gk.Kind, func(ctx context.Context, o client.Object) []reconcile.Request {
		return r.rolloutsBy(ctx, o.GetNamespace(), routeIndex, customRouteKey(gk, o.GetName()))
	})
}
