package stripped

import (
	"context"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Cache is a controller-runtime cache that keeps pods, ReplicaSets and
// Deployments as Pod, ReplicaSet and Deployment, in a cache of their own,
// and every other kind as the cache it wraps does. It reads and hands out
// corev1.Pods, appsv1.ReplicaSets and appsv1.Deployments (Get, List, the
// informers' event handlers), made at each read from what it keeps, so
// that its callers see the objects workload.StripPod,
// workload.StripReplicaSet and workload.StripDeployment make, at a quarter
// of their size in memory.
type Cache struct {
	cache.Cache
	// kept holds the pods, ReplicaSets and Deployments.
	kept cache.Cache
}

// NewCache builds a Cache with the options o: the kept kinds are
// listed and watched with o's namespaces, selectors and sync period; o's
// ByObject and transforms apply to the other kinds only.
func NewCache(cfg *rest.Config, o cache.Options) (*Cache, error) {
	for obj := range o.ByObject {
		if kept(obj) != nil {
			return nil, fmt.Errorf("cache options for %T: the stripped cache keeps pods, ReplicaSets and Deployments in types of its own; set nothing for them", obj)
		}
	}
	rest, err := cache.New(cfg, o)
	if err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	if err := addToScheme(scheme); err != nil {
		return nil, err
	}
	ko := o
	ko.Scheme = scheme
	ko.DefaultTransform = nil
	ko.ByObject = map[client.Object]cache.ByObject{&Pod{}: {Transform: dropAnnotations}}
	k, err := cache.New(cfg, ko)
	if err != nil {
		return nil, fmt.Errorf("cache of stripped pods, ReplicaSets and Deployments: %w", err)
	}
	return &Cache{Cache: rest, kept: k}, nil
}

// dropAnnotations is the transform of the kept pods: rollgate reads no
// pod's annotations (workload.StripPod). Pod keeps them until here only
// because the informer reads the bookmark that ends a streamed list by an
// annotation.
func dropAnnotations(obj any) (any, error) {
	if p, ok := obj.(*Pod); ok {
		p.Annotations = nil
	}
	return obj, nil
}

// kept is the type the cache keeps obj's kind in: a new Pod or
// ReplicaSet or Deployment, or nil for every other kind.
func kept(obj runtime.Object) client.Object {
	switch obj.(type) {
	case *corev1.Pod, *Pod:
		return &Pod{}
	case *appsv1.ReplicaSet, *ReplicaSet:
		return &ReplicaSet{}
	case *appsv1.Deployment, *Deployment:
		return &Deployment{}
	}
	return nil
}

// full is the object callers see of one the cache keeps; other objects
// (a DeletedFinalStateUnknown's key, say) pass as they are.
func full(obj any) any {
	switch o := obj.(type) {
	case *Pod:
		return o.Pod()
	case *ReplicaSet:
		return o.ReplicaSet()
	case *Deployment:
		return o.Deployment()
	}
	return obj
}

func (c *Cache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	switch o := obj.(type) {
	case *corev1.Pod:
		var p Pod
		if err := c.kept.Get(ctx, key, &p, opts...); err != nil {
			return err
		}
		*o = *p.Pod()
		return nil
	case *appsv1.ReplicaSet:
		var rs ReplicaSet
		if err := c.kept.Get(ctx, key, &rs, opts...); err != nil {
			return err
		}
		*o = *rs.ReplicaSet()
		return nil
	case *appsv1.Deployment:
		var d Deployment
		if err := c.kept.Get(ctx, key, &d, opts...); err != nil {
			return err
		}
		d.into(o)
		return nil
	case *Pod, *ReplicaSet, *Deployment:
		return c.kept.Get(ctx, key, obj, opts...)
	}
	return c.Cache.Get(ctx, key, obj, opts...)
}

func (c *Cache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	switch l := list.(type) {
	case *corev1.PodList:
		var kl PodList
		if err := c.kept.List(ctx, &kl, opts...); err != nil {
			return err
		}
		l.ListMeta, l.Items = kl.ListMeta, convert(kl.Items, (*Pod).into)
		return nil
	case *appsv1.ReplicaSetList:
		var kl ReplicaSetList
		if err := c.kept.List(ctx, &kl, opts...); err != nil {
			return err
		}
		l.ListMeta, l.Items = kl.ListMeta, convert(kl.Items, (*ReplicaSet).into)
		return nil
	case *appsv1.DeploymentList:
		var kl DeploymentList
		if err := c.kept.List(ctx, &kl, opts...); err != nil {
			return err
		}
		l.ListMeta, l.Items = kl.ListMeta, convert(kl.Items, (*Deployment).into)
		return nil
	case *PodList, *ReplicaSetList, *DeploymentList:
		return c.kept.List(ctx, list, opts...)
	}
	return c.Cache.List(ctx, list, opts...)
}

// convert makes the objects callers see of the kept ones.
func convert[K, O any](kept []K, into func(*K, *O)) []O {
	out := make([]O, len(kept))
	for i := range kept {
		into(&kept[i], &out[i])
	}
	return out
}

func (c *Cache) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	k := kept(obj)
	if k == nil {
		return c.Cache.GetInformer(ctx, obj, opts...)
	}
	inf, err := c.kept.GetInformer(ctx, k, opts...)
	if err != nil {
		return nil, err
	}
	return informer{inf}, nil
}

