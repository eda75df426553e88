// Package flux runs Flux's source-controller and kustomize-controller as
// local processes against a cluster (a kwok cluster in the demo and the
// tests), the way a platform team runs Flux in a real one: the controllers
// are the real binaries `make tools-flux` builds into bin/flux, reconciling
// GitRepository and Kustomization objects and applying what Git declares.
// StartNotification adds notification-controller, which receives events
// and dispatches them to the Providers its Alerts select.
//
// Each controller listens on its own free ports on 127.0.0.1, runs in its
// own process group and is stopped by its pid.
package flux

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/rollgate/rollgate/test/proc"
	"github.com/rollgate/rollgate/test/repo"
)

// Names of the controllers: their binaries in Options.Bin and their logs,
// <name>.log in Options.Dir.
const (
	SourceController       = "source-controller"
	KustomizeController    = "kustomize-controller"
	NotificationController = "notification-controller"
)

// Options configure Start.
type Options struct {
	Kubeconfig string // cluster the controllers reconcile
	Dir        string // working dir: artifact storage and <name>.log files
	Bin        string // folder with source-controller, kustomize-controller and crds/ (default <repo>/bin/flux)
	Namespace  string // RUNTIME_NAMESPACE, default "flux-system"
}

// Controllers are the running Flux controllers.
type Controllers struct {
	// StorageAddr is the host:port of source-controller's artifact server.
	StorageAddr string

	running
}

// defaultBin returns <repo>/bin/flux.
func defaultBin() string { return filepath.Join(repo.ToolsDir(), "flux") }

// Start starts source-controller and kustomize-controller and waits until
// both listen. On error nothing is left running.
func Start(ctx context.Context, o Options) (*Controllers, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	storage := filepath.Join(o.Dir, "flux-artifacts")
	if err := os.MkdirAll(storage, 0o755); err != nil {
		return nil, err
	}
	ports, err := proc.FreePorts(5)
	if err != nil {
		return nil, err
	}
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }
	// The controllers take no --kubeconfig flag: they read KUBECONFIG.
	env := []string{"KUBECONFIG=" + o.Kubeconfig, "RUNTIME_NAMESPACE=" + o.Namespace}
	c := &Controllers{StorageAddr: addr(0)}
	for _, x := range []struct {
		name string
		args []string
	}{
		{SourceController, []string{
			"--storage-path=" + storage,
			"--storage-addr=" + addr(0),
			"--storage-adv-addr=" + addr(0),
			"--metrics-addr=" + addr(1),
			"--health-addr=" + addr(2),
		}},
		{KustomizeController, []string{
			"--metrics-addr=" + addr(3),
			"--health-addr=" + addr(4),
		}},
	} {
		p, err := startController(o.Dir, x.name, filepath.Join(o.Bin, x.name), x.args, env)
		if err != nil {
			return nil, errors.Join(err, c.Stop())
		}
		c.procs = append(c.procs, p)
	}
	if err := waitListening(ctx, 60*time.Second, c.Exited, addr(0), addr(2), addr(4)); err != nil {
		return nil, errors.Join(err, c.Stop())
	}
	return c, nil
}

// waitListening waits until something accepts connections on every addr,
// failing early when exited reports a controller gone.
func waitListening(ctx context.Context, timeout time.Duration, exited func() error, addrs ...string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := exited(); err != nil {
			return err
		}
		up := true
		for _, a := range addrs {
			up = up && proc.Listening(a)
		}
		if up {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the Flux controllers to listen on %v (up to %s): %w", addrs, timeout, ctx.Err())
		case <-tick.C:
		}
	}
}

// withDefaults checks o and fills in Bin and Namespace.
func (o Options) withDefaults() (Options, error) {
	if o.Kubeconfig == "" || o.Dir == "" {
		return o, errors.New("flux: Options.Kubeconfig and Options.Dir are required")
	}
	if o.Bin == "" {
		o.Bin = defaultBin()
	}
	if o.Namespace == "" {
		o.Namespace = "flux-system"
	}
	return o, nil
}

// running is Flux controller processes started together.
type running struct {
	procs   []*proc.Process // in start order
	stopped atomic.Bool
}

// Stop stops the controllers, the last started first: SIGTERM to each
// process group, SIGKILL after 10 s.
func (r *running) Stop() error {
	r.stopped.Store(true)
	var errs []error
	for i := len(r.procs) - 1; i >= 0; i-- {
		errs = append(errs, r.procs[i].Stop(10*time.Second))
	}
	return errors.Join(errs...)
}

// Exited returns an error, with the last lines of its log, when a
// controller died; nil while they run, and after Stop.
func (r *running) Exited() error {
	if r.stopped.Load() {
		return nil
	}
	var errs []error
	for _, p := range r.procs {
		errs = append(errs, p.Exited())
	}
	return errors.Join(errs...)
}

// startController starts one Flux controller binary, or says how to build it.
func startController(dir, name, bin string, args, env []string) (*proc.Process, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("%s: %w (make tools-flux)", name, err)
	}
	return proc.Start(dir, name, bin, args, env)
}
