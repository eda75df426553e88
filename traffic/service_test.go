package traffic_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/traffic"
)

func (f *fixture) service(name string) *corev1.Service {
	f.t.Helper()
	return f.get(name, &corev1.Service{}).(*corev1.Service)
}

func TestServicesCanaryCreatedAndStableNarrowedThenRestored(t *testing.T) {
	f := newFixture(t, gatewayRef(0))
	f.createRoute()
	before := f.service("web")
	r := f.router()
	f.ensure(r, desired(10))

	canary := f.service("web-canary")
	if ref := metav1.GetControllerOf(canary); ref == nil || ref.UID != f.ro.UID || ref.Kind != "Rollout" {
		t.Errorf("canary Service owner %+v, want the Rollout", ref)
	}
	want := map[string]string{"app": "web", v1alpha1.LabelRevision: "v2"}
	if !maps.Equal(canary.Spec.Selector, want) {
		t.Errorf("canary selector %v, want %v", canary.Spec.Selector, want)
	}
	if canary.Spec.ClusterIP == before.Spec.ClusterIP || canary.Spec.ClusterIP == "" {
		t.Errorf("canary clusterIP %q, stable %q", canary.Spec.ClusterIP, before.Spec.ClusterIP)
	}
	if canary.Labels[v1alpha1.LabelRevision] != "v2" || canary.Labels[traffic.LabelCanaryOf] != "web" || canary.Annotations["team"] != "payments" {
		t.Errorf("canary metadata: labels %v annotations %v", canary.Labels, canary.Annotations)
	}
	for _, k := range []string{"argocd.argoproj.io/tracking-id", "kustomize.toolkit.fluxcd.io/name"} {
		if _, ok := canary.Annotations[k]; ok {
			t.Errorf("canary Service copied GitOps annotation %s", k)
		}
		if _, ok := canary.Labels[k]; ok {
			t.Errorf("canary Service copied GitOps label %s", k)
		}
	}

	stable := f.service("web")
	want = map[string]string{"app": "web", v1alpha1.LabelRevision: "v1"}
	if !maps.Equal(stable.Spec.Selector, want) {
		t.Errorf("stable selector %v, want %v", stable.Spec.Selector, want)
	}
	if held, err := traffic.ParseHeld(stable.Annotations); err != nil || held == nil || held.StableRevision != "v1" ||
		stable.Labels[traffic.LabelHeld] == "" {
		t.Errorf("the stable revision is not recorded for the route webhook: labels %v, held %+v, %v", stable.Labels, held, err)
	}
	if _, ok := canary.Labels[traffic.LabelHeld]; ok {
		t.Errorf("the canary Service copied the held label: %v", canary.Labels)
	}
	var saved map[string]map[string]string
	must(t, json.Unmarshal([]byte(stable.Annotations[v1alpha1.AnnotationOriginal]), &saved))
	if !maps.Equal(saved["selector"], before.Spec.Selector) {
		t.Errorf("saved selector %v, want %v", saved, before.Spec.Selector)
	}

	// A later step's weight is the routes' business: the stable Service
	// is not written again.
	f.ensure(r, desired(50))
	if again := f.service("web"); again.ResourceVersion != stable.ResourceVersion {
		t.Errorf("the stable Service was written again for a new weight (resourceVersion %s -> %s): %v",
			stable.ResourceVersion, again.ResourceVersion, again.Annotations[traffic.AnnotationHeld])
	}

	// A canary Service made before rollgate labelled them (an upgrade
	// mid-release) gets the label at the next step: the controller caches
	// and watches only the EndpointSlices that carry it.
	canary = f.service("web-canary")
	delete(canary.Labels, traffic.LabelCanaryOf)
	must(t, k8s.Update(f.ctx, canary))
	f.ensure(r, desired(60))
	if got := f.service("web-canary").Labels[traffic.LabelCanaryOf]; got != "web" {
		t.Errorf("a canary Service without %s after a step: %q, want web", traffic.LabelCanaryOf, got)
	}

	f.restore(r)
	after := f.service("web")
	if !maps.Equal(after.Spec.Selector, before.Spec.Selector) || !maps.Equal(after.Annotations, before.Annotations) ||
		!maps.Equal(after.Labels, before.Labels) {
		t.Errorf("restored Service: selector %v annotations %v, want %v %v",
			after.Spec.Selector, after.Annotations, before.Spec.Selector, before.Annotations)
	}
	f.absent("web-canary", &corev1.Service{})
}

