// Package inproc runs the rollgate controller in the test's own process
// against a cluster (kwok or a real node), as the end-to-end stories do:
// its webhook registered with a loopback URL, its log written where the
// test says.
package inproc

import (
	"context"
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
	"github.com/rollgate/rollgate/test/kube"
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

// Start runs the controller with opts (its WebhookURL set here) against
// cfg, logging to log, and returns once its webhooks are registered and
// served; stop ends it and reports its error to t.
func Start(t testing.TB, cfg *rest.Config, c client.Client, mo reconciler.ManagerOptions, opts reconciler.Options, log io.Writer) (stop func()) {
	t.Helper()
	port := rig.FreePort(t)
	opts.WebhookURL = fmt.Sprintf("https://127.0.0.1:%d", port)
	mo.Logger = zap.New(zap.UseDevMode(true), zap.WriteTo(log))
	mgr, err := reconciler.NewManager(cfg, mo, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller: %v", err)
		}
	}
	kube.Eventually(t, 30*time.Second, "webhooks registered and served", func(ctx context.Context) (bool, error) {
		var v admissionregistrationv1.ValidatingWebhookConfiguration
		if err := c.Get(ctx, client.ObjectKey{Name: opts.WebhookConfigName}, &v); err != nil || len(v.Webhooks) == 0 || len(v.Webhooks[0].ClientConfig.CABundle) == 0 ||
			v.Webhooks[0].ClientConfig.URL == nil || !strings.HasPrefix(*v.Webhooks[0].ClientConfig.URL, opts.WebhookURL+"/") {
			return false, nil
		}
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err != nil {
			return false, nil
		}
		conn.Close()
		return true, nil
	})
	return stop
}
