package reconciler

import (
	"context"
	"fmt"

	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/reconciler/stripped"
)

// namespacedIndexes is a cache whose field indexes are kept per namespace
// only. controller-runtime's IndexField files every namespaced object
// twice in each index, under its namespace and under a key for listing
// across all namespaces. Every field lookup rollgate makes is within one
// namespace (the Rollouts of a workload, a route, a Repository or a group;
// the objects a workload owns), so the second key is never read, and it
// is not small: a key whose value is one object's alone (an owner's UID, a
// workload's name) is a set of its own. At 2,000 Rollouts the indexes were
// a fifth of the live heap, half of it for those keys
// (docs/benchmarks.md, P2).
//
// A lookup across all namespaces by a field fails loudly here rather than
// finding nothing (TestFieldIndexesArePerNamespace).
type namespacedIndexes struct {
	cache.Cache
}

// newNamespacedIndexesCache is cache.New wrapped in namespacedIndexes.
func newNamespacedIndexesCache(cfg *rest.Config, o cache.Options) (cache.Cache, error) {
	c, err := cache.New(cfg, o)
	if err != nil {
		return nil, err
	}
	return namespacedIndexes{c}, nil
}

// newManagerCache is the manager's NewCache: a stripped.Cache, which keeps
// pods and ReplicaSets in types of rollgate's own, wrapped in
// namespacedIndexes.
func newManagerCache(cfg *rest.Config, o cache.Options) (cache.Cache, error) {
	c, err := stripped.NewCache(cfg, o)
	if err != nil {
		return nil, err
	}
	return namespacedIndexes{c}, nil
}

// IndexField registers field on obj's informer under the name and with the
// keys controller-runtime's cache reader looks up for a List in one
// namespace with client.MatchingFields: "field:<field>", and
// "<namespace>/<value>" for each value extract returns. An object without
// a namespace is filed as controller-runtime files it, under
// "__all_namespaces/<value>".
func (c namespacedIndexes) IndexField(ctx context.Context, obj client.Object, field string, extract client.IndexerFunc) error {
	inf, err := c.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
	if err != nil {
		return err
	}
	return inf.AddIndexers(toolscache.Indexers{"field:" + field: func(raw any) ([]string, error) {
		o, ok := raw.(client.Object)
		if !ok {
			return nil, fmt.Errorf("index %s: object of type %T is not an Object", field, raw)
		}
		ns := o.GetNamespace()
		if ns == "" {
			ns = "__all_namespaces"
		}
		vals := extract(o)
		keys := make([]string, len(vals))
		for i, v := range vals {
			keys[i] = ns + "/" + v
		}
		return keys, nil
	}})
}

// List is the cache's List, except that a list by field across all
// namespaces is an error: its keys are not kept (see namespacedIndexes).
func (c namespacedIndexes) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	var lo client.ListOptions
	lo.ApplyOptions(opts)
	if lo.FieldSelector != nil && !lo.FieldSelector.Empty() && lo.Namespace == "" {
		return fmt.Errorf("listing %T by %s across all namespaces: rollgate's cache indexes fields within one namespace; list with client.InNamespace", list, lo.FieldSelector)
	}
	return c.Cache.List(ctx, list, opts...)
}
