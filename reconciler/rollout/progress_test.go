package rollout

import (
	"context"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/luascripts"
	"github.com/rollgate/rollgate/reconciler/gitsource"
	"github.com/rollgate/rollgate/reconciler/internal/rollouttest"
	"github.com/rollgate/rollgate/reconciler/workload"
	"github.com/rollgate/rollgate/test/rig"
	"github.com/rollgate/rollgate/traffic"
)

// TestConfirmedTrafficReachesTheGateInOneReconcile: a step whose new pods
// are ready enters its traffic state, and when the routers confirm the
// step's traffic at once (an Ingress is done as soon as it is written)
// the same reconcile plans again and leaves the Rollout waiting at the
// step's gate, with the traffic in place. Without that second plan the
// gate waits for another reconcile, which in a wave of releases is
// another turn of the whole work queue.
func TestConfirmedTrafficReachesTheGateInOneReconcile(t *testing.T) {
	ctx, cfg, c, scheme := rollouttest.StartAPIServer(t)
	const ns, name = "replan", "web"
	rollouttest.MustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	// No pods to wait for: the Deployment has none, so step 1's upgrade
	// holds at once and the reconcile goes on to the traffic.
	d := rig.DeploymentObject(ns, name, 0, corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}}})
	labels := d.Spec.Selector.MatchLabels
	rollouttest.MustCreate(t, c, d)
	rollouttest.MustCreate(t, c, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 80}}},
	})
	rollouttest.MustCreate(t, c, &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{
			Host: "web.example",
			IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{Paths: []networkingv1.HTTPIngressPath{{
				Path: "/", PathType: ptr.To(networkingv1.PathTypePrefix),
				Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
					Name: name, Port: networkingv1.ServiceBackendPort{Number: 80},
				}},
			}}}},
		}}},
	})
	ro := rig.Rollout{Name: name, Namespace: ns, Strategy: `
      steps:
      - {traffic: "20%", replicas: 1, pause: {}}
      - {traffic: "100%", replicas: "100%"}
      trafficRoutings:
      - service: ` + name + `
        gracePeriodSeconds: 0
        ingress: {name: ` + name + `}`}.Object(t)
	rollouttest.MustCreate(t, c, ro)

	// The controller reads through a cache with its index of Rollouts by
	// workload, as in the manager.
	ca, err := cache.New(cfg, cache.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := workload.IndexRollouts(ctx, ca); err != nil {
		t.Fatal(err)
	}
	go func() { _ = ca.Start(ctx) }()
	cached, err := client.New(cfg, client.Options{Scheme: scheme, Cache: &client.CacheOptions{Reader: ca}})
	if err != nil {
		t.Fatal(err)
	}
	// A bare API server has no EndpointSlice controller: no canary
	// Service would ever list a ready endpoint.
	r := &Reconciler{Client: cached, APIReader: c, Routers: traffic.DefaultRegistry(), Scripts: luascripts.NewLibrary(),
		repos: gitsource.NewPool(c, gitsource.Options{}), Options: Options{NoEndpointSlices: true}}
	key := types.NamespacedName{Namespace: ns, Name: name}
	// inCache waits until the cache shows what the API server has.
	inCache := func(o client.Object) {
		t.Helper()
		live := o.DeepCopyObject().(client.Object)
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), live); err != nil {
			t.Fatal(err)
		}
		rollouttest.WaitFor(ctx, t, "the cache up to date", func() bool {
			seen := o.DeepCopyObject().(client.Object)
			return ca.Get(ctx, client.ObjectKeyFromObject(o), seen) == nil && seen.GetResourceVersion() == live.GetResourceVersion()
		})
	}
	for range 10 {
		inCache(ro)
		inCache(d)
		if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key}); err != nil {
			t.Logf("reconcile to Healthy: %v (retried)", err)
		}
		if err := c.Get(ctx, key, ro); err != nil {
			t.Fatal(err)
		}
		if ro.Status.Phase == v1alpha1.PhaseHealthy {
			break
		}
	}
	if ro.Status.Phase != v1alpha1.PhaseHealthy {
		t.Fatalf("not Healthy on app:1 after 10 reconciles: %s: %s", ro.Status.Phase, ro.Status.Message)
	}

	// A new image: one reconcile starts the release, brings step 1 up and
	// routes its traffic, and, the routers having confirmed it, waits at
	// the gate.
	if err := c.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
		t.Fatal(err)
	}
	d.Spec.Template.Spec.Containers[0].Image = "app:2"
	if err := c.Update(ctx, d); err != nil {
		t.Fatal(err)
	}
	inCache(ro)
	inCache(d)
	if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, key, ro); err != nil {
		t.Fatal(err)
	}
	st := ro.Status
	if st.CurrentStepIndex != 1 || st.CurrentStepState != v1alpha1.StepPaused || st.AwaitingApproval == nil {
		t.Fatalf("after the reconcile that saw app:2: step %d %s, awaiting approval %v (%s); want step 1 StepPaused at its gate",
			st.CurrentStepIndex, st.CurrentStepState, st.AwaitingApproval, st.Message)
	}
	canary := &networkingv1.Ingress{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: traffic.CanaryIngressName(name)}, canary); err != nil {
		t.Fatalf("the gate waits but the canary Ingress is not there: %v", err)
	}
	if w := canary.Annotations["nginx.ingress.kubernetes.io/canary-weight"]; w != "20" {
		t.Fatalf("the gate waits with canary weight %q on the canary Ingress, want 20", w)
	}

	// At the gate the workload is scaled: only a count changes
	// (status.replicas). Written within countsEvery of the gate's write
	// it would be one more write per pod event; it waits, and the
	// reconcile asks to look again when it is due, which writes it.
	if err := c.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
		t.Fatal(err)
	}
	d.Spec.Replicas = ptr.To[int32](2)
	if err := c.Update(ctx, d); err != nil {
		t.Fatal(err)
	}
	inCache(ro)
	inCache(d)
	res, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key})
	if err != nil {
		t.Fatal(err)
	}
	gated := ro.ResourceVersion
	if err := c.Get(ctx, key, ro); err != nil {
		t.Fatal(err)
	}
	if ro.ResourceVersion != gated {
		t.Fatalf("a change of status.replicas alone was written at once (replicas %d, %s)", ro.Status.Replicas, ro.Status.Message)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > countsEvery {
		t.Fatalf("counts held back, but the reconcile looks again in %v (want within %v)", res.RequeueAfter, countsEvery)
	}
	time.Sleep(res.RequeueAfter)
	if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, key, ro); err != nil {
		t.Fatal(err)
	}
	if ro.Status.Replicas != 2 || ro.Status.CurrentStepState != v1alpha1.StepPaused {
		t.Fatalf("when due: replicas %d at %s, want 2, still at the gate", ro.Status.Replicas, ro.Status.CurrentStepState)
	}

	// Approved, step 2's traffic is confirmed at once and the release
	// plans its end in the same reconcile: both plans are written before
	// their moves, and the routers' confirmation of the last one is left
	// to the next reconcile, which follows at once (planAgain) and writes
	// it with the next plan's status in one write.
	// (Back to no pods: this API server runs no controller to make them.)
	if err := c.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
		t.Fatal(err)
	}
	d.Spec.Replicas = ptr.To[int32](0)
	if err := c.Update(ctx, d); err != nil {
		t.Fatal(err)
	}
	ro.Spec.Approvals = []v1alpha1.Approval{{Revision: st.CanaryRevision, Step: 1}}
	if err := c.Update(ctx, ro); err != nil {
		t.Fatal(err)
	}
	inCache(ro)
	inCache(d)
	res, err = r.Reconcile(ctx, reconcile.Request{NamespacedName: key})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, key, ro); err != nil {
		t.Fatal(err)
	}
	shifted := func() *metav1.Condition { return conditions.Get(ro, v1alpha1.TrafficShiftedCondition) }
	if ro.Status.CurrentStepState != v1alpha1.StepCompleted || shifted().Reason != v1alpha1.ReasonTrafficPending {
		t.Fatalf("after the approval: %s, TrafficShifted %s (%s); want the end planned and written before its move, pending",
			ro.Status.CurrentStepState, shifted().Reason, ro.Status.Message)
	}
	if res.RequeueAfter <= 0 || res.RequeueAfter > cacheLagPoll {
		t.Fatalf("the status was left to the next reconcile, which comes in %v (want within %v)", res.RequeueAfter, cacheLagPoll)
	}
	inCache(ro)
	inCache(d)
	written, pending := ro.ResourceVersion, ro.Status.Message
	if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, key, ro); err != nil {
		t.Fatal(err)
	}
	if ro.ResourceVersion == written || ro.Status.Message == pending {
		t.Fatalf("the next reconcile wrote nothing new: %s", ro.Status.Message)
	}
}

