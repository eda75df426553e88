package workload_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

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
