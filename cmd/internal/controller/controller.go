// Package controller is the controller command: its flags and how they
// wire the reconciler. Both binaries run it: rollgate-controller, the small
// binary of the image and the chart, and `rollgate controller`, the CLI's
// way to run it next to a development cluster.
package controller

import (
	"fmt"
	"os"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/spf13/pflag"
	"go.uber.org/zap/zapcore"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/rollgate/rollgate/cmd/internal/kubeconfig"
	"github.com/rollgate/rollgate/reconciler"
	"github.com/rollgate/rollgate/reconciler/metrics"
	"github.com/rollgate/rollgate/reconciler/webhook"
)

// UsageError marks an error caused by a bad flag value.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Flags are the flags of the controller, the same for
// `rollgate-controller` and `rollgate controller`.
type Flags struct {
	kubeconfig         string
	namespace          string
	metricsAddr        string
	probeAddr          string
	pprofAddr          string
	leaderElect        bool
	leaderElectionID   string
	watchLabelSelector string
	watchAllNamespaces bool
	concurrent         int
	maxInFlight        int
	luaConfigMap       string
	webhookPort        int
	webhookHost        string
	webhookConfig      string
	webhookService     string
	webhookSecret      string
	webhookURL         string
	webhookTimeout     int
	gitWebhookAddr     string
	gitDefaultInterval time.Duration
	gitStatusBranch    string
	gitStatusWindow    time.Duration
	eventsAddr         string
	gitInsecureHTTP    bool
	logLevel           string
	logDev             bool
}

// Register adds the flags to fs.
func (f *Flags) Register(fs *pflag.FlagSet) {
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = "rollgate-system"
	}
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "Path to a kubeconfig; empty means $KUBECONFIG, else ~/.kube/config, else the in-cluster config")
	fs.StringVar(&f.namespace, "namespace", ns, "Namespace of the controller: leader election lease, webhook certificate Secret, Lua ConfigMap (default $POD_NAMESPACE)")
	fs.StringVar(&f.metricsAddr, "metrics-bind-address", ":8080", "Address of the Prometheus metrics endpoint; \"0\" disables it")
	fs.StringVar(&f.probeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints")
	fs.StringVar(&f.pprofAddr, "pprof-bind-address", "0", "Address of Go's profiling endpoints (/debug/pprof/), e.g. 127.0.0.1:6060 for kubectl port-forward; \"0\" disables them")
	fs.BoolVar(&f.leaderElect, "leader-elect", false, "Elect a leader so that only one replica acts at a time")
	fs.StringVar(&f.leaderElectionID, "leader-election-id", "", "Name of the leader election Lease (default \"rollgate.dev\"; with --watch-label-selector, \"rollgate.dev-\" and a hash of the selector, so every shard elects its own leader)")
	fs.StringVar(&f.watchLabelSelector, "watch-label-selector", "", "Run as one shard of several (Flux's sharding convention): reconcile only the Rollouts and Repositories whose labels match, e.g. \"sharding.fluxcd.io/key in (shard1)\" for a shard and \"!sharding.fluxcd.io/key\" for the main instance; empty: all of them (docs/sharding.md)")
	fs.BoolVar(&f.watchAllNamespaces, "watch-all-namespaces", true, "Watch every namespace; false: only --namespace (Flux's convention): the controller caches and releases that namespace's Rollouts only, and its webhooks are registered for that namespace only; give each such instance its own --webhook-config-name (docs/namespaced.md)")
	fs.IntVar(&f.concurrent, "concurrent", 4, "Number of Rollouts reconciled in parallel")
	fs.IntVar(&f.maxInFlight, "max-releases-in-flight", 0, "At most this many releases in flight at once among every Rollout this controller watches; the others wait in a queue, first come first served (docs/coordination.md); 0: no limit")
	fs.StringVar(&f.luaConfigMap, "lua-configmap", "rollgate-lua", "ConfigMap in --namespace with user Lua scripts (keys lua.traffic.routing.<Kind>.<group>, lua.traffic.routing.ingress.<class>); they override built-ins of the same key")
	fs.IntVar(&f.webhookPort, "webhook-port", 9443, "Port of the admission webhook server")
	fs.StringVar(&f.webhookHost, "webhook-bind-host", "", "Host the admission webhook server binds to (e.g. 127.0.0.1 when running outside the cluster)")
	fs.StringVar(&f.webhookConfig, "webhook-config-name", "rollgate", "Name of the MutatingWebhookConfiguration and ValidatingWebhookConfiguration the controller keeps current (CA bundle, rules)")
	fs.StringVar(&f.webhookService, "webhook-service", "rollgate-webhook", "Service in --namespace in front of the webhook server (in-cluster registration)")
	fs.StringVar(&f.webhookSecret, "webhook-secret", "rollgate-webhook-cert", "Secret in --namespace holding the webhook CA and serving certificate, shared by replicas")
	fs.StringVar(&f.webhookURL, "webhook-url", "", "Register the webhook with this URL instead of the Service, e.g. https://127.0.0.1:9443 when the controller runs as a local process next to a (kwok) cluster")
	fs.IntVar(&f.webhookTimeout, "webhook-timeout-seconds", 10, "Seconds the API server waits for each admission webhook before applying its failure policy (Fail), 1 to 30; the controller keeps its webhook configurations at this value")
	fs.StringVar(&f.gitWebhookAddr, "git-webhook-bind-address", ":9292", "Address of the endpoint that GitHub, GitLab and Gitea push webhooks call to fetch at once; \"0\" disables it")
	fs.DurationVar(&f.gitDefaultInterval, "git-default-interval", 5*time.Second, "Interval between fetches of a tracked branch when its Repository sets none")
	fs.StringVar(&f.gitStatusBranch, "git-status-branch", "rollgate/status", "Status branch when a Repository sets none")
	fs.DurationVar(&f.gitStatusWindow, "git-status-window", 10*time.Second, "Window over which status writes are coalesced into one commit when a Repository sets none")
	fs.BoolVar(&f.gitInsecureHTTP, "git-allow-insecure-http", false, "Allow sending Git credentials over plain http:// (in-cluster Git servers, tests); https:// and ssh:// need nothing")
	fs.StringVar(&f.eventsAddr, "events-addr", "", "Forward events to Flux's notification-controller at this address (optional)")
	fs.StringVar(&f.logLevel, "log-level", "info", "Log level: debug, info or error")
	fs.BoolVar(&f.logDev, "log-dev", false, "Human-readable console logs instead of JSON")
}

