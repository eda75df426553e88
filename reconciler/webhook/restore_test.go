package webhook_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/reconciler/webhook/webhooktest"
)

// restartedServer runs a webhook server called name twice, the second
// time with the certificates the first one left in the Secret: the state
// of every controller start after the first install, whose next periodic
// check is an hour away (the first start renews the certificates and
// checks again after 30 seconds).
func restartedServer(t *testing.T, name string) *webhooktest.Server {
	t.Helper()
	first, cancelFirst := context.WithCancel(context.Background())
	s, err := webhooktest.Run(first, suite.env.Config, suite.env.Scheme, name, nil)
	cancelFirst()
	if err != nil {
		t.Fatal(err)
	}
	<-s.Stopped
	ctx, cancel := context.WithCancel(context.Background())
	s, err = webhooktest.Run(ctx, suite.env.Config, suite.env.Scheme, name, nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		<-s.Stopped
		mwc := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: webhooktest.Namespace, Name: name + "-certs"}}
		for _, obj := range []client.Object{mwc, secret} {
			if err := client.IgnoreNotFound(suite.c.Delete(context.Background(), obj)); err != nil {
				t.Errorf("delete %T %s: %v", obj, name, err)
			}
		}
	})
	return s
}

// TestConfigurationPutBackAtOnce: whatever happens to the webhook
// configuration (its CA bundle overwritten, its webhooks replaced by a
// copy without one as a chart render has them, its match conditions
// removed, the configuration deleted), the controller puts it back as soon
// as it sees the change, not at its hourly check, and the API server
// trusts the webhook again.
func TestConfigurationPutBackAtOnce(t *testing.T) {
	server := restartedServer(t, "rollgate-restore")
	ctx := context.Background()
	var secret corev1.Secret
	get(t, &secret, webhooktest.Namespace, server.Name+"-certs")
	bundle := secret.Data["ca.crt"]
	key := client.ObjectKey{Name: server.Name}
	current := func(t *testing.T) *admissionregistrationv1.MutatingWebhookConfiguration {
		t.Helper()
		var mwc admissionregistrationv1.MutatingWebhookConfiguration
		if err := suite.c.Get(ctx, key, &mwc); err != nil {
			t.Fatal(err)
		}
		return &mwc
	}

	changes := []struct {
		what   string
		change func(t *testing.T)
	}{
		{"CA bundle overwritten", func(t *testing.T) {
			mwc := current(t)
			for i := range mwc.Webhooks {
				mwc.Webhooks[i].ClientConfig.CABundle = []byte("not a certificate")
			}
			if err := suite.c.Update(ctx, mwc); err != nil {
				t.Fatal(err)
			}
		}},
		{"webhooks replaced without a CA bundle", func(t *testing.T) {
			mwc := current(t)
			for i := range mwc.Webhooks {
				mwc.Webhooks[i].ClientConfig.CABundle = nil
				mwc.Webhooks[i].MatchConditions = nil
			}
			if err := suite.c.Update(ctx, mwc); err != nil {
				t.Fatal(err)
			}
		}},
		{"match conditions removed, CA bundle kept", func(t *testing.T) {
			mwc := current(t)
			for i := range mwc.Webhooks {
				mwc.Webhooks[i].MatchConditions = nil
			}
			if err := suite.c.Update(ctx, mwc); err != nil {
				t.Fatal(err)
			}
		}},
		{"configuration deleted", func(t *testing.T) {
			if err := suite.c.Delete(ctx, current(t)); err != nil {
				t.Fatal(err)
			}
		}},
	}
	want := current(t).Webhooks
	for _, c := range changes {
		start := time.Now()
		c.change(t)
		var got *admissionregistrationv1.MutatingWebhookConfiguration
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 60*time.Second, false, func(ctx context.Context) (bool, error) {
			var mwc admissionregistrationv1.MutatingWebhookConfiguration
			if err := suite.c.Get(ctx, key, &mwc); apierrors.IsNotFound(err) {
				return false, nil
			} else if err != nil {
				return false, err
			}
			got = &mwc
			return len(mwc.Webhooks) == len(want) && bytes.Equal(mwc.Webhooks[0].ClientConfig.CABundle, bundle) &&
				len(mwc.Webhooks[0].MatchConditions) == len(want[0].MatchConditions), nil
		})
		if err != nil {
			t.Fatalf("%s: not put back within 60 s (now %+v)", c.what, got)
		}
		t.Logf("%s: put back in %s", c.what, time.Since(start).Round(time.Millisecond))
		handshake(t, server, secret.Data["tls.crt"])
	}
}
