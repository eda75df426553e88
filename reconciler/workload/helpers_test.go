package workload_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/webhook/webhooktest"
	"github.com/rollgate/rollgate/reconciler/workload"
	"github.com/rollgate/rollgate/test/rig"
)

func namespace(t *testing.T) string { return rig.NewNamespace(t, suite.c) }

func podTemplate(app, image string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		// An annotation on every pod, as a scraper or a mesh puts there:
		// the stripped cache drops it (TestStrippedPodsObserveTheSame).
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}, Annotations: map[string]string{"prometheus.io/scrape": "true"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: app, Image: image}}},
	}
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := suite.c.Create(context.Background(), obj); err != nil {
		t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

func get(t *testing.T, obj client.Object) {
	t.Helper()
	if err := suite.c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
}

// eventually polls cond until it holds; it fails the test with what after
// timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	start := time.Now()
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, cond)
	if err != nil {
		t.Fatalf("%s: not after %v: %v", what, timeout, err)
	}
	t.Logf("%s after %v", what, time.Since(start).Round(100*time.Millisecond))
}

// cover creates the Rollout of a workload, labels the workload through the
// adapter and waits until the webhook holds its template changes.
func cover(t *testing.T, obj client.Object, mutate func(*v1alpha1.Rollout)) (*v1alpha1.Rollout, workload.Adapter) {
	t.Helper()
	kind := map[string]string{"*v1.Deployment": "Deployment", "*v1.StatefulSet": "StatefulSet", "*v1.DaemonSet": "DaemonSet"}[fmt.Sprintf("%T", obj)]
	ro := &v1alpha1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Name: obj.GetName(), Namespace: obj.GetNamespace()},
		Spec: v1alpha1.RolloutSpec{
			WorkloadRef: v1alpha1.WorkloadRef{APIVersion: "apps/v1", Kind: kind, Name: obj.GetName()},
			Strategy: v1alpha1.RolloutStrategy{Canary: &v1alpha1.CanaryStrategy{
				Steps: []v1alpha1.CanaryStep{{Replicas: ptr.To(intstr.FromInt32(1))}},
			}},
		},
	}
	if mutate != nil {
		mutate(ro)
	}
	create(t, ro)
	a, err := workload.For(suite.c, ro, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Cover(context.Background()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "webhook sees the Rollout", func(ctx context.Context) (bool, error) {
		return webhooktest.Held(ctx, suite.c, obj)
	})
	return ro, a
}

// setImage changes the image of the workload's first container, as a
// GitOps tool applying a new commit would.
func setImage(t *testing.T, obj client.Object, image string) {
	t.Helper()
	writeAs(t, obj, "", func() error {
		tpl, err := workload.PodTemplate(obj)
		if err != nil {
			return err
		}
		tpl.Spec.Containers[0].Image = image
		return nil
	})
}

// writeAs reads obj, changes it with mutate and writes it back as field
// owner (the client's default when empty), reading it again when another
// writer came first, as a GitOps tool does: the workload's own
// controller writes its status at any time, and a conflict with that
// write is not what a test asserts.
func writeAs(t *testing.T, obj client.Object, owner string, mutate func() error) {
	t.Helper()
	var opts []client.UpdateOption
	if owner != "" {
		opts = append(opts, client.FieldOwner(owner))
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := suite.c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		if err := mutate(); err != nil {
			return err
		}
		return suite.c.Update(context.Background(), obj, opts...)
	})
	if err != nil {
		t.Fatalf("update %s: %v", obj.GetName(), err)
	}
}

// firstBatch covers obj with a Rollout, sets its image and drives the
// release's first batch of canary pods (at most one pod unavailable); it
// returns the adapter and the release's rollout id.
func firstBatch(t *testing.T, obj client.Object, image string, canary int32) (workload.Adapter, string) {
	t.Helper()
	_, a := cover(t, obj, nil)
	setImage(t, obj, image)
	rolloutID := obj.GetName() + "-" + observe(t, a).CanaryRevision
	drive(t, fmt.Sprintf("batch 1 (%d pods)", canary), a, 1, func(ctx context.Context) (bool, error) {
		return a.EnsureBatch(ctx, workload.Batch{CanaryReplicas: canary, RolloutID: rolloutID, BatchID: 1})
	})
	return a, rolloutID
}

