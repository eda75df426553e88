package reconciler

import (
	"context"
	"fmt"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/workload"
)

// admissionCache is the cache the admission webhooks of a shard read
// Rollouts from. Its GetCache puts it in the manager's group of caches:
// started, and synced, before the controllers and on every replica, leader
// or not, as the webhook server is.
type admissionCache struct{ cache.Cache }

func (c admissionCache) GetCache() cache.Cache { return c.Cache }

// newAdmissionView returns the reader of every Rollout of the cluster for
// the admission webhooks of a shard, whose own cache holds only its
// shard's Rollouts. A webhook decision depends on the Rollout that names
// the workload (or route, or the same workload twice), whichever shard
// releases it: an instance that did not see that Rollout would let a held
// workload go. So every instance answers every admission request from the
// whole set of Rollouts, and only Rollouts are cached twice (workloads,
// pods and routes are in the manager's cache once).
func newAdmissionView(cfg *rest.Config, mgr ctrl.Manager, scope watchScope) (client.Reader, error) {
	// Only Rollouts: a read of any other kind fails instead of quietly
	// caching that kind for the whole cluster.
	o := cache.Options{
		Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(), HTTPClient: mgr.GetHTTPClient(),
		ReaderFailOnMissingInformer: true, DefaultTransform: cache.TransformStripManagedFields(),
	}
	if scope.namespace != "" {
		o.DefaultNamespaces = map[string]cache.Config{scope.namespace: {}}
	}
	c, err := newNamespacedIndexesCache(cfg, o)
	if err != nil {
		return nil, fmt.Errorf("admission cache of Rollouts: %w", err)
	}
	if err := workload.IndexRollouts(context.Background(), c); err != nil {
		return nil, fmt.Errorf("admission cache of Rollouts: %w", err)
	}
	if err := mgr.Add(admissionCache{c}); err != nil {
		return nil, err
	}
	return c, nil
}

// rolloutsAndConfig reads Rollouts from rollouts and everything else (the
// Lua ConfigMap) through Reader, for the route webhook.
type rolloutsAndConfig struct {
	client.Reader
	rollouts client.Reader
}

func (r rolloutsAndConfig) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*v1alpha1.Rollout); ok {
		return r.rollouts.Get(ctx, key, obj, opts...)
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}

func (r rolloutsAndConfig) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*v1alpha1.RolloutList); ok {
		return r.rollouts.List(ctx, list, opts...)
	}
	return r.Reader.List(ctx, list, opts...)
}