// TestEventsOfReleasesInMotionGoFirst: events mapped to Rollouts enter the
// work queue at priorityInMotion for a release between two waits and at
// the normal priority otherwise (at rest, at a gate), so the queue serves
// the Rollouts whose release is in motion first whatever the order of
// the events; an event of an unchanged object (a resync) stays at
// controller-runtime's low priority.
func TestEventsOfReleasesInMotionGoFirst(t *testing.T) {
	ctx, _, c, _ := rollouttest.StartAPIServer(t)
	const ns = "motion"
	rollouttest.MustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	createWithStatus(ctx, t, c, ns, map[string]v1alpha1.RolloutStatus{
		"healthy":   {Phase: v1alpha1.PhaseHealthy},
		"upgrading": {Phase: v1alpha1.PhaseProgressing, CurrentStepIndex: 1, CurrentStepState: v1alpha1.StepUpgrade},
		"gated":     {Phase: v1alpha1.PhaseProgressing, CurrentStepIndex: 1, CurrentStepState: v1alpha1.StepPaused},
		"routing":   {Phase: v1alpha1.PhaseProgressing, CurrentStepIndex: 2, CurrentStepState: v1alpha1.StepTrafficRouting},
		"reverting": {Phase: v1alpha1.PhaseFailed, CurrentStepIndex: 1, CurrentStepState: v1alpha1.StepRollingBack},
	})
	r := &Reconciler{Client: c}
	// Each event names one Rollout: a pod named after it.
	h := r.eventsOf("Deployment", func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: o.GetName()}}}
	})
	pod := func(name, rv string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: rv}}
	}
	q := priorityqueue.New[reconcile.Request]("motion-test")
	defer q.ShutDown()
	// The events in the order a FIFO queue would serve them.
	for _, name := range []string{"healthy", "upgrading", "gated", "routing", "reverting"} {
		h.Update(ctx, event.UpdateEvent{ObjectOld: pod(name, "1"), ObjectNew: pod(name, "2")}, q)
	}
	h.Update(ctx, event.UpdateEvent{ObjectOld: pod("resynced", "7"), ObjectNew: pod("resynced", "7")}, q)

	want := []struct {
		name     string
		priority int
	}{
		{"upgrading", priorityInMotion}, {"routing", priorityInMotion}, {"reverting", priorityInMotion},
		{"healthy", priorityNormal}, {"gated", priorityNormal}, {"resynced", -100},
	}
	for i, w := range want {
		req, prio, _ := q.GetWithPriority()
		q.Done(req)
		if req.Name != w.name || prio != w.priority {
			t.Fatalf("item %d served: %s at priority %d, want %s at %d", i+1, req.Name, prio, w.name, w.priority)
		}
	}
}

