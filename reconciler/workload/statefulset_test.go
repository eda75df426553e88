package workload_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/workload"
)

func newStatefulSet(t *testing.T, ns, name string, replicas int32) *appsv1.StatefulSet {
	t.Helper()
	s := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(replicas),
			ServiceName:         name,
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template:            podTemplate(name, name+":v1"),
		},
	}
	create(t, s)
	waitStatefulSetComplete(t, s)
	return s
}

func waitStatefulSetComplete(t *testing.T, s *appsv1.StatefulSet) {
	t.Helper()
	eventually(t, 60*time.Second, "StatefulSet "+s.Name+" complete", func(ctx context.Context) (bool, error) {
		if err := suite.c.Get(ctx, key(s.Namespace, s.Name), s); err != nil {
			return false, err
		}
		r, st := *s.Spec.Replicas, s.Status
		return st.ObservedGeneration >= s.Generation && st.UpdateRevision == st.CurrentRevision &&
			st.UpdatedReplicas == r && st.AvailableReplicas == r, nil
	})
}

// canaryOrdinals returns the pod names of the canary revision.
func canaryOrdinals(t *testing.T, ns, app, rev string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, p := range pods(t, ns, app) {
		if p.Labels[v1alpha1.LabelRevision] == rev {
			out[p.Name] = true
		}
	}
	return out
}

// Given a StatefulSet of 4 pods, batches of 1 and 3 new pods move the native
// partition (the highest ordinals update first), and HandBack restores the
// declared partition so the StatefulSet controller finishes.
func TestStatefulSetPartition(t *testing.T) {
	ns := namespace(t)
	s := newStatefulSet(t, ns, "db", 4)
	_, a := cover(t, s, nil)
	setImage(t, s, "db:v2")
	o := observe(t, a)
	if !o.Held || o.MaxUnavailable != 1 {
		t.Fatalf("after the bump: %+v", o)
	}
	rolloutID := "db-" + o.CanaryRevision

	for i, want := range []int32{1, 3} {
		drive(t, fmt.Sprintf("batch %d (%d pods)", i+1, want), a, 1, func(ctx context.Context) (bool, error) {
			return a.EnsureBatch(ctx, workload.Batch{CanaryReplicas: want, RolloutID: rolloutID, BatchID: int32(i + 1)})
		})
		o = observe(t, a)
		wantPods(t, "canary", o.Canary, want, want)
		wantPods(t, "stable", o.Stable, 4-want, 4-want)
		got := canaryOrdinals(t, ns, "db", o.CanaryRevision)
		for ord := 4 - want; ord < 4; ord++ {
			if !got[fmt.Sprintf("db-%d", ord)] {
				t.Fatalf("canary pods = %v, want ordinals %d..3", got, 4-want)
			}
		}
	}
	if got := batchLabels(t, ns, "db", o.CanaryRevision, rolloutID); got["1"] != 1 || got["2"] != 2 {
		t.Fatalf("canary pods by batch = %v, want 1 of batch 1 and 2 of batch 2", got)
	}

	drive(t, "finalize", a, 1, a.HandBack)
	o = observe(t, a)
	if o.Held || !o.Complete {
		t.Fatalf("after HandBack: %+v", o)
	}
	wantPods(t, "new revision", o.Stable, 4, 4)
	get(t, s)
	if ru := s.Spec.UpdateStrategy.RollingUpdate; ru == nil || ptr.Deref(ru.Partition, 0) != 0 {
		t.Fatalf("declared partition not restored: %+v", s.Spec.UpdateStrategy)
	}
}

// Given a StatefulSet mid-release, Rollback deletes the canary pods, which
// come back at the stable revision; after the revert in Git it is released.
func TestStatefulSetRollback(t *testing.T) {
	ns := namespace(t)
	s := newStatefulSet(t, ns, "cache", 3)
	_, a := cover(t, s, nil)
	setImage(t, s, "cache:v2")
	o := observe(t, a)
	drive(t, "batch 1 (2 pods)", a, 1, func(ctx context.Context) (bool, error) {
		return a.EnsureBatch(ctx, workload.Batch{CanaryReplicas: 2, RolloutID: "cache-" + o.CanaryRevision, BatchID: 1})
	})
	drive(t, "rollback while the template is new", a, 1, a.Rollback)
	o = observe(t, a)
	if !o.Held {
		t.Fatalf("after Rollback with the new template: %+v, want still held", o)
	}
	wantPods(t, "canary", o.Canary, 0, 0)
	wantPods(t, "stable", o.Stable, 3, 3)

	setImage(t, s, "cache:v1")
	drive(t, "rollback after the revert", a, 1, a.Rollback)
	if o = observe(t, a); o.Held || !o.Complete {
		t.Fatalf("after the revert and Rollback: %+v", o)
	}
	wantPods(t, "stable", o.Stable, 3, 3)
}

// Given a StatefulSet or a DaemonSet mid-release, the Services of the
// release are told to select the revisions by controller-revision-hash,
// which the native controller gives every pod at its creation (the
// StatefulSet's current and update revisions): no stable pod is patched
// for a label; the canary pods get their revision, rollout id and batch id.
func TestNativeKindsNarrowByControllerRevisionHash(t *testing.T) {
	ns := namespace(t)
	for _, obj := range []client.Object{newStatefulSet(t, ns, "crh-sts", 3), newDaemonSet(t, ns, "crh-ds")} {
		t.Run(obj.GetName(), func(t *testing.T) {
			a, rolloutID := firstBatch(t, obj, obj.GetName()+":v2", 1)
			o := observe(t, a)
			stable, canary := o.LabelValue(o.StableRevision), o.LabelValue(o.CanaryRevision)
			if o.RevisionLabel != appsv1.ControllerRevisionHashLabelKey || stable == "" || canary == "" || stable == canary {
				t.Fatalf("revision label %q, stable %s -> %q, canary %s -> %q; want controller-revision-hash and two values",
					o.RevisionLabel, o.StableRevision, stable, o.CanaryRevision, canary)
			}
			if s, ok := obj.(*appsv1.StatefulSet); ok {
				get(t, s)
				if stable != s.Status.CurrentRevision || canary != s.Status.UpdateRevision {
					t.Fatalf("stable -> %q, canary -> %q; want the StatefulSet's current and update revisions %q and %q",
						stable, canary, s.Status.CurrentRevision, s.Status.UpdateRevision)
				}
			}
			onlyCanaryLabelled(t, ns, obj.GetName(), appsv1.ControllerRevisionHashLabelKey, stable, canary, o, rolloutID)
		})
	}
}
