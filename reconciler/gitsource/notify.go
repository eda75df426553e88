package gitsource

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// notifier hands object keys from the Git writers and fetches to a
// controller's queue. notify never blocks its caller (a writer's flush, a
// reconcile) and never drops a key: keys wait in a set until the
// controller's source takes them, so a burst costs one reconcile per key.
type notifier struct {
	mu   sync.Mutex
	keys map[types.NamespacedName]struct{}
	wake chan struct{}
}

func newNotifier() *notifier {
	return &notifier{keys: map[types.NamespacedName]struct{}{}, wake: make(chan struct{}, 1)}
}

// notify asks for a reconcile of each key.
func (n *notifier) notify(keys ...types.NamespacedName) {
	if len(keys) == 0 {
		return
	}
	n.mu.Lock()
	for _, k := range keys {
		n.keys[k] = struct{}{}
	}
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default: // already woken: the keys are in the set
	}
}

// take empties the set.
func (n *notifier) take() map[types.NamespacedName]struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	keys := n.keys
	n.keys = map[types.NamespacedName]struct{}{}
	return keys
}

// source turns the notified keys into reconcile requests, which enter the
// queue at priority (controller-runtime's priority queue serves higher
// ones first).
func (n *notifier) source(priority int) source.Source {
	return source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-n.wake:
					add(q, n.take(), priority)
				}
			}
		}()
		return nil
	})
}

// add queues keys at priority where the queue has priorities.
func add(q workqueue.TypedRateLimitingInterface[reconcile.Request], keys map[types.NamespacedName]struct{}, priority int) {
	pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request])
	for k := range keys {
		req := reconcile.Request{NamespacedName: k}
		if ok {
			pq.AddWithOpts(priorityqueue.AddOpts{Priority: &priority}, req)
		} else {
			q.Add(req)
		}
	}
}
