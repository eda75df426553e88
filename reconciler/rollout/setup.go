package rollout

import (
	"context"
	"fmt"
	"maps"

	eventv1 "github.com/fluxcd/pkg/runtime/events"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/luascripts"
	"github.com/rollgate/rollgate/reconciler/analysis"
	"github.com/rollgate/rollgate/reconciler/fluxevents"
	"github.com/rollgate/rollgate/reconciler/gitsource"
	"github.com/rollgate/rollgate/reconciler/workload"
	"github.com/rollgate/rollgate/traffic"
)

// routeIndex indexes Rollouts by the objects their trafficRoutings name:
// "Service/<name>", "HTTPRoute/<name>", "Ingress/<name>" (the user's
// Ingress and the canary one), and "<group>/<kind>/<name>" for
// customNetworkRefs (customRouteKey).
const routeIndex = "spec.trafficRoutings"

// Setup registers the Rollout controller with mgr. It opens the
// Repositories Rollouts name through repos, the Git source's pool, and
// reads Rollouts through the index of Rollouts by workload
// (workload.RolloutWorkloadIndex) that the admission webhook registers.
func Setup(mgr ctrl.Manager, opts Options, repos *gitsource.Pool) error {
	ctx := context.Background()
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &v1alpha1.Rollout{}, routeIndex, func(o client.Object) []string {
		var keys []string
		for _, ref := range o.(*v1alpha1.Rollout).Spec.Strategy.TrafficRoutings() {
			keys = append(keys, "Service/"+ref.Service)
			if g := ref.Gateway; g != nil && g.HTTPRouteName != nil {
				keys = append(keys, "HTTPRoute/"+*g.HTTPRouteName)
			}
			if in := ref.Ingress; in != nil {
				keys = append(keys, "Ingress/"+in.Name, "Ingress/"+traffic.CanaryIngressName(in.Name))
			}
			for _, c := range ref.CustomNetworkRefs {
				if gvk, ok := customRefKind(c); ok {
					keys = append(keys, customRouteKey(gvk.GroupKind(), c.Name))
				}
			}
		}
		return keys
	}); err != nil {
		return err
	}
	if err := indexGroups(ctx, idx); err != nil {
		return err
	}
	// Observing a workload lists its own pods and ReplicaSets through
	// this index, not every one of its namespace.
	if err := workload.IndexOwners(ctx, idx); err != nil {
		return err
	}
	// The Kubernetes Events stay on the Rollout; their copies posted to
	// notification-controller are about the Rollout's Kustomization
	// (package fluxevents).
	eventLog := mgr.GetLogger().WithName("events")
	k8sEvents, err := eventv1.NewRecorder(mgr, eventLog, "", "rollgate")
	if err != nil {
		return fmt.Errorf("event recorder: %w", err)
	}
	recorder, err := fluxevents.New(fluxevents.Options{
		Kubernetes: k8sEvents, Scheme: mgr.GetScheme(), Address: opts.EventsAddr, Controller: "rollgate", Log: eventLog,
	})
	if err != nil {
		return fmt.Errorf("event recorder: %w", err)
	}
	cs, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return fmt.Errorf("clientset for Job checks' logs: %w", err)
	}
	r := &Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: recorder,
		Options: opts, Routers: traffic.DefaultRegistry(), Scripts: luascripts.NewLibrary(), repos: repos,
		Jobs:         &analysis.JobProvider{Reader: mgr.GetAPIReader(), Logs: analysis.PodLogs(cs)},
		workloadOpts: []workload.Option{workload.OwnerIndexed(), workload.APIReader(mgr.GetAPIReader())},
	}
	return r.setupWithManager(mgr, opts)
}

