package webhook_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rollgate/rollgate/reconciler/webhook"
	"github.com/rollgate/rollgate/reconciler/webhook/webhooktest"
)

// TestConfiguredTimeoutIsKept: a controller configured with a timeout
// (--webhook-timeout-seconds, the chart's webhook.timeoutSeconds) writes it
// to every hook of both configurations, a hook's own timeout included; a
// later check finds them current and writes nothing; and a write of another
// timeout (a chart render with the old fixed 10) is put back.
func TestConfiguredTimeoutIsKept(t *testing.T) {
	const name, timeout = "rollgate-timeout", 17
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	mgr, err := ctrl.NewManager(suite.env.Config, ctrl.Options{
		Scheme: suite.env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	allow := admission.HandlerFunc(func(context.Context, admission.Request) admission.Response { return admission.Allowed("") })
	keeper, err := webhook.New(mgr, webhook.Options{
		// A namespace nobody writes to: the hooks stay out of the other
		// tests' way.
		Registration: webhook.Registration{Name: name, URL: fmt.Sprintf("https://127.0.0.1:%d", port),
			Namespaces: []string{"no-such-namespace"}, TimeoutSeconds: timeout},
		SecretNamespace: webhooktest.Namespace,
		SecretName:      name + "-certs",
		Hooks: []webhook.HookHandler{{Hook: webhook.Hook{
			Name: "timeouts.rollgate.dev", Path: "/validate-timeouts", TimeoutSeconds: 5,
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{"timeouts.rollgate.dev"}, APIVersions: []string{"v1"},
					Resources: []string{"nothings"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
			}},
		}, Handler: allow}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-stopped
		for _, obj := range []client.Object{
			&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}},
			&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: webhooktest.Namespace, Name: name + "-certs"}},
		} {
			if err := client.IgnoreNotFound(suite.c.Delete(context.Background(), obj)); err != nil {
				t.Errorf("delete %T: %v", obj, err)
			}
		}
	})

	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	// timeouts reads both configurations and returns every hook's timeout.
	timeouts := func(ctx context.Context) (map[string]int32, error) {
		out := map[string]int32{}
		for _, obj := range []client.Object{mwc, vwc} {
			if err := suite.c.Get(ctx, client.ObjectKey{Name: name}, obj); err != nil {
				return nil, client.IgnoreNotFound(err)
			}
		}
		for _, h := range mwc.Webhooks {
			out[h.Name] = ptr.Deref(h.TimeoutSeconds, 0)
		}
		for _, h := range vwc.Webhooks {
			out[h.Name] = ptr.Deref(h.TimeoutSeconds, 0)
		}
		return out, nil
	}
	// kept waits until every hook of both configurations has the
	// configured timeout.
	kept := func(what string) {
		t.Helper()
		start := time.Now()
		var got map[string]int32
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			now, err := timeouts(ctx)
			if err != nil || len(now) != 2 {
				return false, err
			}
			got = now
			for _, s := range got {
				if s != timeout {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			t.Fatalf("%s: the hooks' timeouts are %v after 60 s, want %d s on each of %s and timeouts.rollgate.dev", what, got, timeout, webhook.WorkloadHook(nil).Name)
		}
		t.Logf("%s: every hook at %d s within %s", what, timeout, time.Since(start).Round(time.Millisecond))
	}

	kept("first publish")
	before := [2]string{mwc.ResourceVersion, vwc.ResourceVersion}
	if err := keeper.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := timeouts(ctx); err != nil {
		t.Fatal(err)
	}
	if after := [2]string{mwc.ResourceVersion, vwc.ResourceVersion}; after != before {
		t.Errorf("a check of current configurations wrote them: resourceVersions %v, then %v", before, after)
	}

	for i := range mwc.Webhooks {
		mwc.Webhooks[i].TimeoutSeconds = ptr.To[int32](10)
	}
	if err := suite.c.Update(ctx, mwc); err != nil {
		t.Fatal(err)
	}
	vwc.Webhooks[0].TimeoutSeconds = ptr.To[int32](10)
	if err := suite.c.Update(ctx, vwc); err != nil {
		t.Fatal(err)
	}
	kept("both configurations rewritten with 10 s")
}
