package workload_test

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollgate/rollgate/reconciler/workload"
)

func newDaemonSet(t *testing.T, ns, name string) *appsv1.DaemonSet {
	t.Helper()
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: podTemplate(name, name+":v1"),
		},
	}
	create(t, ds)
	waitDaemonSetComplete(t, ds)
	return ds
}

func waitDaemonSetComplete(t *testing.T, ds *appsv1.DaemonSet) {
	t.Helper()
	eventually(t, 60*time.Second, "DaemonSet "+ds.Name+" complete", func(ctx context.Context) (bool, error) {
		if err := suite.c.Get(ctx, key(ds.Namespace, ds.Name), ds); err != nil {
			return false, err
		}
		st := ds.Status
		return st.ObservedGeneration >= ds.Generation && st.DesiredNumberScheduled == 3 &&
			st.UpdatedNumberScheduled == 3 && st.NumberAvailable == 3, nil
	})
}

// Given a DaemonSet on 3 nodes, batches of 1 and 2 new pods replace old pods
// one at a time (OnDelete), and HandBack restores RollingUpdate so the
// DaemonSet controller updates the last one.
func TestDaemonSetBatches(t *testing.T) {
	ns := namespace(t)
	ds := newDaemonSet(t, ns, "agent")
	_, a := cover(t, ds, nil)
	setImage(t, ds, "agent:v2")
	if ds.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType {
		t.Fatalf("image bump not held: strategy %s", ds.Spec.UpdateStrategy.Type)
	}
	o := observe(t, a)
	rolloutID := "agent-" + o.CanaryRevision
	for i, want := range []int32{1, 2} {
		drive(t, "batch", a, 1, func(ctx context.Context) (bool, error) {
			return a.EnsureBatch(ctx, workload.Batch{CanaryReplicas: want, RolloutID: rolloutID, BatchID: int32(i + 1)})
		})
		o = observe(t, a)
		wantPods(t, "canary", o.Canary, want, want)
		wantPods(t, "stable", o.Stable, 3-want, 3-want)
	}
	if got := batchLabels(t, ns, "agent", o.CanaryRevision, rolloutID); got["1"] != 1 || got["2"] != 1 {
		t.Fatalf("canary pods by batch = %v, want 1 of batch 1 and 1 of batch 2", got)
	}
	drive(t, "finalize", a, 1, a.HandBack)
	if o = observe(t, a); o.Held || !o.Complete {
		t.Fatalf("after HandBack: %+v", o)
	}
	wantPods(t, "new revision", o.Stable, 3, 3)
	get(t, ds)
	if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType {
		t.Fatalf("declared strategy not restored: %s", ds.Spec.UpdateStrategy.Type)
	}
}

// Given a DaemonSet mid-release, Rollback puts the stable template back,
// replaces the new pods and releases the DaemonSet.
func TestDaemonSetRollback(t *testing.T) {
	ns := namespace(t)
	ds := newDaemonSet(t, ns, "logs")
	a, _ := firstBatch(t, ds, "logs:v2", 2)
	drive(t, "rollback", a, 1, a.Rollback)
	o := observe(t, a)
	if o.Held || !o.Complete {
		t.Fatalf("after Rollback: %+v", o)
	}
	wantPods(t, "stable", o.Stable, 3, 3)
	get(t, ds)
	if img := ds.Spec.Template.Spec.Containers[0].Image; img != "logs:v1" || ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType {
		t.Fatalf("after Rollback: image %s strategy %s, want logs:v1 and RollingUpdate", img, ds.Spec.UpdateStrategy.Type)
	}
}
