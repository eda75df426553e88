package traffic_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/envtest"
	"github.com/rollgate/rollgate/test/repo"
	"github.com/rollgate/rollgate/traffic"
)

// k8s is the client of the API server the whole suite shares.
var k8s client.Client

func TestMain(m *testing.M) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, v1alpha1.AddToScheme, gatewayv1.Install,
	} {
		if err := add(scheme); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	env, err := envtest.New(envtest.WithScheme(scheme), envtest.WithExtraCRDDirs("traffic/testdata/crds", repo.HTTPRouteCRD("standard")))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	k8s = env.Client
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

// clock is a settable clock for grace periods.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// fixture is one test's namespace, Rollout and clock.
type fixture struct {
	t     *testing.T
	ctx   context.Context
	ns    string
	ro    *v1alpha1.Rollout
	clock *clock
	opts  traffic.Options
}

// newFixture creates a namespace with a stable Service "web" (selector
// app=web) and a Rollout using ref.
func newFixture(t *testing.T, ref v1alpha1.TrafficRoutingRef) *fixture {
	t.Helper()
	ctx := t.Context()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "traffic-"}}
	must(t, k8s.Create(ctx, ns))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), ns) })
	f := &fixture{t: t, ctx: ctx, ns: ns.Name, clock: newClock()}
	f.opts = traffic.Options{Now: f.clock.Now}
	if ref.Service == "" {
		ref.Service = "web"
	}
	f.ro = &v1alpha1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns.Name},
		Spec: v1alpha1.RolloutSpec{
			WorkloadRef: v1alpha1.WorkloadRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
			Strategy: v1alpha1.RolloutStrategy{Canary: &v1alpha1.CanaryStrategy{
				Steps:           []v1alpha1.CanaryStep{{TrafficRoutingStrategy: v1alpha1.TrafficRoutingStrategy{Traffic: ptr.To("5%")}}},
				TrafficRoutings: []v1alpha1.TrafficRoutingRef{ref},
			}},
		},
	}
	must(t, k8s.Create(ctx, f.ro))
	f.createService("web", corev1.ServiceTypeClusterIP)
	return f
}

func (f *fixture) createService(name string, typ corev1.ServiceType) *corev1.Service {
	f.t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns,
			Labels:      map[string]string{"app": name, "kustomize.toolkit.fluxcd.io/name": "apps"},
			Annotations: map[string]string{"team": "payments", "argocd.argoproj.io/tracking-id": "apps:/Service:x/" + name}},
		Spec: corev1.ServiceSpec{
			Type:     typ,
			Selector: map[string]string{"app": name},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}
	must(f.t, k8s.Create(f.ctx, svc))
	return svc
}

func (f *fixture) router() traffic.Router {
	f.t.Helper()
	r, err := traffic.New(k8s, f.ro, f.opts)
	must(f.t, err)
	return r
}

// desired is a step of a release from revision "v1" to "v2".
func desired(weight int32) traffic.Desired {
	return traffic.Desired{CanaryWeight: weight, StableRevision: "v1", CanaryRevision: "v2"}
}

// ensure calls EnsureRoutes until done, advancing the clock over grace
// periods; it returns the number of calls.
func (f *fixture) ensure(r traffic.Router, d traffic.Desired) int {
	f.t.Helper()
	return f.loop(func() (bool, error) { return r.EnsureRoutes(f.ctx, d) })
}

// restore calls Restore until done, like ensure.
func (f *fixture) restore(r traffic.Router) int {
	f.t.Helper()
	return f.loop(func() (bool, error) { return r.Restore(f.ctx) })
}

// step calls EnsureRoutes until it returns something other than a wait.
func (f *fixture) step(r traffic.Router, d traffic.Desired) (bool, error) {
	f.t.Helper()
	for i := 0; i < 20; i++ {
		done, err := r.EnsureRoutes(f.ctx, d)
		wait, ok := traffic.RetryAfter(err)
		if !ok {
			return done, err
		}
		f.clock.Advance(wait)
	}
	f.t.Fatal("still waiting after 20 calls")
	return false, nil
}

func (f *fixture) loop(call func() (bool, error)) int {
	f.t.Helper()
	for i := 1; i <= 20; i++ {
		done, err := call()
		if wait, ok := traffic.RetryAfter(err); ok {
			f.clock.Advance(wait)
			continue
		}
		must(f.t, err)
		if done {
			return i
		}
	}
	f.t.Fatal("router not done after 20 calls")
	return 0
}

func (f *fixture) get(name string, obj client.Object) client.Object {
	f.t.Helper()
	must(f.t, k8s.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: name}, obj))
	return obj
}

func (f *fixture) absent(name string, obj client.Object) {
	f.t.Helper()
	err := k8s.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: name}, obj)
	if err == nil {
		f.t.Fatalf("%T %s still exists", obj, name)
	}
	if !isNotFound(err) {
		f.t.Fatal(err)
	}
}

func isNotFound(err error) bool {
	return client.IgnoreNotFound(err) == nil && err != nil
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantErr(t testing.TB, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error = %v, want %v", err, target)
	}
}
