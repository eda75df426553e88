// Command rollgate-notifier tells people where releases stand: it watches
// Rollouts and sends the notifications their transitions fire through
// argoproj's notifications-engine (docs/notifications.md). It is a process
// of its own beside rollgate-controller, in the same image: the engine
// renders with text/template and expr, which would make the controller's
// binary keep every exported method (TestControllerBinaryKeepsMethodDeadCode),
// and a notification service that hangs must not share a process with
// releases.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/pflag"
	"go.uber.org/zap/zapcore"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/rollgate/rollgate/cmd/internal/kubeconfig"
	"github.com/rollgate/rollgate/reconciler/notify"
)

// Exit codes, as the CLI's (docs/cli.md).
const (
	exitError = 1
	exitUsage = 2
)

func main() {
	os.Exit(run(os.Args[1:]))
}

type flags struct {
	kubeconfig, namespace, configMap, secret string
	watchAllNamespaces, leaderElect, logDev  bool
	metricsAddr, probeAddr, logLevel         string
}

func (f *flags) register(fs *pflag.FlagSet) {
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = "rollgate-system"
	}
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "Path to a kubeconfig; empty means $KUBECONFIG, else ~/.kube/config, else the in-cluster config")
	fs.StringVar(&f.namespace, "namespace", ns, "Namespace of the notifier: its ConfigMap, Secret and leader election Lease (default $POD_NAMESPACE)")
	fs.StringVar(&f.configMap, "notifications-configmap", "rollgate-notifications", "ConfigMap in --namespace with the notification services, triggers, templates and default subscriptions (argoproj notifications-engine format; docs/notifications.md); while it does not exist, nothing is sent")
	fs.StringVar(&f.secret, "notifications-secret", "rollgate-notifications", "Secret in --namespace with the values the ConfigMap names as $key")
	fs.BoolVar(&f.watchAllNamespaces, "watch-all-namespaces", true, "Watch the Rollouts of every namespace; false: only --namespace")
	fs.StringVar(&f.metricsAddr, "metrics-bind-address", ":8080", "Address of the Prometheus metrics endpoint; \"0\" disables it")
	fs.StringVar(&f.probeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints")
	fs.BoolVar(&f.leaderElect, "leader-elect", false, "Elect a leader so that only one replica sends")
	fs.StringVar(&f.logLevel, "log-level", "info", "Log level: debug, info or error")
	fs.BoolVar(&f.logDev, "log-dev", false, "Human-readable console logs instead of JSON")
}

func run(args []string) int {
	fs := pflag.NewFlagSet("rollgate-notifier", pflag.ContinueOnError)
	fs.SortFlags = false
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: rollgate-notifier [flags]\n\nSends the notifications of Rollouts' transitions (docs/notifications.md).\n\nFlags:\n%s", fs.FlagUsages())
	}
	f := &flags{}
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "Error:", err)
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "Error: unexpected argument %q: rollgate-notifier takes flags only (run rollgate-notifier --help)\n", fs.Arg(0))
		return exitUsage
	}
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(f.logLevel)); err != nil {
		fmt.Fprintf(os.Stderr, "Error: --log-level %q: use debug, info or error\n", f.logLevel)
		return exitUsage
	}
	ctrl.SetLogger(zap.New(func(o *zap.Options) { o.Development, o.Level = f.logDev, lvl }))
	if err := serve(f); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		return exitError
	}
	return 0
}

func serve(f *flags) error {
	cfg, err := kubeconfig.Loader(f.kubeconfig, "").ClientConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", kubeconfig.Explain(err))
	}
	ctx := ctrl.SetupSignalHandler()
	mgr, err := notify.NewManager(ctx, cfg, notify.ManagerOptions{
		Namespace: f.namespace, ConfigMap: f.configMap, Secret: f.secret,
		WatchOwnNamespace: !f.watchAllNamespaces,
		MetricsAddr:       f.metricsAddr, ProbeAddr: f.probeAddr, LeaderElect: f.leaderElect,
	})
	if err != nil {
		return err
	}
	return mgr.Start(ctx)
}