func TestServicesNotNarrowedWithoutStableRevision(t *testing.T) {
	f := newFixture(t, gatewayRef(0))
	f.createRoute()
	d := desired(10)
	d.StableRevision = ""
	f.ensure(f.router(), d)
	stable := f.service("web")
	if _, ok := stable.Spec.Selector[v1alpha1.LabelRevision]; ok {
		t.Errorf("stable Service narrowed without a stable revision: %v", stable.Spec.Selector)
	}
	if _, ok := stable.Annotations[v1alpha1.AnnotationOriginal]; ok {
		t.Error("stable Service annotated although not narrowed")
	}
}

func TestServicesLoadBalancerCanaryIsNodePortWithoutFixedPorts(t *testing.T) {
	f := newFixture(t, gatewayRef(0))
	must(t, k8s.Delete(f.ctx, f.service("web")))
	lb := f.createService("web", corev1.ServiceTypeLoadBalancer)
	f.createRoute()
	f.ensure(f.router(), desired(10))
	canary := f.service("web-canary")
	lb = f.service(lb.Name)
	if canary.Spec.Type != corev1.ServiceTypeNodePort {
		t.Errorf("canary type %s, want NodePort", canary.Spec.Type)
	}
	if canary.Spec.Ports[0].NodePort == lb.Spec.Ports[0].NodePort {
		t.Errorf("canary took the stable node port %d", lb.Spec.Ports[0].NodePort)
	}
}

func TestServicesCanaryNameTakenByAnotherObject(t *testing.T) {
	f := newFixture(t, gatewayRef(0))
	f.createRoute()
	f.createService("web-canary", corev1.ServiceTypeClusterIP)
	_, err := f.router().EnsureRoutes(f.ctx, desired(10))
	wantErr(t, err, traffic.ErrConflict)
}

func TestGracePeriodAfterEachChangeSurvivesRestart(t *testing.T) {
	f := newFixture(t, gatewayRef(3))
	f.createRoute()
	grace := 3 * time.Second

	_, err := f.router().EnsureRoutes(f.ctx, desired(10))
	if wait, ok := traffic.RetryAfter(err); !ok || wait != grace {
		t.Fatalf("after the Services changed: %v, want a wait of %s", err, grace)
	}
	f.clock.Advance(time.Second)
	_, err = f.router().EnsureRoutes(f.ctx, desired(10)) // a restarted controller
	if wait, ok := traffic.RetryAfter(err); !ok || wait != 2*time.Second {
		t.Fatalf("1s later: %v, want a wait of 2s", err)
	}
	if w := weights(f.route().Spec.Rules[0]); len(w) != 1 {
		t.Fatalf("routes changed during the Services' grace period: %v", w)
	}
	f.clock.Advance(2 * time.Second)
	_, err = f.router().EnsureRoutes(f.ctx, desired(10))
	if wait, ok := traffic.RetryAfter(err); !ok || wait != grace {
		t.Fatalf("after the routes changed: %v, want a wait of %s", err, grace)
	}
	f.clock.Advance(grace)
	if done, err := f.router().EnsureRoutes(f.ctx, desired(10)); !done || err != nil {
		t.Fatalf("after the grace period: done=%v err=%v", done, err)
	}
	if calls := f.restore(f.router()); calls != 3 {
		t.Errorf("Restore took %d calls, want 3 (selector, wait, routes, wait, delete)", calls)
	}
}

// A GitOps sync that writes back the stable Service and the HTTPRoute
// mid-release gets the step back in the next call: narrowing the stable
// Service again is no new traffic change to wait a grace period after.
func TestReappliedServiceAndRouteAreReassertedInOneCall(t *testing.T) {
	f := newFixture(t, gatewayRef(3))
	declared := f.createRoute()
	f.ensure(f.router(), desired(10))
	f.clock.Advance(time.Minute)

	stable := f.service("web")
	stable.Spec.Selector = map[string]string{"app": "web"}
	must(t, k8s.Update(f.ctx, stable))
	route := f.route()
	route.Spec.Rules = declared.Spec.Rules
	must(t, k8s.Update(f.ctx, route))

	done, err := f.router().EnsureRoutes(f.ctx, desired(10))
	if !done || err != nil {
		t.Errorf("EnsureRoutes after the re-apply: done=%v err=%v, want done at once", done, err)
	}
	if got := w(f.route().Spec.Rules[0]); got != "web=90,web-canary=10" {
		t.Errorf("routes after the re-apply: %s, want web=90,web-canary=10", got)
	}
	if got := f.service("web").Spec.Selector[v1alpha1.LabelRevision]; got != "v1" {
		t.Errorf("stable Service not narrowed again: %v", f.service("web").Spec.Selector)
	}
}

