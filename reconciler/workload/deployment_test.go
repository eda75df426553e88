package workload_test

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/workload"
)

func newDeployment(t *testing.T, ns, name string, replicas int32) *appsv1.Deployment {
	t.Helper()
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: podTemplate(name, name+":v1"),
		},
	}
	create(t, d)
	waitDeploymentComplete(t, d)
	return d
}

func waitDeploymentComplete(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	eventually(t, 60*time.Second, "Deployment "+d.Name+" complete", func(ctx context.Context) (bool, error) {
		if err := suite.c.Get(ctx, key(d.Namespace, d.Name), d); err != nil {
			return false, err
		}
		r, st := *d.Spec.Replicas, d.Status
		return st.ObservedGeneration >= d.Generation && st.UpdatedReplicas == r && st.Replicas == r && st.AvailableReplicas == r, nil
	})
}

// Given a Deployment of 10 pods, when Git bumps the image, then the webhook
// holds it; batches of 2 and 5 new pods come up next to 8 and 5 old ones
// without dropping below 8 available pods; and when the release is
// finalised the Deployment controller adopts rollgate's ReplicaSet and
// finishes the rollout with it.
func TestDeploymentPartitionStyle(t *testing.T) {
	ns := namespace(t)
	d := newDeployment(t, ns, "web", 10)
	_, a := cover(t, d, nil)

	setImage(t, d, "web:v2")
	if !d.Spec.Paused || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Fatalf("image bump not held: paused=%v strategy=%s", d.Spec.Paused, d.Spec.Strategy.Type)
	}
	o := observe(t, a)
	if !o.Held || o.MaxUnavailable != 2 || o.CanaryRevision != workload.Revision(&d.Spec.Template) {
		t.Fatalf("observation after the bump = %+v", o)
	}
	wantPods(t, "stable", o.Stable, 10, 10)
	rolloutID := "web-" + o.CanaryRevision

	drive(t, "batch 1 (2 pods)", a, 2, func(ctx context.Context) (bool, error) {
		return a.EnsureBatch(ctx, workload.Batch{CanaryReplicas: 2, RolloutID: rolloutID, BatchID: 1})
	})
	o = observe(t, a)
	wantPods(t, "canary", o.Canary, 2, 2)
	wantPods(t, "stable", o.Stable, 8, 8)
	if got := batchLabels(t, ns, "web", o.CanaryRevision, rolloutID); got["1"] != 2 {
		t.Fatalf("canary pods by batch = %v, want 2 of batch 1", got)
	}

	drive(t, "batch 2 (5 pods)", a, 2, func(ctx context.Context) (bool, error) {
		return a.EnsureBatch(ctx, workload.Batch{CanaryReplicas: 5, RolloutID: rolloutID, BatchID: 2})
	})
	o = observe(t, a)
	wantPods(t, "canary", o.Canary, 5, 5)
	wantPods(t, "stable", o.Stable, 5, 5)
	if got := batchLabels(t, ns, "web", o.CanaryRevision, rolloutID); got["1"] != 2 || got["2"] != 3 {
		t.Fatalf("canary pods by batch = %v, want 2 of batch 1 and 3 of batch 2", got)
	}

	// Argo CD self-heal puts the declared strategy back mid-release: the
	// stored object never carries it, so the Deployment controller never
	// sees an unpaused RollingUpdate.
	writeAs(t, d, "argocd-controller", func() error {
		d.Spec.Paused = false
		d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType}
		return nil
	})
	if !d.Spec.Paused || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Fatalf("self-heal went through mid-release: paused=%v strategy=%s", d.Spec.Paused, d.Spec.Strategy.Type)
	}
	o = observe(t, a)
	wantPods(t, "canary after the self-heal", o.Canary, 5, 5)
	wantPods(t, "stable after the self-heal", o.Stable, 5, 5)
	ours := "web-" + o.CanaryRevision

	drive(t, "finalize", a, 2, a.HandBack)
	o = observe(t, a)
	if o.Held || !o.Complete {
		t.Fatalf("after HandBack: %+v, want released and complete", o)
	}
	wantPods(t, "new revision", o.Stable, 10, 10)
	get(t, d)
	if d.Spec.Paused || d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || d.Annotations[v1alpha1.AnnotationControl] != "" {
		t.Fatalf("declared settings not restored: paused=%v strategy=%+v", d.Spec.Paused, d.Spec.Strategy)
	}
	rss := replicaSets(t, d)
	if len(rss) != 2 {
		t.Fatalf("ReplicaSets = %d, want 2 (the old one and rollgate's, adopted)", len(rss))
	}
	for _, rs := range rss {
		if rs.Name == ours && *rs.Spec.Replicas != 10 || rs.Name != ours && *rs.Spec.Replicas != 0 {
			t.Fatalf("ReplicaSet %s has %d replicas; want %s at 10 and the old one at 0", rs.Name, *rs.Spec.Replicas, ours)
		}
	}
}

