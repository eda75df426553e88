package reconciler

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
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
	c, err := cache.New(cfg, o)
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

// forgetOnLeave drops a Rollout from this instance's Git writers when it
// leaves the cache: deleted, or relabelled into another shard (the API
// server ends a selector's watch of an object that stops matching with a
// delete). Its status file stays on the branch for the instance that
// releases it now; without this, the next flush here would write the
// last state this instance saw over that instance's.
func forgetOnLeave(ctx context.Context, c cache.Cache, g *repoPool) error {
	inf, err := c.GetInformer(ctx, &v1alpha1.Rollout{})
	if err != nil {
		return fmt.Errorf("Rollout informer: %w", err)
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
		if gone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = gone.Obj
		}
		if ro, ok := obj.(*v1alpha1.Rollout); ok {
			g.forgetRollout(ro.Namespace, ro.Name)
		}
	}})
	return err
}

// forgetRollout drops the Rollout from the writer (see
// gitsync.Writer.Forget) and the proposer of every open repository.
func (g *repoPool) forgetRollout(namespace, name string) {
	g.owned.Lock()
	defer g.owned.Unlock()
	g.mu.Lock()
	writers := make([]*gitsync.Writer, 0, len(g.entries))
	proposers := make([]*proposer, 0, len(g.entries))
	for _, e := range g.entries {
		if e.writer != nil {
			writers = append(writers, e.writer)
		}
		if e.proposer != nil {
			proposers = append(proposers, e.proposer)
		}
	}
	g.mu.Unlock()
	for _, w := range writers {
		w.Forget(namespace, name)
	}
	for _, p := range proposers {
		p.forget(types.NamespacedName{Namespace: namespace, Name: name})
	}
}

// queueProgress queues a Rollout's progress, whose status was just
// persisted, for e's status branch, unless the Rollout has left this
// instance's cache: relabelled to another shard while this reconcile ran,
// its file is the other shard's to write, and a state queued after
// forgetRollout would be written over the other shard's. The cache drops
// the Rollout before its delete handler (forgetRollout) runs, and both
// hold g.owned: either the read below misses it, or the Forget comes
// after the Enqueue.
func (g *repoPool) queueProgress(ctx context.Context, cache client.Reader, e *repoHandle, st gitsync.RolloutState) {
	if e == nil || e.writer == nil {
		return
	}
	g.owned.Lock()
	defer g.owned.Unlock()
	if err := cache.Get(ctx, client.ObjectKey{Namespace: st.Namespace, Name: st.Name}, &v1alpha1.Rollout{}); apierrors.IsNotFound(err) {
		return
	}
	e.writer.Enqueue(st)
}
