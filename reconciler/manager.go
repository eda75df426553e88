package reconciler

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"maps"
	"os"
	"strings"
	"time"

	fluxcontroller "github.com/fluxcd/pkg/runtime/controller"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/gitsource"
	"github.com/rollgate/rollgate/reconciler/rollout"
)

// ManagerOptions are what a process decides about the manager that runs
// rollgate: where it serves metrics and probes, leader election, its
// logger. Everything else (scheme, cache, client) is fixed by NewManager,
// the same for `rollgate controller` and for every test that runs the
// controller.
type ManagerOptions struct {
	// MetricsAddr serves the Prometheus metrics; "0" disables it.
	MetricsAddr string
	// ProbeAddr serves /healthz and /readyz; "0" disables it.
	ProbeAddr string
	// PprofAddr serves Go's profiles (/debug/pprof/); "" or "0" disables
	// them.
	PprofAddr string
	// LeaderElect elects a leader (LeaderElectionID, in Options.Namespace).
	LeaderElect bool
	// LeaderElectionID names the Lease; empty means "rollgate.dev", or
	// for a shard (WatchLabelSelector set) "rollgate.dev-" and a hash of
	// its selector: shards that shared a Lease would take turns instead of
	// working side by side, and the Rollouts of all but one would wait.
	LeaderElectionID string
	// Logger of the manager; the zero value uses controller-runtime's.
	Logger logr.Logger
	// Restartable lets a process start the controllers again after a
	// stop (tests that restart the controller in one process).
	Restartable bool
	// WatchLabelSelector makes this instance one shard of several (Flux's
	// convention, --watch-label-selector): it reconciles and caches only
	// the Rollouts and Repositories whose labels match, such as
	// "sharding.fluxcd.io/key in (shard1)" for a shard and
	// "!sharding.fluxcd.io/key" for the main instance. Empty: every one.
	// The admission webhooks still decide from every Rollout (see
	// docs/sharding.md).
	WatchLabelSelector string
	// WatchOwnNamespace limits this instance to its own namespace
	// (Options.Namespace), as Flux's controllers do with
	// --watch-all-namespaces=false: it caches and reconciles only the
	// objects of that namespace, and the API server sends its admission
	// webhooks only that namespace's requests (a namespaceSelector on
	// every hook). Several such instances, each in its own namespace and
	// with its own webhook configuration name, share a cluster; see
	// docs/namespaced.md. False: every namespace.
	WatchOwnNamespace bool
}

// WatchAllNamespacesFlag is the command-line flag whose false sets
// ManagerOptions.WatchOwnNamespace, named in its errors.
const WatchAllNamespacesFlag = "--watch-all-namespaces"

// watchScope is the namespace an instance watches: empty, every one.
type watchScope struct{ namespace string }

// namespaces lists the scope's namespace; nil means every one.
func (s watchScope) namespaces() []string {
	if s.namespace == "" {
		return nil
	}
	return []string{s.namespace}
}

// WatchSelectorFlag is the command-line flag of
// ManagerOptions.WatchLabelSelector, named in its errors.
const WatchSelectorFlag = "--watch-label-selector"

// ParseWatchSelector parses a shard's label selector the way Flux's
// controllers parse their --watch-label-selector (fluxcd/pkg/runtime);
// "" selects everything and returns nil.
func ParseWatchSelector(s string) (labels.Selector, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	sel, err := fluxcontroller.GetWatchSelector(fluxcontroller.WatchOptions{LabelSelector: s})
	if err != nil {
		return nil, fmt.Errorf("%s %q: %w (examples: \"sharding.fluxcd.io/key in (shard1)\" for a shard, \"!sharding.fluxcd.io/key\" for the main instance)", WatchSelectorFlag, s, err)
	}
	return sel, nil
}