// Given a Deployment mid-release, when the release fails, then Rollback
// removes the new pods and ReplicaSet while the template is still new (held);
// and when Git reverts the image, Rollback releases the Deployment.
func TestDeploymentRollback(t *testing.T) {
	ns := namespace(t)
	d := newDeployment(t, ns, "api", 4)
	a, _ := firstBatch(t, d, "api:v2", 2)

	drive(t, "rollback while the template is new", a, 1, a.Rollback)
	o := observe(t, a)
	if !o.Held || o.Rollback {
		t.Fatalf("after Rollback with the new template: %+v, want still held", o)
	}
	wantPods(t, "canary", o.Canary, 0, 0)
	wantPods(t, "stable", o.Stable, 4, 4)
	if n := len(replicaSets(t, d)); n != 1 {
		t.Fatalf("ReplicaSets = %d, want only the stable one", n)
	}

	setImage(t, d, "api:v1")
	if o = observe(t, a); !o.Rollback {
		t.Fatalf("after the revert: %+v, want Rollback", o)
	}
	drive(t, "rollback after the revert", a, 1, a.Rollback)
	o = observe(t, a)
	if o.Held || !o.Complete {
		t.Fatalf("after the revert and Rollback: %+v, want released and complete", o)
	}
	get(t, d)
	if d.Spec.Paused || d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType {
		t.Fatalf("declared settings not restored: paused=%v strategy=%s", d.Spec.Paused, d.Spec.Strategy.Type)
	}
	if n := len(replicaSets(t, d)); n != 1 {
		t.Fatalf("ReplicaSets = %d, want only the stable one", n)
	}
}

// Given a Deployment released in place, the Services of the release are
// told to select the revisions by pod-template-hash: the stable pods keep
// the hash the Deployment controller gave them, the new ReplicaSet's is
// the revision, and no stable pod is patched for a label; the canary pods
// get their revision, rollout id and batch id.
func TestDeploymentInPlaceNarrowsByPodTemplateHash(t *testing.T) {
	ns := namespace(t)
	d := newDeployment(t, ns, "hash", 4)
	stableRS := replicaSets(t, d)[0]
	a, rolloutID := firstBatch(t, d, "hash:v2", 1)
	o := observe(t, a)
	nativeHash := stableRS.Labels[appsv1.DefaultDeploymentUniqueLabelKey]
	if o.RevisionLabel != appsv1.DefaultDeploymentUniqueLabelKey || o.LabelValue(o.StableRevision) != nativeHash ||
		o.LabelValue(o.CanaryRevision) != o.CanaryRevision || nativeHash == "" || nativeHash == o.StableRevision {
		t.Fatalf("revision label %q, stable %s -> %q (its ReplicaSet's hash %q), canary %s -> %q; want pod-template-hash, the native hash and the revision",
			o.RevisionLabel, o.StableRevision, o.LabelValue(o.StableRevision), nativeHash, o.CanaryRevision, o.LabelValue(o.CanaryRevision))
	}
	onlyCanaryLabelled(t, ns, "hash", appsv1.DefaultDeploymentUniqueLabelKey, nativeHash, o.CanaryRevision, o, rolloutID)
}

