// Package rollouttest holds the fixtures the tests of the reconciler
// packages share: a real API server with rollgate's kinds, and Rollouts
// to put in it.
package rollouttest

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/envtest"
	"github.com/rollgate/rollgate/test/rig"
)

// StartAPIServer starts a real API server with Rollouts and a context
// that ends with the test.
func StartAPIServer(t *testing.T) (context.Context, *rest.Config, client.Client, *runtime.Scheme) {
	t.Helper()
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	cfg, c := envtest.Start(t, envtest.WithScheme(scheme))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx, cfg, c, scheme
}

// MustCreate creates o or fails the test.
func MustCreate(t *testing.T, c client.Client, o client.Object) {
	t.Helper()
	if err := c.Create(context.Background(), o); err != nil {
		t.Fatalf("create %T %s: %v", o, o.GetName(), err)
	}
}

// WaitFor waits up to 30 s for cond, or fails the test naming what.
func WaitFor(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// GatedRollout is a Rollout of Deployment name with one manual gate,
// whose manifest is in Git where git says (nil: not in Git).
func GatedRollout(t *testing.T, ns, name string, git *v1alpha1.GitReference) *v1alpha1.Rollout {
	t.Helper()
	ro := rig.Rollout{Name: name, Namespace: ns, WithoutTraffic: true, Steps: []string{`{replicas: 1, pause: {}}`, `{replicas: "100%"}`}}.Object(t)
	ro.Spec.Git = git
	return ro
}