func TestServicesSelectorReappliedFromGitBecomesDeclared(t *testing.T) {
	f := newFixture(t, gatewayRef(0))
	f.createRoute()
	f.ensure(f.router(), desired(10))

	// A GitOps sync writes the selector from Git, now with a second key;
	// the annotation (another manager's key) stays.
	stable := f.service("web")
	stable.Spec.Selector = map[string]string{"app": "web", "tier": "frontend"}
	must(t, k8s.Update(f.ctx, stable))

	f.ensure(f.router(), desired(10))
	want := map[string]string{"app": "web", "tier": "frontend", v1alpha1.LabelRevision: "v1"}
	if got := f.service("web").Spec.Selector; !maps.Equal(got, want) {
		t.Errorf("stable selector %v, want %v", got, want)
	}
	want[v1alpha1.LabelRevision] = "v2"
	if got := f.service("web-canary").Spec.Selector; !maps.Equal(got, want) {
		t.Errorf("canary selector %v, want %v", got, want)
	}
	f.restore(f.router())
	if got := f.service("web").Spec.Selector; !maps.Equal(got, map[string]string{"app": "web", "tier": "frontend"}) {
		t.Errorf("restored selector %v, want the one from Git", got)
	}
}

// The stable Service is narrowed to the stable revision only once every
// running pod it selects carries the revision label: narrowed earlier it
// would select none of them, and requests would fail (seen on a real data
// plane: 503s for two seconds at the start of each release).
// TestServicesNarrowedByAnotherKeyMidRelease: a release that narrowed the
// stable Service by rollgate.dev/revision goes on by pod-template-hash (a
// controller upgraded mid-release): the old key comes off the selector at
// the next step, and Restore brings back the declared selector alone.
func TestServicesNarrowedByAnotherKeyMidRelease(t *testing.T) {
	f := newFixture(t, gatewayRef(0))
	f.createRoute()
	before := f.service("web")
	f.ensure(f.router(), desired(10))
	if sel := f.service("web").Spec.Selector; sel[v1alpha1.LabelRevision] != "v1" {
		t.Fatalf("stable selector %v, want it narrowed by %s", sel, v1alpha1.LabelRevision)
	}
	f.opts.RevisionLabel = "pod-template-hash"
	r := f.router()
	d := desired(20)
	d.StableRevision, d.CanaryRevision = "h1", "v2"
	f.ensure(r, d)
	want := map[string]string{"app": "web", "pod-template-hash": "h1"}
	if sel := f.service("web").Spec.Selector; !maps.Equal(sel, want) {
		t.Errorf("stable selector after the key changed: %v, want %v", sel, want)
	}
	want = map[string]string{"app": "web", "pod-template-hash": "v2"}
	if sel := f.service("web-canary").Spec.Selector; !maps.Equal(sel, want) {
		t.Errorf("canary selector after the key changed: %v, want %v", sel, want)
	}
	if held, err := traffic.ParseHeld(f.service("web").Annotations); err != nil || held == nil || held.RevisionLabel != "pod-template-hash" {
		t.Errorf("held step %+v (%v), want it to record pod-template-hash", held, err)
	}
	f.restore(r)
	if after := f.service("web"); !maps.Equal(after.Spec.Selector, before.Spec.Selector) {
		t.Errorf("restored selector %v, want %v", after.Spec.Selector, before.Spec.Selector)
	}
}

func TestServicesNarrowedOnlyOnceThePodsAreLabelled(t *testing.T) {
	f := newFixture(t, gatewayRef(0))
	f.createRoute()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: f.ns, Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "web:v1"}}},
	}
	must(t, k8s.Create(f.ctx, pod))
	r := f.router()
	_, err := r.EnsureRoutes(f.ctx, desired(10))
	if _, wait := traffic.RetryAfter(err); !wait {
		t.Fatalf("EnsureRoutes with an unlabelled pod: %v, want a wait", err)
	}
	if sel := f.service("web").Spec.Selector; sel[v1alpha1.LabelRevision] != "" {
		t.Fatalf("the stable Service was narrowed to %v while its pod has no revision label", sel)
	}
	pod.Labels[v1alpha1.LabelRevision] = "v1"
	must(t, k8s.Update(f.ctx, pod))
	f.ensure(r, desired(10))
	if sel := f.service("web").Spec.Selector; sel[v1alpha1.LabelRevision] != "v1" {
		t.Fatalf("stable selector %v once the pod is labelled, want it narrowed to v1", sel)
	}
}

