package workload_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/workload"
)

// TestStrippedPodsObserveTheSame: with the controller's cache transforms
// (no managedFields, pods cut down by StripPod), each adapter observes a
// workload exactly as it does reading the API server, at rest and with a
// release held by the webhook: the same revisions, pods counted by
// revision and readiness, terminating pods, control annotation. And the
// cached pods did lose their spec.
func TestStrippedPodsObserveTheSame(t *testing.T) {
	ns := namespace(t)
	d := newDeployment(t, ns, "web", 4)
	s := newStatefulSet(t, ns, "db", 3)
	ds := newDaemonSet(t, ns, "logs")
	for _, obj := range []client.Object{d, s, ds} {
		ro, live := cover(t, obj, func(ro *v1alpha1.Rollout) {})
		stripped, err := workload.For(suite.stripped, ro, nil, workload.OwnerIndexed())
		if err != nil {
			t.Fatal(err)
		}
		same(t, obj.GetName()+" at rest", live, stripped)
		setImage(t, obj, obj.GetName()+":v2")
		same(t, obj.GetName()+" held", live, stripped)
	}
	o := observe(t, mustFor(t, d))
	drive(t, "batch 1 (1 pod)", mustFor(t, d), 1, func(ctx context.Context) (bool, error) {
		return mustFor(t, d).EnsureBatch(ctx, workload.Batch{CanaryReplicas: 1, RolloutID: "web-" + o.CanaryRevision, BatchID: 1})
	})
	live := mustFor(t, d)
	stripped, err := workload.For(suite.stripped, rolloutOf(t, d), nil, workload.OwnerIndexed())
	if err != nil {
		t.Fatal(err)
	}
	same(t, "web with batch 1 out", live, stripped)

	var cached corev1.PodList
	if err := suite.stripped.List(context.Background(), &cached, client.InNamespace(ns), client.MatchingLabels{"app": "web"}); err != nil {
		t.Fatal(err)
	}
	if len(cached.Items) == 0 {
		t.Fatal("no cached pod of web")
	}
	for _, p := range cached.Items {
		if len(p.Spec.Containers) != 0 || len(p.ManagedFields) != 0 || len(p.Status.ContainerStatuses) != 0 {
			t.Errorf("cached pod %s keeps %d containers, %d managedFields entries, %d container statuses: not stripped", p.Name, len(p.Spec.Containers), len(p.ManagedFields), len(p.Status.ContainerStatuses))
		}
		if len(p.OwnerReferences) == 0 || len(p.Status.Conditions) == 0 {
			t.Errorf("cached pod %s lost its owner or its conditions", p.Name)
		}
	}
}

// same waits until the adapter reading through the stripped cache
// observes what the one reading the API server does (the cache lags a
// little), and fails with both observations if it never does.
func same(t *testing.T, what string, live, stripped workload.Adapter) {
	t.Helper()
	var want, got workload.Observation
	deadline := time.Now().Add(15 * time.Second)
	for {
		var err error
		if want, err = live.Observe(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got, err = stripped.Observe(context.Background()); err != nil {
			t.Fatal(err)
		}
		if reflect.DeepEqual(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: observation through the stripped cache differs\n got: %s\nwant: %s", what, fmt.Sprintf("%+v", got), fmt.Sprintf("%+v", want))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func rolloutOf(t *testing.T, obj client.Object) *v1alpha1.Rollout {
	t.Helper()
	ro := &v1alpha1.Rollout{}
	if err := suite.c.Get(context.Background(), client.ObjectKeyFromObject(obj), ro); err != nil {
		t.Fatal(err)
	}
	return ro
}

func mustFor(t *testing.T, obj client.Object) workload.Adapter {
	t.Helper()
	a, err := workload.For(suite.c, rolloutOf(t, obj), nil)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
