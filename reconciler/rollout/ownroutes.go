package rollout

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// routeWrites remembers the version of each routing object (Service,
// Ingress, HTTPRoute, a customNetworkRefs object) that rollgate's own last
// write of it produced, so that the watch event of that write wakes no
// Rollout: the reconcile that wrote it knows what it wrote, and what comes
// after it arrives as other events (the canary's EndpointSlices, a
// gateway's status, a requeue for a grace period or a wait). Any other
// version of the object (the GitOps tool applying it again, someone
// editing it, a gateway writing its status) wakes its Rollouts as before,
// so the routes are put back at once. At most one version per object: a
// write replaces the last one remembered, and the object's deletion
// forgets it. The zero value is ready to use.
type routeWrites struct {
	mu      sync.Mutex
	version map[types.UID]string
}

// wrote remembers obj's version after a write of rollgate's.
func (w *routeWrites) wrote(obj client.Object) {
	if obj.GetUID() == "" || obj.GetResourceVersion() == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.version == nil {
		w.version = map[types.UID]string{}
	}
	w.version[obj.GetUID()] = obj.GetResourceVersion()
}

// own reports whether obj is the version rollgate's last write of it
// produced, and forgets it: a version is seen once.
func (w *routeWrites) own(obj client.Object) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	v, ok := w.version[obj.GetUID()]
	if !ok || v != obj.GetResourceVersion() {
		return false
	}
	delete(w.version, obj.GetUID())
	return true
}

func (w *routeWrites) forget(obj client.Object) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.version, obj.GetUID())
}

// notOwn passes every event of a routing object but those of rollgate's
// own writes (routeWrites).
func (w *routeWrites) notOwn() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return !w.own(e.Object) },
		UpdateFunc: func(e event.UpdateEvent) bool { return !w.own(e.ObjectNew) },
		DeleteFunc: func(e event.DeleteEvent) bool { w.forget(e.Object); return true },
	}
}

// recordingClient is the client the routers write with: it remembers the
// version each successful create, update or patch produced.
type recordingClient struct {
	client.Client
	writes *routeWrites
}

func (c recordingClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	err := c.Client.Create(ctx, obj, opts...)
	if err == nil {
		c.writes.wrote(obj)
	}
	return err
}

func (c recordingClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	err := c.Client.Update(ctx, obj, opts...)
	if err == nil {
		c.writes.wrote(obj)
	}
	return err
}

func (c recordingClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	err := c.Client.Patch(ctx, obj, patch, opts...)
	if err == nil {
		c.writes.wrote(obj)
	}
	return err
}