// TestAReconcileWaitsForTheCacheToShowItsOwnWrite: a reconcile that reads
// a Rollout older than the controller's last write of it (the cache has
// not caught up) writes nothing and looks again shortly, instead of
// planning and acting from the older status; once the read shows the
// last write, reconciles go on.
func TestAReconcileWaitsForTheCacheToShowItsOwnWrite(t *testing.T) {
	ctx, _, c, _ := rollouttest.StartAPIServer(t)
	const ns, name = "own-writes", "api"
	rollouttest.MustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	rollouttest.MustCreate(t, c, rollouttest.GatedRollout(t, ns, name, nil)) // no Deployment: the release stalls, the status says so
	key := types.NamespacedName{Namespace: ns, Name: name}
	old := &v1alpha1.Rollout{}
	if err := c.Get(ctx, key, old); err != nil {
		t.Fatal(err)
	}
	// The first reconcile writes (the finalizer, the status).
	reads := &laggingRollouts{Client: c}
	r := &Reconciler{Client: reads, APIReader: c, Routers: traffic.DefaultRegistry(), Scripts: luascripts.NewLibrary(),
		repos: gitsource.NewPool(c, gitsource.Options{})}
	_, _ = r.Reconcile(ctx, reconcile.Request{NamespacedName: key})
	written := &v1alpha1.Rollout{}
	if err := c.Get(ctx, key, written); err != nil {
		t.Fatal(err)
	}
	if written.ResourceVersion == old.ResourceVersion {
		t.Fatal("the first reconcile wrote nothing")
	}

	// A cache behind that write: nothing is written, and it looks again soon.
	reads.serve(old)
	res, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key})
	if err != nil || res.RequeueAfter != cacheLagPoll {
		t.Fatalf("reconcile of the Rollout as it was before the last write = %+v, %v; want a look again after %v", res, err, cacheLagPoll)
	}
	now := &v1alpha1.Rollout{}
	if err := c.Get(ctx, key, now); err != nil {
		t.Fatal(err)
	}
	if now.ResourceVersion != written.ResourceVersion {
		t.Fatalf("a reconcile of the older Rollout wrote it (resource version %s, then %s)", written.ResourceVersion, now.ResourceVersion)
	}

	// The cache caught up: the reconcile goes on (to stop at the missing
	// workload).
	reads.serve(nil)
	if res, _ := r.Reconcile(ctx, reconcile.Request{NamespacedName: key}); res.RequeueAfter == cacheLagPoll {
		t.Fatalf("reconcile of the Rollout as last written = %+v; want it reconciled, not held for the cache", res)
	}
}