// onlyCanaryLabelled checks the pods of app by the value of label key: the
// stable ones (value stable) carry no rollgate.dev/revision, the one canary
// pod (value canary) its revision, rollout id and batch 1.
func onlyCanaryLabelled(t *testing.T, ns, app, key, stable, canary string, o workload.Observation, rolloutID string) {
	t.Helper()
	n := 0
	for _, p := range pods(t, ns, app) {
		switch p.Labels[key] {
		case stable:
			if _, ok := p.Labels[v1alpha1.LabelRevision]; ok {
				t.Errorf("stable pod %s was labelled: %v", p.Name, p.Labels)
			}
		case canary:
			n++
			if p.Labels[v1alpha1.LabelRevision] != o.CanaryRevision || p.Labels[v1alpha1.LabelBatchID] != "1" || p.Labels[v1alpha1.LabelRolloutID] != rolloutID {
				t.Errorf("canary pod %s labels %v, want its revision, rollout id and batch 1", p.Name, p.Labels)
			}
		default:
			t.Errorf("pod %s of no known revision: %v", p.Name, p.Labels)
		}
	}
	if n != 1 {
		t.Fatalf("%d canary pods, want 1", n)
	}
}

func observe(t *testing.T, a workload.Adapter) workload.Observation {
	t.Helper()
	o, err := a.Observe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// drive calls step until it reports done, checking after every call that
// no more than maxUnavailable of the workload's pods are unavailable.
func drive(t *testing.T, what string, a workload.Adapter, maxUnavailable int32, step func(ctx context.Context) (bool, error)) {
	t.Helper()
	floor := int32(-1)
	eventually(t, 90*time.Second, what, func(ctx context.Context) (bool, error) {
		done, err := step(ctx)
		if err != nil {
			t.Logf("%s: %v (retrying)", what, err)
			return false, nil
		}
		o := observe(t, a)
		avail := o.Stable.Ready + o.Canary.Ready + o.Other.Ready
		if floor < 0 || avail < floor {
			floor = avail
		}
		if avail < o.Replicas-maxUnavailable {
			t.Fatalf("%s: %d pods available, below %d - %d (stable %+v canary %+v other %+v)",
				what, avail, o.Replicas, maxUnavailable, o.Stable, o.Canary, o.Other)
		}
		return done, nil
	})
	t.Logf("%s: at least %d pods available throughout", what, floor)
}

// pods lists the live pods of a workload by label app.
func pods(t *testing.T, ns, app string) []corev1.Pod {
	t.Helper()
	var list corev1.PodList
	if err := suite.c.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{"app": app}); err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// batchLabels counts the canary pods by batch id and fails the test when a
// canary pod lacks the rollout id.
func batchLabels(t *testing.T, ns, app, canaryRev, rolloutID string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, p := range pods(t, ns, app) {
		if p.Labels[v1alpha1.LabelRevision] != canaryRev {
			continue
		}
		if p.Labels[v1alpha1.LabelRolloutID] != rolloutID {
			t.Fatalf("canary pod %s has rollout id %q, want %q", p.Name, p.Labels[v1alpha1.LabelRolloutID], rolloutID)
		}
		out[p.Labels[v1alpha1.LabelBatchID]]++
	}
	return out
}

func wantPods(t *testing.T, what string, got workload.Pods, total, ready int32) {
	t.Helper()
	if got.Total != total || got.Ready != ready {
		t.Fatalf("%s pods = %+v, want %d total, %d ready", what, got, total, ready)
	}
}

// replicaSets lists the ReplicaSets a Deployment controls.
func replicaSets(t *testing.T, d *appsv1.Deployment) []appsv1.ReplicaSet {
	t.Helper()
	var list appsv1.ReplicaSetList
	if err := suite.c.List(context.Background(), &list, client.InNamespace(d.Namespace)); err != nil {
		t.Fatal(err)
	}
	var out []appsv1.ReplicaSet
	for _, rs := range list.Items {
		if ref := metav1.GetControllerOf(&rs); ref != nil && ref.UID == d.UID {
			out = append(out, rs)
		}
	}
	return out
}

func key(ns, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: ns, Name: name}
}
