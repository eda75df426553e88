// Package inproc runs the rollgate controller in the test's own process
// against a cluster (kwok or a real node), as `rollgate controller
// --webhook-url https://127.0.0.1:<port>` runs next to a development
// cluster: its webhook registered with a loopback URL (or one the test
// gives, such as a balancer's), its log written where the test says. It is
// the one way the cluster tests and benchmarks start it in-process; the
// binary (test/proc) and the chart's pod (test/chartrun) are the others.
package inproc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/rollgate/rollgate/reconciler"
	"github.com/rollgate/rollgate/test/proc"
	"github.com/rollgate/rollgate/test/rig"
)

// Options returns the controller options of the stories: namespace ns,
// webhook configurations named webhookConfig, Git fetched and status
// written every second, plain-HTTP Git allowed.
func Options(ns, webhookConfig string) reconciler.Options {
	return reconciler.Options{
		Namespace:          ns,
		Concurrent:         2,
		LuaConfigMap:       "rollgate-lua",
		WebhookSecret:      "rollgate-webhook-cert",
		WebhookConfigName:  webhookConfig,
		GitWebhookAddr:     "127.0.0.1:0",
		GitDefaultInterval: time.Second,
		GitStatusBranch:    "rollgate/status",
		GitStatusWindow:    time.Second,
		GitInsecureHTTP:    true,
	}
}

// Config is what Run starts.
type Config struct {
	// REST is the cluster's client configuration; a test that counts or
	// checks the controller's requests wraps its transport.
	REST *rest.Config
	// Manager are the manager's options. When its Logger is unset, the
	// controller logs to Log in the development format, debug included.
	Manager reconciler.ManagerOptions
	Log     io.Writer
	// Options are the controller's. An empty WebhookURL means a loopback
	// URL on a free port of its own (WebhookPort); a set one is where
	// the API server reaches it (a balancer in front of several), with
	// WebhookPort where it listens.
	Options reconciler.Options
}

// Controller is a controller Run started.
type Controller struct {
	// Options are the options it runs with, its WebhookURL and WebhookPort
	// among them.
	Options reconciler.Options
	cancel  context.CancelFunc
	done    chan struct{}
	err     error
}

// Run builds the controller and starts it; it returns at once. Ready says
// when it serves.
func Run(cfg Config) (*Controller, error) {
	opts := cfg.Options
	if opts.WebhookURL == "" || opts.WebhookPort == 0 {
		ports, err := proc.FreePorts(1)
		if err != nil {
			return nil, err
		}
		if opts.WebhookURL == "" {
			opts.WebhookURL = fmt.Sprintf("https://127.0.0.1:%d", ports[0])
		}
		if opts.WebhookPort == 0 {
			opts.WebhookPort = ports[0]
		}
	}
	mo := cfg.Manager
	if mo.Logger.GetSink() == nil {
		mo.Logger = zap.New(zap.UseDevMode(true), zap.WriteTo(cfg.Log))
	}
	mgr, err := reconciler.NewManager(cfg.REST, mo, opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Controller{Options: opts, cancel: cancel, done: make(chan struct{})}
	go func() {
		c.err = mgr.Start(ctx)
		close(c.done)
	}()
	return c, nil
}

// Exited is nil while the controller runs, and why it stopped once it did
// (an error saying so when it stopped without one).
func (c *Controller) Exited() error {
	select {
	case <-c.done:
		if c.err != nil {
			return fmt.Errorf("the controller stopped: %w", c.err)
		}
		return errors.New("the controller stopped")
	default:
		return nil
	}
}

// Stop stops the controller and returns its error.
func (c *Controller) Stop() error {
	c.cancel()
	<-c.done
	return c.err
}

// Ready waits up to limit until the controller's webhooks are registered
// in cl at its URL with a CA bundle, and its webhook server accepts
// connections; it returns at once when the controller stopped.
func (c *Controller) Ready(ctx context.Context, cl client.Client, limit time.Duration) (time.Duration, error) {
	return rig.Wait(ctx, limit, "webhooks registered and served", func(ctx context.Context) (bool, string, error) {
		if err := c.Exited(); err != nil {
			return false, "", err
		}
		// The flag's default name when the options give none.
		name := cmp.Or(c.Options.WebhookConfigName, "rollgate")
		var v admissionregistrationv1.ValidatingWebhookConfiguration
		if err := cl.Get(ctx, client.ObjectKey{Name: name}, &v); err != nil {
			return false, err.Error(), nil
		}
		if len(v.Webhooks) == 0 || len(v.Webhooks[0].ClientConfig.CABundle) == 0 || v.Webhooks[0].ClientConfig.URL == nil ||
			!strings.HasPrefix(*v.Webhooks[0].ClientConfig.URL, c.Options.WebhookURL+"/") {
			return false, "webhook configuration " + name + " not registered at " + c.Options.WebhookURL + " yet", nil
		}
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", c.Options.WebhookPort), time.Second)
		if err != nil {
			return false, err.Error(), nil
		}
		conn.Close()
		return true, "", nil
	})
}

// Start runs the controller with opts against cfg, logging to log, and
// returns once its webhooks are registered and served (see Ready); stop
// ends it and reports its error to t.
func Start(t testing.TB, cfg *rest.Config, c client.Client, mo reconciler.ManagerOptions, opts reconciler.Options, log io.Writer) (stop func()) {
	t.Helper()
	ctrl, err := Run(Config{REST: cfg, Manager: mo, Log: log, Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	took, err := ctrl.Ready(context.Background(), c, 30*time.Second)
	if err != nil {
		ctrl.Stop()
		t.Fatal(err)
	}
	t.Logf("controller started: webhooks served after %s", took.Round(time.Millisecond))
	return func() {
		if err := ctrl.Stop(); err != nil {
			t.Errorf("controller: %v", err)
		}
	}
}