// leaseName is the default leader election Lease of an instance with
// shard as its selector (nil: not a shard).
func leaseName(shard labels.Selector) string {
	if shard == nil {
		return "rollgate.dev"
	}
	h := fnv.New32a()
	h.Write([]byte(shard.String()))
	return fmt.Sprintf("rollgate.dev-%08x", h.Sum32())
}

// leaderLock builds the leader election lock controller-runtime would
// build (a Lease, identity "<hostname>_<uuid>", a client timing out
// within half the renew deadline) and returns it with the Lease it
// takes. An empty namespace is the Pod's.
func leaderLock(cfg *rest.Config, namespace, name string) (resourcelock.Interface, *gitsource.Lease, error) {
	if namespace == "" {
		b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
		if err != nil {
			return nil, nil, fmt.Errorf("leader election needs the controller's namespace (--namespace, or $POD_NAMESPACE): %w", err)
		}
		namespace = strings.TrimSpace(string(b))
	}
	host, err := os.Hostname()
	if err != nil {
		return nil, nil, fmt.Errorf("leader election identity: %w", err)
	}
	id := host + "_" + string(uuid.NewUUID())
	lc := rest.AddUserAgent(rest.CopyConfig(cfg), "leader-election")
	lc.Timeout = leaderRenewDeadline / 2
	core, err := corev1client.NewForConfig(lc)
	if err != nil {
		return nil, nil, err
	}
	coordination, err := coordinationv1client.NewForConfig(lc)
	if err != nil {
		return nil, nil, err
	}
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, namespace, name, core, coordination, resourcelock.ResourceLockConfig{Identity: id})
	if err != nil {
		return nil, nil, fmt.Errorf("leader election lock: %w", err)
	}
	return lock, &gitsource.Lease{Namespace: namespace, Name: name, Identity: id}, nil
}

// leaderRenewDeadline is controller-runtime's default renew deadline.
const leaderRenewDeadline = 10 * time.Second

// NewScheme returns the scheme of the kinds rollgate reads and writes.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme, gatewayv1.Install} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// cacheOptions is what the manager caches: ConfigMaps only in the
// controller's namespace, a shard's own Rollouts and Repositories only
// (shard nil: all of them), no object's managedFields, and of Pods,
// ReplicaSets and Deployments only what rollgate reads, in types of
// rollgate's own (newManagerCache, reconciler/stripped: a pod's metadata
// and readiness, a ReplicaSet's template as its revision, a Deployment's
// as its revision and images, without its status conditions). rollgate
// never reads managedFields, and they are a large part of every cached
// object (one entry per field manager: the controller manager, the
// scheduler, the kubelet, Flux, rollgate); pods are the most numerous
// objects in the cache, and their spec and container statuses most of each.
//
// An instance whose scope is its own namespace caches nothing else: every
// informer lists and watches that namespace alone, so it needs no
// cluster-wide read permission.
func cacheOptions(namespace string, shard labels.Selector, scope watchScope) cache.Options {
	byObject := map[client.Object]cache.ByObject{&corev1.ConfigMap{}: {Namespaces: map[string]cache.Config{namespace: {}}}}
	// Only the slices of the canary Services rollgate made: a cluster's
	// other EndpointSlices are many and never read.
	byObject[&discoveryv1.EndpointSlice{}] = cache.ByObject{Label: rollout.CanarySlices()}
	// One entry per kind: the map is keyed by pointer, so a second
	// &v1alpha1.Rollout{} would be a second key, and the cache would take
	// either at random (TestCacheOptionsOneEntryPerKind).
	rollouts := cache.ByObject{Transform: stripRollout}
	if shard != nil {
		// Another shard's Rollouts and Repositories are never cached here,
		// so no event of theirs reaches this instance's controllers.
		rollouts.Label = shard
		byObject[&v1alpha1.Repository{}] = cache.ByObject{Label: shard}
	}
	byObject[&v1alpha1.Rollout{}] = rollouts
	o := cache.Options{ByObject: byObject, DefaultTransform: cache.TransformStripManagedFields()}
	if ns := scope.namespaces(); ns != nil {
		o.DefaultNamespaces = map[string]cache.Config{}
		for _, n := range ns {
			o.DefaultNamespaces[n] = cache.Config{}
		}
	}
	return o
}