// TestRoutesWaitForAReadyCanaryEndpoint: with Options.Endpoints set, routes
// send nothing to the canary Service until one of its EndpointSlices lists
// a ready endpoint (a gateway would answer 503 before); an endpoint not
// ready, or a slice of another Service, does not count. Once the routes
// carry the step, the slices are not read again for it, with a grace
// period or without one.
func TestRoutesWaitForAReadyCanaryEndpoint(t *testing.T) {
	for _, grace := range []int32{3, 0} {
		t.Run(fmt.Sprintf("grace %ds", grace), func(t *testing.T) { routesWaitForAReadyCanaryEndpoint(t, grace) })
	}
}

func routesWaitForAReadyCanaryEndpoint(t *testing.T, grace int32) {
	f := newFixture(t, gatewayRef(grace))
	f.createRoute()
	f.opts.Endpoints = k8s
	f.opts.Reached = &traffic.Reached{}
	r := f.router()
	waits := func(what string) {
		t.Helper()
		_, err := r.EnsureRoutes(f.ctx, desired(10))
		if d, wait := traffic.RetryAfter(err); wait && !strings.Contains(err.Error(), "no ready endpoint") {
			f.clock.Advance(d) // the Services' grace period comes first
			_, err = r.EnsureRoutes(f.ctx, desired(10))
		}
		if _, wait := traffic.RetryAfter(err); !wait || !strings.Contains(err.Error(), "no ready endpoint") {
			t.Fatalf("EnsureRoutes %s: %v, want a wait for a ready endpoint", what, err)
		}
		if got := w(f.route().Spec.Rules[0]); strings.Contains(got, "web-canary") {
			t.Fatalf("routes send requests to the canary Service %s: %s", what, got)
		}
	}
	waits("with no EndpointSlice")
	slice := func(name, service string, ready bool) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: f.ns, Labels: map[string]string{discoveryv1.LabelServiceName: service}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.7"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		}
	}
	must(t, k8s.Create(f.ctx, slice("web-stable", "web", true)))
	notReady := slice("web-canary-a", "web-canary", false)
	must(t, k8s.Create(f.ctx, notReady))
	waits("with the canary's only endpoint not ready")
	ready := true
	notReady.Endpoints[0].Conditions.Ready = &ready
	must(t, k8s.Update(f.ctx, notReady))
	f.ensure(r, desired(10))
	if got := w(f.route().Spec.Rules[0]); got != "web=90,web-canary=10" {
		t.Fatalf("routes once the canary has a ready endpoint: %s, want web=90,web-canary=10", got)
	}
	// The step's routes are in place (and settled): a slice that empties
	// later (a pod replaced) is not read again for them.
	must(t, k8s.Delete(f.ctx, notReady))
	if done, err := r.EnsureRoutes(f.ctx, desired(10)); !done || err != nil {
		t.Fatalf("EnsureRoutes of the step in place: done=%v err=%v, want done", done, err)
	}
	if grace > 0 {
		return
	}
	// Without a grace period nothing is written to record the step (one
	// request per step and Rollout): the controller remembers it. After a
	// restart it looks at the slices once more, and waits while none is
	// ready, its routes left as they are.
	canary := f.service("web-canary")
	if v, ok := canary.Annotations["rollgate.dev/traffic-progress"]; ok {
		t.Errorf("the canary Service carries a progress record without a grace period: %s", v)
	}
	if f.opts.Reached.Len() != 1 {
		t.Errorf("steps remembered: %d, want 1", f.opts.Reached.Len())
	}
	remembered := f.opts.Reached
	f.opts.Reached = &traffic.Reached{}
	if _, err := f.router().EnsureRoutes(f.ctx, desired(10)); !strings.Contains(fmt.Sprint(err), "no ready endpoint") {
		t.Fatalf("EnsureRoutes after a restart, with no ready canary endpoint: %v, want a wait for a ready endpoint", err)
	}
	if got := w(f.route().Spec.Rules[0]); got != "web=90,web-canary=10" {
		t.Fatalf("routes after a restart while the canary has no ready endpoint: %s, want them left as they were", got)
	}
	// Restore deletes the canary Service and forgets its step.
	f.opts.Reached = remembered
	f.restore(f.router())
	if f.opts.Reached.Len() != 0 {
		t.Errorf("steps remembered after Restore: %d, want 0", f.opts.Reached.Len())
	}
}