// restConfig loads the cluster's configuration as the CLI does: the
// kubeconfig (--kubeconfig, $KUBECONFIG, ~/.kube/config), else in-cluster.
func restConfig(path string) (*rest.Config, error) {
	cfg, err := kubeconfig.Loader(path, "").ClientConfig()
	return cfg, kubeconfig.Explain(err)
}

func newLogger(level string, dev bool) (zap.Opts, error) {
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, UsageError{fmt.Errorf("--log-level %q: use debug, info or error", level)}
	}
	return func(o *zap.Options) {
		o.Development = dev
		o.Level = lvl
	}, nil
}

// Run runs the controller until SIGTERM or SIGINT. Bad flag values are
// a UsageError, found before it looks for a cluster.
func Run(f *Flags) error {
	logOpt, err := newLogger(f.logLevel, f.logDev)
	if err != nil {
		return err
	}
	if _, err := reconciler.ParseWatchSelector(f.watchLabelSelector); err != nil {
		return UsageError{err}
	}
	if err := f.validate(); err != nil {
		return err
	}
	ctrl.SetLogger(zap.New(logOpt))
	setMemoryLimit()
	cfg, err := restConfig(f.kubeconfig)
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	if cfg.QPS == 0 {
		// As in-cluster: no client-side throttling (client-go would
		// default a kubeconfig to 5 requests/s); the API server's
		// priority and fairness protects it.
		cfg.QPS = -1
	}
	opts := f.options()
	// rollgate's metrics are served next to controller-runtime's on
	// --metrics-bind-address.
	if opts.Metrics, err = metrics.New(ctrlmetrics.Registry); err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	mgr, err := reconciler.NewManager(cfg, reconciler.ManagerOptions{
		MetricsAddr: f.metricsAddr, ProbeAddr: f.probeAddr, PprofAddr: f.pprofAddr,
		LeaderElect: f.leaderElect, LeaderElectionID: f.leaderElectionID,
		WatchLabelSelector: f.watchLabelSelector, WatchOwnNamespace: !f.watchAllNamespaces,
	}, opts)
	if err != nil {
		return err
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}

// setMemoryLimit gives the Go runtime a soft memory limit of 90% of the
// container's (its cgroup's memory.max, read again when it changes), so
// that the collector works harder as the caches near the limit instead of
// the kernel killing the pod: with the default GOGC the heap may grow to
// twice what is live before a collection. GOMEMLIMIT set by hand wins, and
// AUTOMEMLIMIT=off or another ratio (0 to 1) changes it (docs/install.md "Memory").
func setMemoryLimit() {
	log := ctrl.Log.WithName("memory")
	limit, err := memlimit.SetGoMemLimitWithOpts(memlimit.WithProvider(memlimit.FromCgroup), memlimit.WithRefreshInterval(time.Minute))
	switch {
	case err != nil:
		log.Error(err, "no soft memory limit: the container's limit could not be read")
	case limit > 0:
		log.Info("soft memory limit set from the container's limit", "GOMEMLIMIT", limit)
	}
}

// validate refuses flag values the controller cannot use, as a UsageError
// naming the flag.
func (f *Flags) validate() error {
	if f.maxInFlight < 0 {
		return UsageError{fmt.Errorf("--max-releases-in-flight %d: use 0 (no limit) or more (to stop every release, declare a freeze)", f.maxInFlight)}
	}
	if t := f.webhookTimeout; t < webhook.MinTimeoutSeconds || t > webhook.MaxTimeoutSeconds {
		return UsageError{fmt.Errorf("--webhook-timeout-seconds %d: use %d to %d (the API server's range for a webhook's timeoutSeconds)",
			t, webhook.MinTimeoutSeconds, webhook.MaxTimeoutSeconds)}
	}
	return nil
}

func (f *Flags) options() reconciler.Options {
	return reconciler.Options{
		Namespace:             f.namespace,
		Concurrent:            f.concurrent,
		MaxReleasesInFlight:   f.maxInFlight,
		LuaConfigMap:          f.luaConfigMap,
		WebhookService:        f.webhookService,
		WebhookSecret:         f.webhookSecret,
		WebhookURL:            f.webhookURL,
		WebhookHost:           f.webhookHost,
		WebhookPort:           f.webhookPort,
		WebhookConfigName:     f.webhookConfig,
		WebhookTimeoutSeconds: int32(f.webhookTimeout),
		GitWebhookAddr:        f.gitWebhookAddr,
		GitDefaultInterval:    f.gitDefaultInterval,
		GitStatusBranch:       f.gitStatusBranch,
		GitStatusWindow:       f.gitStatusWindow,
		EventsAddr:            f.eventsAddr,
		GitInsecureHTTP:       f.gitInsecureHTTP,
	}
}