func (r *Reconciler) setupWithManager(mgr ctrl.Manager, opts Options) error {
	// A route or Service re-applied by the GitOps tool mid-release is
	// re-asserted at once: watch them (HTTPRoutes only where the CRD is;
	// the kinds named in customNetworkRefs once a Rollout names them, see
	// routeWatches).
	b := ctrl.NewControllerManagedBy(mgr).
		Watches(&corev1.Service{}, r.eventsOf("Service", r.rolloutsOfRoute("Service")), builder.WithPredicates(r.routeWrites.notOwn())).
		Watches(&networkingv1.Ingress{}, r.eventsOf("Ingress", r.rolloutsOfRoute("Ingress")), builder.WithPredicates(r.routeWrites.notOwn()))
	if !opts.NoEndpointSlices {
		// A canary Service's slice listing a ready endpoint lets the
		// routes send it requests (traffic.Options.Endpoints).
		b = b.Watches(&discoveryv1.EndpointSlice{}, r.eventsOf("EndpointSlice", r.rolloutsOfCanarySlice),
			builder.WithPredicates(readChanged(sliceReadChanged), createdIf(traffic.SliceServes)))
	}
	if _, err := mgr.GetRESTMapper().RESTMapping(gatewayv1.SchemeGroupVersion.WithKind("HTTPRoute").GroupKind(), gatewayv1.SchemeGroupVersion.Version); err == nil {
		b = b.Watches(&gatewayv1.HTTPRoute{}, r.eventsOf("HTTPRoute", r.rolloutsOfRoute("HTTPRoute")), builder.WithPredicates(r.routeWrites.notOwn()))
	}
	c, err := b.
		For(&v1alpha1.Rollout{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		// A spec change goes before the events of releases in motion.
		Watches(&v1alpha1.Rollout{}, r.specChanged(), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// A member of a lockstep group waits for the others' steps.
		Watches(&v1alpha1.Rollout{}, r.groupMembers(), builder.WithPredicates(groupStatusChanged())).
		Watches(&appsv1.Deployment{}, r.eventsOf("Deployment", r.rolloutsOfWorkload), builder.WithPredicates(readChanged(workload.DeploymentReadChanged))).
		Watches(&appsv1.StatefulSet{}, r.eventsOf("StatefulSet", r.rolloutsOfWorkload)).
		Watches(&appsv1.DaemonSet{}, r.eventsOf("DaemonSet", r.rolloutsOfWorkload)).
		Watches(&appsv1.ReplicaSet{}, r.eventsOf("ReplicaSet", r.rolloutsOfReplicaSet), builder.WithPredicates(readChanged(workload.ReplicaSetReadChanged))).
		Watches(&corev1.Pod{}, r.eventsOf("Pod", r.rolloutsOfPod), builder.WithPredicates(readChanged(workload.PodReadChanged), createdIf(workload.PodCreateWakes))).
		WatchesRawSource(r.repos.Woken(priorityWoken)).     // a fetch brought a merged approval
		WatchesRawSource(r.repos.Written(priorityPoll)).    // progress reached Git: GitSynced
		WatchesRawSource(r.repos.Proposed(priorityNormal)). // a gate's approval branch was pushed
		WithOptions(controller.Options{MaxConcurrentReconciles: max(opts.Concurrent, 1)}).
		Build(r)
	if err != nil {
		return err
	}
	r.routes = newRouteWatches(c, mgr.GetCache(), mgr.GetRESTMapper(), r.rolloutsOfCustomRoute, r.routeWrites.notOwn())
	return nil
}

// rolloutsOfRoute maps an event of a routing object to the Rollouts that
// route through it.
func (r *Reconciler) rolloutsOfRoute(kind string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		return r.rolloutsBy(ctx, o.GetNamespace(), routeIndex, kind+"/"+o.GetName())
	}
}

// CanarySlices selects the EndpointSlices the Rollout controller reads and
// watches, those of the canary Services it made (they carry the canary
// Service's traffic.LabelCanaryOf): the manager caches no other.
func CanarySlices() labels.Selector {
	req, err := labels.NewRequirement(traffic.LabelCanaryOf, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant key
	}
	return labels.NewSelector().Add(*req)
}

// rolloutsOfCanarySlice maps an event of a canary Service's EndpointSlice
// to the Rollouts routing the stable Service it copies (the slice carries
// the canary Service's traffic.LabelCanaryOf).
func (r *Reconciler) rolloutsOfCanarySlice(ctx context.Context, o client.Object) []reconcile.Request {
	stable := o.GetLabels()[traffic.LabelCanaryOf]
	if stable == "" {
		return nil
	}
	return r.rolloutsBy(ctx, o.GetNamespace(), routeIndex, "Service/"+stable)
}

// sliceReadChanged reports whether what rollgate reads of a canary
// Service's EndpointSlice moved between two copies of it: its labels
// (whose canary Service it is) and whether it lists a ready endpoint
// (traffic.SliceServes). The EndpointSlice controller rewrites a slice for
// every canary pod that comes, becomes ready or goes; only the first ready
// endpoint (or the last one going) is news to a release.
func sliceReadChanged(old, cur *discoveryv1.EndpointSlice) bool {
	return !maps.Equal(old.Labels, cur.Labels) || traffic.SliceServes(old) != traffic.SliceServes(cur)
}

// rolloutsOfWorkload maps a workload event to the Rollouts pointing at it.
func (r *Reconciler) rolloutsOfWorkload(ctx context.Context, o client.Object) []reconcile.Request {
	if ref := metav1.GetControllerOf(o); ref != nil && ref.Kind == "Rollout" && ref.APIVersion == v1alpha1.GroupVersion.String() {
		// A canary Deployment (canary style) belongs to its Rollout.
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: ref.Name}}}
	}
	kind := ""
	switch o.(type) {
	case *appsv1.Deployment:
		kind = "Deployment"
	case *appsv1.StatefulSet:
		kind = "StatefulSet"
	case *appsv1.DaemonSet:
		kind = "DaemonSet"
	}
	return r.rolloutsBy(ctx, o.GetNamespace(), workload.RolloutWorkloadIndex, workload.WorkloadKey(kind, o.GetName()))
}

