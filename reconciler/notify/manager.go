package notify

import (
	"cmp"
	"context"
	"fmt"

	eventv1 "github.com/fluxcd/pkg/runtime/events"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// ManagerOptions configure the notifier's process (rollgate-notifier).
type ManagerOptions struct {
	// Namespace is the notifier's own: its ConfigMap and Secret, and its
	// leader election Lease.
	Namespace string
	// ConfigMap and Secret name the configuration in Namespace.
	ConfigMap, Secret string
	// WatchOwnNamespace limits the notifier to the Rollouts of Namespace
	// (as the controller's --watch-all-namespaces=false).
	WatchOwnNamespace bool
	// MetricsAddr and ProbeAddr serve metrics and /healthz, /readyz; "0"
	// or empty disables them.
	MetricsAddr, ProbeAddr string
	// LeaderElect elects one sender among replicas.
	LeaderElect bool
	// Logger of the manager; the zero value uses controller-runtime's.
	Logger logr.Logger
}

// LeaderElectionID is the notifier's Lease, apart from the controller's.
const LeaderElectionID = "rollgate-notifier.rollgate.dev"

// NewManager builds the notifier's manager: a cache of Rollouts and
// Repositories only (no managedFields), the Notifier watching them, and
// a Kubernetes event recorder for the notifications that could not be
// sent. It reads its ConfigMap and Secret by name, uncached.
func NewManager(ctx context.Context, cfg *rest.Config, mo ManagerOptions) (ctrl.Manager, error) {
	if mo.Namespace == "" {
		return nil, fmt.Errorf("the notifier needs its namespace (--namespace, or $POD_NAMESPACE)")
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	co := ctrl.Options{
		Scheme:                        scheme,
		Cache:                         cache.Options{DefaultTransform: cache.TransformStripManagedFields()},
		Metrics:                       metricsserver.Options{BindAddress: cmp.Or(mo.MetricsAddr, "0")},
		HealthProbeBindAddress:        cmp.Or(mo.ProbeAddr, "0"),
		LeaderElection:                mo.LeaderElect,
		LeaderElectionID:              LeaderElectionID,
		LeaderElectionNamespace:       mo.Namespace,
		LeaderElectionReleaseOnCancel: true,
	}
	if mo.WatchOwnNamespace {
		co.Cache.DefaultNamespaces = map[string]cache.Config{mo.Namespace: {}}
	}
	if mo.Logger.GetSink() != nil {
		co.Logger = mo.Logger
	}
	mgr, err := ctrl.NewManager(cfg, co)
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	log := mgr.GetLogger().WithName("notifications")
	events, err := eventv1.NewRecorder(mgr, log, "", "rollgate-notifier")
	if err != nil {
		return nil, fmt.Errorf("event recorder: %w", err)
	}
	n := New(Options{
		Reader: mgr.GetAPIReader(), Namespace: mo.Namespace, ConfigMap: mo.ConfigMap, Secret: mo.Secret,
		Events: func(ro *v1alpha1.Rollout, reason, message string) {
			events.Event(ro, corev1.EventTypeWarning, reason, message)
		},
		Log: log,
	})
	if err := n.Watch(ctx, mgr); err != nil {
		return nil, err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	return mgr, nil
}