// lastApplied is the annotation in which `kubectl apply` and Argo CD's
// client-side apply keep the whole manifest they applied.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// stripRollout is the cache transform of Rollouts: no managedFields, and
// no last-applied configuration, a second copy of the spec that rollgate
// never reads (often the largest part of a Rollout's metadata). rollgate
// writes Rollouts only with merge patches computed between two cached
// copies and with status patches, never with an update of a cached copy,
// so the annotation stays on the API server
// (TestCacheStripsALastAppliedConfiguration).
func stripRollout(obj any) (any, error) {
	ro, ok := obj.(*v1alpha1.Rollout)
	if !ok {
		return obj, nil
	}
	ro.ManagedFields = nil
	if _, ok := ro.Annotations[lastApplied]; ok {
		ro.Annotations = maps.Clone(ro.Annotations)
		delete(ro.Annotations, lastApplied)
	}
	return ro, nil
}

// NewManager builds the manager that runs rollgate with opts: the Rollout
// and Repository controllers, the admission webhooks, the Git push
// endpoint and a health check. ConfigMaps are cached only in the
// controller's namespace (the Lua scripts); Secrets are never cached
// (read by name when needed).
func NewManager(cfg *rest.Config, mo ManagerOptions, opts Options) (ctrl.Manager, error) {
	shard, err := ParseWatchSelector(mo.WatchLabelSelector)
	if err != nil {
		return nil, err
	}
	var scope watchScope
	if mo.WatchOwnNamespace {
		if opts.Namespace == "" {
			return nil, fmt.Errorf("%s=false needs the controller's namespace (--namespace, or $POD_NAMESPACE)", WatchAllNamespacesFlag)
		}
		scope.namespace = opts.Namespace
	}
	scheme, err := NewScheme()
	if err != nil {
		return nil, err
	}
	co := ctrl.Options{
		Scheme:                  scheme,
		Cache:                   cacheOptions(opts.Namespace, shard, scope),
		NewCache:                newManagerCache,
		MapperProvider:          newMapper,
		Client:                  client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
		Metrics:                 metricsserver.Options{BindAddress: cmp.Or(mo.MetricsAddr, "0")},
		HealthProbeBindAddress:  cmp.Or(mo.ProbeAddr, "0"),
		PprofBindAddress:        cmp.Or(mo.PprofAddr, "0"),
		LeaderElection:          mo.LeaderElect,
		LeaderElectionID:        cmp.Or(mo.LeaderElectionID, leaseName(shard)),
		LeaderElectionNamespace: opts.Namespace,
		// Step down at once on SIGTERM (the process exits when the manager
		// returns, after the Git writers' last flush), so that a rolling
		// update of the controller hands over in seconds instead of waiting
		// for the lease to expire.
		LeaderElectionReleaseOnCancel: true,
	}
	if mo.LeaderElect {
		// The lock is built here, not by the manager, so that the Git
		// status writers know this process's identity in the Lease and
		// can read their fencing epoch from it.
		lock, lease, err := leaderLock(cfg, co.LeaderElectionNamespace, co.LeaderElectionID)
		if err != nil {
			return nil, err
		}
		co.LeaderElectionResourceLockInterface = lock
		opts.lease = lease
	}
	if mo.Logger.GetSink() != nil {
		co.Logger = mo.Logger
	}
	if mo.Restartable {
		co.Controller = config.Controller{SkipNameValidation: ptr.To(true)}
	}
	mgr, err := ctrl.NewManager(cfg, co)
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	admission := client.Reader(nil)
	if shard != nil {
		if admission, err = newAdmissionView(cfg, mgr, scope); err != nil {
			return nil, err
		}
	}
	if err := setup(mgr, opts, admission, scope, shard); err != nil {
		return nil, err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	return mgr, nil
}