// Given enableExtraWorkloadForCanary, the Deployment keeps its old pods and
// a canary Deployment owned by the Rollout runs the new ones, with the
// Rollout's patchPodTemplateMetadata; HandBack lets the Deployment roll
// out and then removes the canary Deployment.
func TestDeploymentCanaryStyle(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	d := newDeployment(t, ns, "shop", 4)
	ro, a := cover(t, d, func(ro *v1alpha1.Rollout) {
		ro.Spec.Strategy.Canary.EnableExtraWorkloadForCanary = true
		ro.Spec.Strategy.Canary.PatchPodTemplateMetadata = &v1alpha1.PatchPodTemplateMetadata{Labels: map[string]string{"track": "canary"}}
	})
	setImage(t, d, "shop:v2")
	if !d.Spec.Paused || d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType {
		t.Fatalf("canary style hold: paused=%v strategy=%s, want only paused", d.Spec.Paused, d.Spec.Strategy.Type)
	}
	o := observe(t, a)
	newRev := o.CanaryRevision
	rolloutID := "shop-" + newRev
	drive(t, "batch 1 (2 canary pods)", a, 0, func(ctx context.Context) (bool, error) {
		return a.EnsureBatch(ctx, workload.Batch{CanaryReplicas: 2, RolloutID: rolloutID, BatchID: 1})
	})
	o = observe(t, a)
	wantPods(t, "canary", o.Canary, 2, 2)
	wantPods(t, "stable", o.Stable, 4, 4)
	canary := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: workload.CanaryName("shop", o.CanaryRevision)}}
	get(t, canary)
	if ref := metav1.GetControllerOf(canary); ref == nil || ref.UID != ro.UID {
		t.Fatalf("canary Deployment owner = %v, want the Rollout", canary.OwnerReferences)
	}
	for _, p := range pods(t, ns, "shop") {
		if p.Labels[v1alpha1.LabelRevision] == o.CanaryRevision && (p.Labels["track"] != "canary" || p.Labels[v1alpha1.LabelBatchID] != "1") {
			t.Fatalf("canary pod %s labels = %v", p.Name, p.Labels)
		}
	}

	// The first call releases the Deployment; until the canary Deployment
	// is gone the release still holds it, so the reconciler calls HandBack
	// again (it calls HandBack only while the workload is held).
	if done, err := a.HandBack(ctx); err != nil || done {
		t.Fatalf("first HandBack = %v, %v; want the Deployment released, not done", done, err)
	}
	if o = observe(t, a); !o.Held || o.Control != nil || o.Complete {
		t.Fatalf("released with the canary Deployment left: want held without control, got %+v", o)
	}
	drive(t, "finalize", a, 0, a.HandBack)
	o = observe(t, a)
	if o.Held || !o.Complete {
		t.Fatalf("after HandBack: %+v", o)
	}
	wantPods(t, "new revision", o.Stable, 4, 4)
	if err := suite.c.Get(ctx, key(ns, canary.Name), canary); !apierrors.IsNotFound(err) {
		t.Fatalf("canary Deployment still exists (err %v)", err)
	}
	// The Deployment's own new pods carry the revision label, so Services
	// narrowed to the new revision reached them before the canary
	// Deployment's pods went.
	for _, p := range pods(t, ns, "shop") {
		if p.DeletionTimestamp == nil && p.Labels[v1alpha1.LabelRevision] != newRev {
			t.Errorf("pod %s labels %v, want %s=%s", p.Name, p.Labels, v1alpha1.LabelRevision, newRev)
		}
	}
}

