package webhook_test

import (
	"context"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	admissionclient "k8s.io/client-go/kubernetes/typed/admissionregistration/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crenvtest "sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/rollgate/rollgate/reconciler/webhook"
)

// TestWatchNeedsOnlyItsOwnName: the watch on the webhook configurations
// works for a user who may list and watch them by name alone (RBAC
// resourceNames, the least privilege a ClusterRole can grant), and sees
// every creation, change and deletion of either kind; that user can list
// no other webhook configuration of the cluster.
func TestWatchNeedsOnlyItsOwnName(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	name := "rollgate-watch-" + rand.String(5)
	cfg := userAllowed(t, name, rbacv1.PolicyRule{
		APIGroups:     []string{admissionregistrationv1.GroupName},
		Resources:     []string{"mutatingwebhookconfigurations", "validatingwebhookconfigurations"},
		ResourceNames: []string{name},
		Verbs:         []string{"list", "watch"},
	})
	user, err := admissionclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	byName := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 15*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := user.MutatingWebhookConfigurations().List(ctx, byName)
		return err == nil, nil
	})
	if err != nil {
		t.Fatal("the user may never list the configuration by name")
	}
	if _, err := user.MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("listing every MutatingWebhookConfiguration: want forbidden, got %v", err)
	}

	// Hooks registered for a namespace that does not exist: they call
	// nothing.
	reg := webhook.Registration{Name: name, URL: "https://127.0.0.1:1", Namespaces: []string{"nowhere-" + rand.String(5)}}
	hooks := []webhook.Hook{webhook.WorkloadHook(nil), {
		Name: "probe.rollgate.dev", Path: "/probe",
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"},
				Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
		}},
	}}
	events := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- webhook.WatchConfigurations(ctx, cfg, reg, hooks, func() {
			select {
			case events <- struct{}{}:
			default:
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("watch: %v", err)
		}
	})

	m, v := reg.Configurations(hooks, nil)
	steps := []struct {
		what string
		do   func() error
	}{
		{"MutatingWebhookConfiguration created", func() error { return suite.c.Create(ctx, m) }},
		{"ValidatingWebhookConfiguration created", func() error { return suite.c.Create(ctx, v) }},
		{"MutatingWebhookConfiguration changed", func() error {
			m.Webhooks[0].ClientConfig.CABundle = []byte("changed")
			return suite.c.Update(ctx, m)
		}},
		{"ValidatingWebhookConfiguration deleted", func() error { return suite.c.Delete(ctx, v) }},
		{"MutatingWebhookConfiguration deleted", func() error { return suite.c.Delete(ctx, m) }},
	}
	for _, s := range steps {
		select {
		case <-events:
		default:
		}
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.what, err)
		}
		select {
		case <-events:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: the watch saw nothing in 30 s", s.what)
		}
	}
}

// userAllowed returns the client configuration of a new user bound to a
// ClusterRole holding rules alone.
func userAllowed(t *testing.T, name string, rules ...rbacv1.PolicyRule) *rest.Config {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}},
	}
	for _, obj := range []client.Object{role, binding} {
		if err := suite.c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := suite.c.Delete(context.Background(), obj); err != nil {
				t.Errorf("delete %T %s: %v", obj, name, err)
			}
		})
	}
	user, err := suite.env.Environment.AddUser(crenvtest.User{Name: name}, suite.env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return user.Config()
}
