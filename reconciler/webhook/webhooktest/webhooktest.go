// Package webhooktest runs rollgate's admission webhook for tests: a
// manager serving it on a loopback URL against a test API server (envtest
// or kwok), registered the way a controller running outside the cluster
// registers it.
package webhooktest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/webhook"
	"github.com/rollgate/rollgate/reconciler/workload"
	"github.com/rollgate/rollgate/test/proc"
)

// Namespace holds the certificate Secret and the readiness probe objects.
const Namespace = "rollgate-system"

// Server is a running webhook.
type Server struct {
	// Keeper keeps the certificates (Sync renews them by hand).
	Keeper *webhook.Keeper
	// URL is the registered base URL.
	URL string
	// Name is the name of the webhook configurations.
	Name string
	// Clock is the keeper's clock: real time plus Offset.
	Clock *Clock
	// Stopped is closed once the server has stopped (its ctx ended).
	Stopped <-chan struct{}
}

// Clock is a clock the test can move: real time plus an offset.
type Clock struct{ offset atomic.Int64 }

// NewClock returns a clock offset from real time (negative: in the past).
func NewClock(offset time.Duration) *Clock {
	c := &Clock{}
	c.offset.Store(int64(offset))
	return c
}

// Now returns real time plus the offset.
func (c *Clock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

// Run starts the webhook against cfg until ctx ends and returns once its
// configuration is published and the API server calls it (a dry-run
// image change of a probe Deployment comes back held). scheme must hold
// the built-in kinds and rollgate's API. clock is the certificate keeper's
// clock; nil means real time. (API servers check certificates against
// real time: start a clock in the past and move it towards now to test a
// rotation.)
func Run(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, name string, clock *Clock) (*Server, error) {
	ports, err := proc.FreePorts(1)
	if err != nil {
		return nil, err
	}
	port := ports[0]
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return nil, err
	}
	s := &Server{URL: fmt.Sprintf("https://127.0.0.1:%d", port), Name: name, Clock: clock}
	if clock == nil {
		s.Clock = NewClock(0)
	}
	c := mgr.GetClient()
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}
	if err := client.IgnoreAlreadyExists(direct.Create(ctx, ns)); err != nil {
		return nil, err
	}
	s.Keeper, err = webhook.New(mgr, webhook.Options{
		Registration:    webhook.Registration{Name: name, URL: s.URL},
		SecretNamespace: Namespace,
		SecretName:      name + "-certs",
		Now:             s.Clock.Now,
	})
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	stopped := make(chan struct{})
	s.Stopped = stopped
	go func() {
		defer close(stopped)
		done <- mgr.Start(ctx)
	}()
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-done:
			return false, fmt.Errorf("manager stopped: %w", err)
		default:
		}
		if ok, err := registered(ctx, direct, name, s.URL); !ok || err != nil {
			return false, err
		}
		return probe(ctx, c, name)
	})
	if err != nil {
		return nil, fmt.Errorf("webhook never answered: %w", err)
	}
	return s, nil
}

// registered reports whether the configuration called name sends the
// workload webhook to url with a CA bundle: this server's keeper has
// published it (another server on the same API server may hold the probe
// Deployment before that).
func registered(ctx context.Context, c client.Client, name, url string) (bool, error) {
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &mwc); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	for _, w := range mwc.Webhooks {
		if w.ClientConfig.URL != nil && *w.ClientConfig.URL == url+webhook.WorkloadPath && len(w.ClientConfig.CABundle) > 0 {
			return true, nil
		}
	}
	return false, nil
}

// probe creates a Rollout and a covered Deployment (once) and reports
// whether a dry-run image change comes back held.
func probe(ctx context.Context, c client.Client, name string) (bool, error) {
	labels := map[string]string{"app": name + "-probe"}
	ro := &v1alpha1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-probe", Namespace: Namespace},
		Spec: v1alpha1.RolloutSpec{
			WorkloadRef: v1alpha1.WorkloadRef{APIVersion: "apps/v1", Kind: "Deployment", Name: name + "-probe"},
			Strategy: v1alpha1.RolloutStrategy{Canary: &v1alpha1.CanaryStrategy{
				Steps: []v1alpha1.CanaryStep{{Replicas: ptr.To(intstr.FromInt32(1))}},
			}},
		},
	}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-probe", Namespace: Namespace,
			Labels: map[string]string{v1alpha1.LabelControlled: "true"}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: "probe:v1"}}},
			},
		},
	}
	for _, obj := range []client.Object{ro, d} {
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return false, err
		}
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
		return false, nil // the cache may not have it yet
	}
	d.Spec.Template.Spec.Containers[0].Image = "probe:v2"
	if err := c.Update(ctx, d, client.DryRunAll); err != nil {
		var status apierrors.APIStatus
		if errors.As(err, &status) {
			return false, nil // the API server cannot reach the webhook yet
		}
		return false, err
	}
	return d.Spec.Paused, nil
}

// Held reports whether the webhook holds obj's workload (obj names it): a
// dry-run change of its pod template comes back with the control
// annotation. A test waits for it before it relies on the webhook's cache
// knowing a new Rollout.
func Held(ctx context.Context, c client.Client, obj client.Object) (bool, error) {
	probe := obj.DeepCopyObject().(client.Object)
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), probe); err != nil {
		return false, err
	}
	tpl, err := workload.PodTemplate(probe)
	if err != nil {
		return false, err
	}
	tpl.Annotations = map[string]string{"probe": rand.String(4)}
	if err := c.Update(ctx, probe, client.DryRunAll); err != nil {
		return false, err
	}
	_, held := probe.GetAnnotations()[v1alpha1.AnnotationControl]
	return held, nil
}