// Given a release whose last batch's pods became available before any
// EnsureBatch saw them (the reconciler then goes straight to HandBack),
// HandBack labels them with the rollout id and the batch id of the
// Rollout's current step; the earlier batch keeps its own.
func TestFinalizeLabelsTheLastBatch(t *testing.T) {
	ns := namespace(t)
	d := newDeployment(t, ns, "last", 4)
	ro, a := cover(t, d, nil)
	setImage(t, d, "last:v2")
	o := observe(t, a)
	rolloutID := workload.RolloutID(ro.Name, o.CanaryRevision)
	drive(t, "batch 1 (2 pods)", a, 1, func(ctx context.Context) (bool, error) {
		return a.EnsureBatch(ctx, workload.Batch{CanaryReplicas: 2, RolloutID: rolloutID, BatchID: 1})
	})
	drive(t, "batch 2 (4 pods), its new pods unseen", a, 1, func(ctx context.Context) (bool, error) {
		return a.EnsureBatch(ctx, workload.Batch{CanaryReplicas: 4})
	})
	unlabelled := 0
	for _, p := range pods(t, ns, "last") {
		if p.Labels[v1alpha1.LabelRevision] == o.CanaryRevision && p.Labels[v1alpha1.LabelRolloutID] == "" {
			unlabelled++
		}
	}
	if unlabelled != 2 {
		t.Fatalf("before HandBack: %d canary pods without a rollout id, want the 2 of batch 2", unlabelled)
	}

	// The reconciler records the last step before it finalizes.
	ro.Status.CanaryRevision, ro.Status.CurrentStepIndex = o.CanaryRevision, 2
	drive(t, "finalize", a, 1, a.HandBack)
	if got := batchLabels(t, ns, "last", o.CanaryRevision, rolloutID); got["1"] != 2 || got["2"] != 2 {
		t.Fatalf("canary pods by batch = %v, want 2 of batch 1 and 2 of batch 2", got)
	}
}

// Given a Deployment with minReadySeconds whose pods are Ready, the
// observation counts a pod available only minReadySeconds after it became
// Ready, and says when the next one does (AvailableAt): nothing announces
// that moment, and the Rollout controller sets its timer by it.
func TestObservationSaysWhenPodsBecomeAvailable(t *testing.T) {
	ns := namespace(t)
	const minReady = 300 * time.Second
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "slow", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas:        ptr.To(int32(2)),
			MinReadySeconds: int32(minReady / time.Second),
			Selector:        &metav1.LabelSelector{MatchLabels: map[string]string{"app": "slow"}},
			Template:        podTemplate("slow", "slow:v1"),
		},
	}
	create(t, d)
	var first, last time.Time
	eventually(t, 60*time.Second, "both pods Ready", func(context.Context) (bool, error) {
		var ready []time.Time
		for _, p := range pods(t, ns, "slow") {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					ready = append(ready, c.LastTransitionTime.Time)
				}
			}
		}
		if len(ready) != 2 {
			return false, nil
		}
		first, last = ready[0], ready[1]
		if last.Before(first) {
			first, last = last, first
		}
		return true, nil
	})
	ro := &v1alpha1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Name: "slow", Namespace: ns},
		Spec:       v1alpha1.RolloutSpec{WorkloadRef: v1alpha1.WorkloadRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "slow"}},
	}
	at := func(now time.Time) workload.Observation {
		t.Helper()
		a, err := workload.For(suite.c, ro, func() time.Time { return now })
		if err != nil {
			t.Fatal(err)
		}
		return observe(t, a)
	}
	wantAt := func(what string, o workload.Observation, want time.Time) {
		t.Helper()
		if !o.AvailableAt.Equal(want) {
			t.Fatalf("%s: AvailableAt %v, want %v", what, o.AvailableAt, want)
		}
	}

	o := at(last)
	wantPods(t, "both Ready, neither for minReadySeconds", o.Stable, 2, 0)
	wantAt("both Ready, neither for minReadySeconds", o, first.Add(minReady))

	o = at(first.Add(minReady))
	if last.Equal(first) {
		wantPods(t, "both Ready for minReadySeconds", o.Stable, 2, 2)
		wantAt("both Ready for minReadySeconds", o, time.Time{})
	} else {
		wantPods(t, "the first Ready for minReadySeconds", o.Stable, 2, 1)
		wantAt("the first Ready for minReadySeconds", o, last.Add(minReady))
	}

	o = at(last.Add(minReady))
	wantPods(t, "both Ready for minReadySeconds", o.Stable, 2, 2)
	wantAt("both Ready for minReadySeconds", o, time.Time{})
}
