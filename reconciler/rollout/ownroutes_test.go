package rollout

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/rollgate/rollgate/reconciler/internal/rollouttest"
)

// TestOwnRouteWritesWakeNothing: the event of a version of a routing
// object that rollgate's routers wrote is filtered out, once; a version
// someone else wrote (the GitOps tool applying the object again) passes,
// so the route is put back at once. Against a real API server, with the
// versions it stored.
func TestOwnRouteWritesWakeNothing(t *testing.T) {
	ctx, _, c, _ := rollouttest.StartAPIServer(t)
	rollouttest.MustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "routes"}})
	var writes routeWrites
	own := recordingClient{Client: c, writes: &writes}
	pred := writes.notOwn()
	stored := func(svc *corev1.Service) *corev1.Service {
		t.Helper()
		got := &corev1.Service{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(svc), got); err != nil {
			t.Fatal(err)
		}
		return got
	}

	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "routes", Name: "web-canary"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80}}}}
	if err := own.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	created := stored(svc)
	if pred.Create(event.CreateEvent{Object: created}) {
		t.Error("the create event of rollgate's own Service passed")
	}

	// Someone else changes it: that version wakes its Rollouts.
	theirs := created.DeepCopy()
	theirs.Spec.Selector["tier"] = "front"
	if err := c.Update(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	if !pred.Update(event.UpdateEvent{ObjectOld: created, ObjectNew: stored(svc)}) {
		t.Error("an update by someone else was filtered out")
	}

	// rollgate patches it back: filtered once; the same version seen
	// again (an informer's re-list) passes.
	before := stored(svc)
	mine := before.DeepCopy()
	delete(mine.Spec.Selector, "tier")
	if err := own.Patch(ctx, mine, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	after := stored(svc)
	if pred.Update(event.UpdateEvent{ObjectOld: before, ObjectNew: after}) {
		t.Error("the update event of rollgate's own patch passed")
	}
	if !pred.Update(event.UpdateEvent{ObjectOld: before, ObjectNew: after}) {
		t.Error("the same version a second time was filtered out: a version must be consumed once")
	}

	// Deleted: forgotten, and the deletion passes.
	if err := own.Update(ctx, after); err != nil {
		t.Fatal(err)
	}
	if !pred.Delete(event.DeleteEvent{Object: stored(svc)}) {
		t.Error("a deletion was filtered out")
	}
	if len(writes.version) != 0 {
		t.Errorf("%d versions remembered after the deletion, want 0", len(writes.version))
	}
}
