package workload_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/workload"
)

// sameObservation waits until an adapter reading through the owner index
// of an informer cache observes what the same adapter reading the API
// server by label selector observes (the cache may lag a moment), and
// returns that observation.
func sameObservation(t *testing.T, ro *v1alpha1.Rollout) workload.Observation {
	t.Helper()
	at := time.Now()
	clock := func() time.Time { return at }
	direct, err := workload.For(suite.c, ro, clock)
	if err != nil {
		t.Fatal(err)
	}
	indexed, err := workload.For(suite.cached, ro, clock, workload.OwnerIndexed())
	if err != nil {
		t.Fatal(err)
	}
	var want, got workload.Observation
	eventually(t, 30*time.Second, "indexed observation of "+ro.Name+" equals the direct one", func(ctx context.Context) (bool, error) {
		if want, err = direct.Observe(ctx); err != nil {
			return false, err
		}
		if got, err = indexed.Observe(ctx); err != nil {
			return false, err
		}
		if !reflect.DeepEqual(want, got) {
			t.Logf("direct %+v\nindexed %+v", want, got)
			return false, nil
		}
		return true, nil
	})
	return got
}

// Given two Deployments in one namespace whose selectors overlap (every
// pod of "shop-b" also matches the selector of "shop"), a release of
// "shop" observed through the owner index counts exactly its own pods —
// the same observation as listing the namespace by label selector without
// an index — for the stable and the canary revision.
func TestObserveThroughOwnerIndex(t *testing.T) {
	ns := namespace(t)
	d := newDeployment(t, ns, "shop", 3)
	other := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "shop-b", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(2)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "shop", "tier": "b"}},
			Template: podTemplate("shop", "shop:b"),
		},
	}
	other.Spec.Template.Labels["tier"] = "b"
	create(t, other)
	waitDeploymentComplete(t, other)
	ro, a := cover(t, d, nil)

	o := sameObservation(t, ro)
	wantPods(t, "stable before the release", o.Stable, 3, 3)
	wantPods(t, "other before the release", o.Other, 0, 0)

	setImage(t, d, "shop:v2")
	drive(t, "batch 1 (1 pod)", a, 1, func(ctx context.Context) (bool, error) {
		return a.EnsureBatch(ctx, workload.Batch{CanaryReplicas: 1, RolloutID: "shop-1", BatchID: 1})
	})
	o = sameObservation(t, ro)
	wantPods(t, "canary", o.Canary, 1, 1)
	wantPods(t, "stable", o.Stable, 2, 2)
	wantPods(t, "other", o.Other, 0, 0)
}

// Given a StatefulSet, whose revisions are ControllerRevisions, the
// observation through the owner index equals the direct one.
func TestObserveStatefulSetThroughOwnerIndex(t *testing.T) {
	ns := namespace(t)
	s := newStatefulSet(t, ns, "queue", 2)
	ro, _ := cover(t, s, nil)
	setImage(t, s, "queue:v2")
	o := sameObservation(t, ro)
	if !o.Held || o.CanaryRevision == "" || o.CanaryRevision == o.StableRevision {
		t.Fatalf("held release not observed: %+v", o)
	}
	wantPods(t, "stable", o.Stable, 2, 2)
}

// An adapter told to use the owner index fails with a clear error on a
// client that does not serve it, instead of silently observing no pods.
func TestOwnerIndexedNeedsTheIndex(t *testing.T) {
	ns := namespace(t)
	d := newDeployment(t, ns, "plain", 1)
	ro := &v1alpha1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: ns},
		Spec:       v1alpha1.RolloutSpec{WorkloadRef: v1alpha1.WorkloadRef{APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name}},
	}
	a, err := workload.For(suite.c, ro, nil, workload.OwnerIndexed())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Observe(context.Background()); err == nil {
		t.Fatal("Observe through an uncached client with OwnerIndexed: no error")
	}
}

// Given releases of a Deployment in the partition style and in the canary
// style driven by adapters that read through the owner index (which hands
// out the informer cache's objects without copying them), no write an
// adapter makes — labelling pods, scaling ReplicaSets, scaling the canary
// Deployment — and no read changes what the cache holds.
func TestIndexedWritesLeaveTheCacheAlone(t *testing.T) {
	ns := namespace(t)
	for _, canaryStyle := range []bool{false, true} {
		name := map[bool]string{false: "part", true: "extra"}[canaryStyle]
		d := newDeployment(t, ns, name, 4)
		ro, _ := cover(t, d, func(ro *v1alpha1.Rollout) {
			ro.Spec.Strategy.Canary.EnableExtraWorkloadForCanary = canaryStyle
		})
		setImage(t, d, name+":v2")
		a, err := workload.For(suite.cached, ro, nil, workload.OwnerIndexed())
		if err != nil {
			t.Fatal(err)
		}
		// The cache may not have seen the held image change yet.
		var rev string
		eventually(t, 15*time.Second, name+": the cached adapter sees the release", func(ctx context.Context) (bool, error) {
			o, err := a.Observe(ctx)
			rev = o.CanaryRevision
			return err == nil && o.Held && rev != "", err
		})
		rolloutID := name + "-" + rev
		for _, n := range []int32{1, 3} {
			what := fmt.Sprintf("%s: batch of %d", name, n)
			drive(t, what, a, 1, func(ctx context.Context) (bool, error) {
				before := cacheShares(t, ns)
				done, err := a.EnsureBatch(ctx, workload.Batch{CanaryReplicas: n, RolloutID: rolloutID, BatchID: n})
				cacheUnchanged(t, what, before)
				return done, err
			})
		}
		drive(t, name+": finalize", a, 1, func(ctx context.Context) (bool, error) {
			before := cacheShares(t, ns)
			done, err := a.HandBack(ctx)
			cacheUnchanged(t, name+": finalize", before)
			return done, err
		})
	}
}

// shared is an item of a list read from the informer cache without
// copying: a shallow copy of the cache's object, whose maps, slices and
// pointers are the cache's own, and a deep copy taken at the same time.
type shared struct {
	obj, copy client.Object
}

// cacheShares reads the pods, ReplicaSets and Deployments of ns from the
// informer cache without copying them.
func cacheShares(t *testing.T, ns string) []shared {
	t.Helper()
	ctx := context.Background()
	var out []shared
	var pods corev1.PodList
	var rss appsv1.ReplicaSetList
	var ds appsv1.DeploymentList
	for _, l := range []client.ObjectList{&pods, &rss, &ds} {
		if err := suite.cached.List(ctx, l, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
			t.Fatal(err)
		}
	}
	for i := range pods.Items {
		out = append(out, shared{&pods.Items[i], pods.Items[i].DeepCopy()})
	}
	for i := range rss.Items {
		out = append(out, shared{&rss.Items[i], rss.Items[i].DeepCopy()})
	}
	for i := range ds.Items {
		out = append(out, shared{&ds.Items[i], ds.Items[i].DeepCopy()})
	}
	return out
}

// cacheUnchanged fails the test when an object cacheShares read has
// changed since: an informer replaces the objects it stores and never
// changes one, so a change is a write that decoded into the cache.
func cacheUnchanged(t *testing.T, what string, before []shared) {
	t.Helper()
	for _, s := range before {
		if !reflect.DeepEqual(s.obj, s.copy) {
			t.Fatalf("%s changed the cache's %T %s:\nnow  %+v\nwas  %+v", what, s.obj, s.obj.GetName(), s.obj, s.copy)
		}
	}
}