// laggingRollouts serves a fixed copy of a Rollout, as a cache that has
// not caught up would; everything else (and the Rollout, when none is
// set) comes from the API server.
type laggingRollouts struct {
	client.Client
	stale *v1alpha1.Rollout
}

func (l *laggingRollouts) serve(ro *v1alpha1.Rollout) { l.stale = ro }

func (l *laggingRollouts) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if ro, ok := obj.(*v1alpha1.Rollout); ok && l.stale != nil && key == client.ObjectKeyFromObject(l.stale) {
		l.stale.DeepCopyInto(ro)
		return nil
	}
	return l.Client.Get(ctx, key, obj, opts...)
}

// TestASpecChangeGoesBeforeReleasesInMotion: in a wave of releases, a
// Rollout at a gate whose spec changed (an approval written with rollgate
// approve, or rendered from Git by the GitOps tool) is served before the
// events of releases in motion: someone waits for it. Its own events at
// normal priority do not lower it.
func TestASpecChangeGoesBeforeReleasesInMotion(t *testing.T) {
	ctx, _, c, _ := rollouttest.StartAPIServer(t)
	const ns = "spec-first"
	rollouttest.MustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	createWithStatus(ctx, t, c, ns, map[string]v1alpha1.RolloutStatus{
		"upgrading": {Phase: v1alpha1.PhaseProgressing, CurrentStepIndex: 1, CurrentStepState: v1alpha1.StepUpgrade},
		"approved":  {Phase: v1alpha1.PhaseProgressing, CurrentStepIndex: 1, CurrentStepState: v1alpha1.StepPaused},
	})
	r := &Reconciler{Client: c}
	pods := r.eventsOf("Pod", func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: o.GetName()}}}
	})
	q := priorityqueue.New[reconcile.Request]("spec-test")
	defer q.ShutDown()
	pod := func(name, rv string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: rv}}
	}
	pods.Update(ctx, event.UpdateEvent{ObjectOld: pod("upgrading", "1"), ObjectNew: pod("upgrading", "2")}, q)
	old := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "approved", Generation: 1}}
	approved := old.DeepCopy()
	approved.Generation = 2
	approved.Spec.Approvals = []v1alpha1.Approval{{Revision: "abc", Step: 1}}
	r.specChanged().Update(ctx, event.UpdateEvent{ObjectOld: old, ObjectNew: approved}, q)
	pods.Update(ctx, event.UpdateEvent{ObjectOld: pod("approved", "1"), ObjectNew: pod("approved", "2")}, q)

	for i, w := range []struct {
		name     string
		priority int
	}{{"approved", priorityWoken}, {"upgrading", priorityInMotion}} {
		req, prio, _ := q.GetWithPriority()
		q.Done(req)
		if req.Name != w.name || prio != w.priority {
			t.Fatalf("item %d served: %s at priority %d, want %s at %d", i+1, req.Name, prio, w.name, w.priority)
		}
	}
}

// createWithStatus creates a gated Rollout per name in ns and gives it
// the status it maps to.
func createWithStatus(ctx context.Context, t *testing.T, c client.Client, ns string, statuses map[string]v1alpha1.RolloutStatus) {
	t.Helper()
	for name, st := range statuses {
		ro := rollouttest.GatedRollout(t, ns, name, nil)
		rollouttest.MustCreate(t, c, ro)
		ro.Status = st
		if err := c.Status().Update(ctx, ro); err != nil {
			t.Fatal(err)
		}
	}
}