func (c *Cache) GetInformerForKind(ctx context.Context, gvk schema.GroupVersionKind, opts ...cache.InformerGetOption) (cache.Informer, error) {
	switch gvk {
	case corev1.SchemeGroupVersion.WithKind("Pod"), appsv1.SchemeGroupVersion.WithKind("ReplicaSet"),
		appsv1.SchemeGroupVersion.WithKind("Deployment"):
		inf, err := c.kept.GetInformerForKind(ctx, gvk, opts...)
		if err != nil {
			return nil, err
		}
		return informer{inf}, nil
	}
	return c.Cache.GetInformerForKind(ctx, gvk, opts...)
}

func (c *Cache) RemoveInformer(ctx context.Context, obj client.Object) error {
	if k := kept(obj); k != nil {
		return c.kept.RemoveInformer(ctx, k)
	}
	return c.Cache.RemoveInformer(ctx, obj)
}

// IndexField indexes the kept kinds by extract, which sees them as Pod,
// ReplicaSet and Deployment: their metadata is the objects'.
func (c *Cache) IndexField(ctx context.Context, obj client.Object, field string, extract client.IndexerFunc) error {
	if k := kept(obj); k != nil {
		return c.kept.IndexField(ctx, k, field, extract)
	}
	return c.Cache.IndexField(ctx, obj, field, extract)
}

// Start runs both caches until ctx ends.
func (c *Cache) Start(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- c.kept.Start(ctx) }()
	err := c.Cache.Start(ctx)
	return errors.Join(err, <-done)
}

func (c *Cache) WaitForCacheSync(ctx context.Context) bool {
	return c.kept.WaitForCacheSync(ctx) && c.Cache.WaitForCacheSync(ctx)
}

// informer is an informer of kept objects whose event handlers see them
// as corev1.Pods, appsv1.ReplicaSets and appsv1.Deployments. Its indexers
// see the kept objects.
type informer struct {
	cache.Informer
}

func (i informer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.Informer.AddEventHandler(handler{h})
}

func (i informer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, resync time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.Informer.AddEventHandlerWithResyncPeriod(handler{h}, resync)
}

func (i informer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, o toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.Informer.AddEventHandlerWithOptions(handler{h}, o)
}

// handler hands its handler the full objects of kept ones.
type handler struct {
	h toolscache.ResourceEventHandler
}

func (h handler) OnAdd(obj any, initial bool) { h.h.OnAdd(full(obj), initial) }

func (h handler) OnUpdate(old, cur any) { h.h.OnUpdate(full(old), full(cur)) }

func (h handler) OnDelete(obj any) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		d.Obj = full(d.Obj)
		h.h.OnDelete(d)
		return
	}
	h.h.OnDelete(full(obj))
}