// rolloutsOfReplicaSet maps a ReplicaSet event to the Rollouts of the
// Deployment owning it (or of the canary Deployment's Rollout).
func (r *Reconciler) rolloutsOfReplicaSet(ctx context.Context, o client.Object) []reconcile.Request {
	for _, ref := range o.GetOwnerReferences() {
		if ref.Kind == "Deployment" && ref.Controller != nil && *ref.Controller {
			reqs := r.rolloutsBy(ctx, o.GetNamespace(), workload.RolloutWorkloadIndex, workload.WorkloadKey("Deployment", ref.Name))
			if len(reqs) > 0 {
				return reqs
			}
			var d appsv1.Deployment
			if err := r.Get(ctx, types.NamespacedName{Namespace: o.GetNamespace(), Name: ref.Name}, &d, client.UnsafeDisableDeepCopy); err == nil {
				for _, dref := range d.OwnerReferences {
					if dref.Kind == "Rollout" && dref.APIVersion == v1alpha1.GroupVersion.String() {
						return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: dref.Name}}}
					}
				}
			}
		}
	}
	return nil
}

// rolloutsOfPod maps a pod event to the Rollouts of the workload owning
// it: a pod becoming ready or going away can finish a batch, and the
// workload's own status event may have been handled before the pod cache
// saw the change.
func (r *Reconciler) rolloutsOfPod(ctx context.Context, o client.Object) []reconcile.Request {
	ref := metav1.GetControllerOf(o)
	if ref == nil {
		return nil
	}
	switch ref.Kind {
	case "ReplicaSet":
		// Only its owner references are read: not copied.
		var rs appsv1.ReplicaSet
		if err := r.Get(ctx, types.NamespacedName{Namespace: o.GetNamespace(), Name: ref.Name}, &rs, client.UnsafeDisableDeepCopy); err != nil {
			return nil
		}
		return r.rolloutsOfReplicaSet(ctx, &rs)
	case "StatefulSet", "DaemonSet":
		return r.rolloutsBy(ctx, o.GetNamespace(), workload.RolloutWorkloadIndex, workload.WorkloadKey(ref.Kind, ref.Name))
	}
	return nil
}

func (r *Reconciler) rolloutsBy(ctx context.Context, ns, index, value string) []reconcile.Request {
	// Only the names are read: the cached Rollouts are not copied, at
	// every event of every pod and ReplicaSet a Rollout owns.
	var list v1alpha1.RolloutList
	if err := r.List(ctx, &list, client.InNamespace(ns), client.MatchingFields{index: value}, client.UnsafeDisableDeepCopy); err != nil {
		log.FromContext(ctx).Error(err, "listing Rollouts", "index", index, "value", value)
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: list.Items[i].Namespace, Name: list.Items[i].Name}})
	}
	return out
}

// trafficOptions reads the user's Lua scripts from the controller's
// ConfigMap (missing ConfigMap: none).
func (r *Reconciler) trafficOptions(ctx context.Context) traffic.Options {
	o := traffic.Options{FieldOwner: "rollgate", Now: r.Options.Now, Scripts: r.Scripts, LuaObserve: r.Options.Metrics.LuaObserver()}
	if !r.Options.NoEndpointSlices {
		// The cache holds the slices of canary Services alone
		// (reconciler.cacheOptions); a new one wakes the Rollout.
		o.Endpoints = r.Client
		o.Reached = &r.reached
	}
	if r.Options.LuaConfigMap == "" {
		return o
	}
	// The scripts are only read (luascripts.Library.Resolve): the cached
	// ConfigMap is not copied, once or twice every reconcile.
	var cm corev1.ConfigMap
	if err := r.Get(ctx, types.NamespacedName{Namespace: r.Options.Namespace, Name: r.Options.LuaConfigMap}, &cm, client.UnsafeDisableDeepCopy); err == nil {
		o.LuaOverrides = cm.Data
	}
	return o
}
