package workload_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
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

// TestStrippedPodsObserveTheSame: with the controller's cache transforms
// (no managedFields, pods cut down by StripPod, ReplicaSets' templates
// replaced by their revision), each adapter observes a
// workload exactly as it does reading the API server, at rest and with a
// release held by the webhook: the same revisions, pods counted by
// revision and readiness, terminating pods, control annotation. And the
// cached pods did lose their spec, the cached ReplicaSets their template.
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
		if len(p.Spec.Containers) != 0 || len(p.ManagedFields) != 0 || len(p.Status.ContainerStatuses) != 0 || len(p.Annotations) != 0 {
			t.Errorf("cached pod %s keeps %d containers, %d managedFields entries, %d container statuses, %d annotations: not stripped", p.Name, len(p.Spec.Containers), len(p.ManagedFields), len(p.Status.ContainerStatuses), len(p.Annotations))
		}
		if len(p.OwnerReferences) == 0 || len(p.Status.Conditions) == 0 {
			t.Errorf("cached pod %s lost its owner or its conditions", p.Name)
		}
	}

	var rss appsv1.ReplicaSetList
	if err := suite.stripped.List(context.Background(), &rss, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(rss.Items) < 2 {
		t.Fatalf("%d cached ReplicaSets of web, want the stable and the canary one", len(rss.Items))
	}
	for _, rs := range rss.Items {
		var liveRS appsv1.ReplicaSet
		if err := suite.c.Get(context.Background(), client.ObjectKeyFromObject(&rs), &liveRS); err != nil {
			t.Fatal(err)
		}
		if len(rs.Spec.Template.Spec.Containers) != 0 || len(rs.ManagedFields) != 0 || !reflect.DeepEqual(rs.Status, appsv1.ReplicaSetStatus{}) {
			t.Errorf("cached ReplicaSet %s keeps %d containers, %d managedFields entries, status %+v: not stripped", rs.Name, len(rs.Spec.Template.Spec.Containers), len(rs.ManagedFields), rs.Status)
		}
		if got, want := workload.ReplicaSetRevision(&rs), workload.Revision(&liveRS.Spec.Template); got != want {
			t.Errorf("cached ReplicaSet %s: revision %s, the API server's template has %s", rs.Name, got, want)
		}
		if rs.Spec.Selector == nil || ptr.Deref(rs.Spec.Replicas, -1) != ptr.Deref(liveRS.Spec.Replicas, -2) || len(rs.OwnerReferences) == 0 {
			t.Errorf("cached ReplicaSet %s lost its selector, replicas or owner", rs.Name)
		}
	}
}

// TestStripReplicaSetTwice: stripping a stripped ReplicaSet keeps its
// revision, and the input is left as it was.
func TestStripReplicaSetTwice(t *testing.T) {
	rs := &appsv1.ReplicaSet{Spec: appsv1.ReplicaSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "web:2"}}}}}}
	want := workload.Revision(&rs.Spec.Template)
	twice := workload.StripReplicaSet(workload.StripReplicaSet(rs))
	if got := workload.ReplicaSetRevision(twice); got != want {
		t.Fatalf("revision after two strips: %q, want %q", got, want)
	}
	if rs.Annotations != nil {
		t.Fatalf("StripReplicaSet changed its input's annotations: %v", rs.Annotations)
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

// TestPodReadChanged: a pod's update wakes its Rollout when something
// rollgate reads of it changed, and only then; StripPod keeps the Ready
// condition alone of the conditions.
func TestPodReadChanged(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	base := func() *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "web-1", ResourceVersion: "1", Labels: map[string]string{"app": "web"},
				OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web-a", UID: "a", Controller: ptr.To(true)}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: at},
				{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: at},
			}},
		}
	}
	for _, c := range []struct {
		name   string
		change func(p *corev1.Pod)
		want   bool
	}{
		{"resourceVersion only", func(p *corev1.Pod) { p.ResourceVersion = "2" }, false},
		{"another condition", func(p *corev1.Pod) {
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionTrue})
		}, false},
		{"an annotation", func(p *corev1.Pod) { p.Annotations = map[string]string{"note": "x"} }, false},
		{"Ready", func(p *corev1.Pod) { p.Status.Conditions[1].Status = corev1.ConditionTrue }, true},
		{"not Ready, since another time", func(p *corev1.Pod) { p.Status.Conditions[1].LastTransitionTime = metav1.NewTime(at.Add(time.Second)) }, false},
		{"not Ready, the condition gone", func(p *corev1.Pod) { p.Status.Conditions = p.Status.Conditions[:1] }, false},
		{"a label", func(p *corev1.Pod) { p.Labels[v1alpha1.LabelRevision] = "r2" }, true},
		{"the owner", func(p *corev1.Pod) { p.OwnerReferences[0].UID = "b" }, true},
		{"deleted", func(p *corev1.Pod) { p.DeletionTimestamp = &at }, true},
		{"the phase alone", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }, false},
	} {
		old, cur := base(), base()
		c.change(cur)
		if got := workload.PodReadChanged(old, cur); got != c.want {
			t.Errorf("%s: changed %v, want %v", c.name, got, c.want)
		}
		if got := workload.PodReadChanged(workload.StripPod(old), workload.StripPod(cur)); got != c.want {
			t.Errorf("%s, stripped: changed %v, want %v", c.name, got, c.want)
		}
	}
	// A Ready pod: when it became Ready is read (minReadySeconds), and
	// so is its ceasing to be Ready, with or without a condition.
	readyAt := func(p *corev1.Pod, t metav1.Time) *corev1.Pod {
		p.Status.Conditions[1].Status, p.Status.Conditions[1].LastTransitionTime = corev1.ConditionTrue, t
		return p
	}
	for _, c := range []struct {
		name     string
		old, cur *corev1.Pod
		want     bool
	}{
		{"Ready again, later", readyAt(base(), at), readyAt(base(), metav1.NewTime(at.Add(time.Second))), true},
		{"Ready, then not", readyAt(base(), at), base(), true},
		{"Ready, then the condition gone", readyAt(base(), at), func() *corev1.Pod { p := base(); p.Status.Conditions = p.Status.Conditions[:1]; return p }(), true},
		{"the kubelet's first status (Ready False)", func() *corev1.Pod { p := base(); p.Status.Conditions = nil; return p }(), base(), false},
	} {
		if got := workload.PodReadChanged(c.old, c.cur); got != c.want {
			t.Errorf("%s: changed %v, want %v", c.name, got, c.want)
		}
	}
	// A terminating pod: its shutdown's status writes wake nothing.
	old, cur := base(), base()
	old.DeletionTimestamp, cur.DeletionTimestamp = &at, &at
	old.Status.Conditions[1].Status = corev1.ConditionTrue
	cur.Status.Phase = corev1.PodSucceeded
	if workload.PodReadChanged(old, cur) {
		t.Error("a terminating pod turning unready and Succeeded: changed, want not")
	}
	if got := workload.StripPod(base()).Status.Conditions; len(got) != 1 || got[0].Type != corev1.PodReady {
		t.Errorf("stripped conditions %v, want Ready alone", got)
	}
}

// TestPodCreateWakes: a pod's creation wakes its Rollout only when the pod
// counts as more than starting: Ready (a re-list, a controller start) or
// terminating. A starting pod wakes it when it becomes Ready
// (PodReadChanged).
func TestPodCreateWakes(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	pod := func(ready corev1.ConditionStatus, deleted bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1"}}
		if ready != "" {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: ready, LastTransitionTime: at}}
		}
		if deleted {
			p.DeletionTimestamp = &at
		}
		return p
	}
	for _, c := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"new, no status yet", pod("", false), false},
		{"new, not Ready", pod(corev1.ConditionFalse, false), false},
		{"Ready", pod(corev1.ConditionTrue, false), true},
		{"terminating", pod("", true), true},
		{"terminating, not Ready", pod(corev1.ConditionFalse, true), true},
	} {
		if got := workload.PodCreateWakes(c.pod); got != c.want {
			t.Errorf("%s: wakes %v, want %v", c.name, got, c.want)
		}
		if got := workload.PodCreateWakes(workload.StripPod(c.pod)); got != c.want {
			t.Errorf("%s, stripped: wakes %v, want %v", c.name, got, c.want)
		}
	}
}

// TestWorkloadReadChanged: an update of a ReplicaSet or a Deployment wakes
// its Rollout when something rollgate reads of it changed, and not for the
// status writes of their controllers that change nothing read.
func TestWorkloadReadChanged(t *testing.T) {
	tpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "web:1"}}}}
	rs := func() *appsv1.ReplicaSet {
		return &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Name: "web-a", ResourceVersion: "1", Labels: map[string]string{"app": "web"}},
			Spec:       appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, Template: tpl},
			Status:     appsv1.ReplicaSetStatus{Replicas: 2, ReadyReplicas: 1, AvailableReplicas: 1},
		}
	}
	for _, c := range []struct {
		name   string
		change func(*appsv1.ReplicaSet)
		want   bool
	}{
		{"a status write", func(r *appsv1.ReplicaSet) {
			r.ResourceVersion = "2"
			r.Status.ReadyReplicas, r.Status.AvailableReplicas = 2, 2
		}, false},
		{"replicas", func(r *appsv1.ReplicaSet) { r.Spec.Replicas = ptr.To[int32](3) }, true},
		{"an annotation", func(r *appsv1.ReplicaSet) {
			r.Annotations = map[string]string{"deployment.kubernetes.io/revision": "2"}
		}, true},
		{"the template", func(r *appsv1.ReplicaSet) {
			r.Spec.Template.Spec.Containers = []corev1.Container{{Name: "app", Image: "web:2"}}
		}, true},
		{"deleted", func(r *appsv1.ReplicaSet) { r.DeletionTimestamp = &metav1.Time{Time: time.Now()} }, true},
	} {
		old, cur := rs(), rs()
		c.change(cur)
		if got := workload.ReplicaSetReadChanged(workload.StripReplicaSet(old), workload.StripReplicaSet(cur)); got != c.want {
			t.Errorf("ReplicaSet, %s: changed %v, want %v", c.name, got, c.want)
		}
	}

	d := func() *appsv1.Deployment {
		return &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "web", ResourceVersion: "1", Generation: 3},
			Spec:       appsv1.DeploymentSpec{Replicas: ptr.To[int32](4), Template: tpl},
			Status: appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 4, UpdatedReplicas: 1, ReadyReplicas: 3, AvailableReplicas: 3,
				Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue}}},
		}
	}
	for _, c := range []struct {
		name   string
		change func(*appsv1.Deployment)
		want   bool
	}{
		{"a condition's time", func(d *appsv1.Deployment) {
			d.ResourceVersion = "2"
			d.Status.Conditions[0].LastUpdateTime = metav1.Now()
			d.Status.ReadyReplicas = 4
		}, false},
		{"the spec", func(d *appsv1.Deployment) { d.Generation = 4 }, true},
		{"observed", func(d *appsv1.Deployment) { d.Status.ObservedGeneration = 4 }, true},
		{"available", func(d *appsv1.Deployment) { d.Status.AvailableReplicas = 4 }, true},
		{"updated", func(d *appsv1.Deployment) { d.Status.UpdatedReplicas = 2 }, true},
		{"replicas", func(d *appsv1.Deployment) { d.Status.Replicas = 5 }, true},
		{"rollgate's control annotation", func(d *appsv1.Deployment) { d.Annotations = map[string]string{v1alpha1.AnnotationControl: "{}"} }, true},
	} {
		old, cur := d(), d()
		c.change(cur)
		if got := workload.DeploymentReadChanged(old, cur); got != c.want {
			t.Errorf("Deployment, %s: changed %v, want %v", c.name, got, c.want)
		}
	}

	// Held by a release, its status is not read: a status write wakes
	// nothing, unless minReadySeconds makes the available count news.
	heldD := func(minReady int32) *appsv1.Deployment {
		x := d()
		x.Annotations = map[string]string{v1alpha1.AnnotationControl: "{}"}
		x.Spec.MinReadySeconds = minReady
		return x
	}
	for _, c := range []struct {
		name     string
		minReady int32
		change   func(*appsv1.Deployment)
		want     bool
	}{
		{"available", 0, func(d *appsv1.Deployment) { d.Status.AvailableReplicas = 4 }, false},
		{"replicas", 0, func(d *appsv1.Deployment) { d.Status.Replicas, d.Status.UpdatedReplicas = 5, 2 }, false},
		{"available with minReadySeconds", 10, func(d *appsv1.Deployment) { d.Status.AvailableReplicas = 4 }, true},
		{"released (the annotation removed)", 0, func(d *appsv1.Deployment) { d.Annotations = nil; d.Status.AvailableReplicas = 4 }, true},
		{"the spec", 0, func(d *appsv1.Deployment) { d.Generation = 4 }, true},
	} {
		old, cur := heldD(c.minReady), heldD(c.minReady)
		c.change(cur)
		if got := workload.DeploymentReadChanged(old, cur); got != c.want {
			t.Errorf("held Deployment, %s: changed %v, want %v", c.name, got, c.want)
		}
	}
	// Released: the status is read again (deploymentComplete).
	old, cur := d(), d()
	cur.Status.AvailableReplicas = 4
	if !workload.DeploymentReadChanged(old, cur) {
		t.Error("released Deployment, available: a status write that deploymentComplete reads woke nothing")
	}
}

// TestReleaseThroughTheStrippedCache: a Deployment released wholly through
// the stripped cache, as the controller does, whose cached copies have no
// pod template (StripDeployment). The canary ReplicaSet still gets the
// whole template, read from the API server (APIReader), and the hand-back,
// a merge patch between two cached copies, leaves the API server's
// template, its other annotations (a kubectl last-applied configuration)
// and its status conditions in place. Without the API server to read, the
// adapter refuses to make the ReplicaSet rather than copy the cache's
// template.
func TestReleaseThroughTheStrippedCache(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	d := newDeployment(t, ns, "api", 3)
	ro, _ := cover(t, d, nil)
	setImage(t, d, "api:v2")
	const applied = `{"kind":"Deployment","metadata":{"name":"api"}}`
	writeAs(t, d, "kubectl-client-side-apply", func() error {
		d.Annotations["kubectl.kubernetes.io/last-applied-configuration"] = applied
		return nil
	})

	cacheOnly, err := workload.For(suite.stripped, ro, nil, workload.OwnerIndexed())
	if err != nil {
		t.Fatal(err)
	}
	var o workload.Observation
	eventually(t, 15*time.Second, "the stripped cache sees the new template", func(ctx context.Context) (bool, error) {
		o, err = cacheOnly.Observe(ctx)
		return err == nil && o.CanaryRevision != "" && o.Revision == o.CanaryRevision, err
	})
	batch := workload.Batch{CanaryReplicas: 1, RolloutID: "api-" + o.CanaryRevision, BatchID: 1}
	if _, err := cacheOnly.EnsureBatch(ctx, batch); err == nil || !strings.Contains(err.Error(), "changed since it was read") {
		t.Fatalf("EnsureBatch with no API server to read the template from: %v, want it refused", err)
	}
	if rss := replicaSets(t, d); len(rss) != 1 {
		t.Fatalf("%d ReplicaSets after the refused batch, want the stable one alone", len(rss))
	}

	a, err := workload.For(suite.stripped, ro, nil, workload.OwnerIndexed(), workload.APIReader(suite.c))
	if err != nil {
		t.Fatal(err)
	}
	drive(t, "batch 1 through the stripped cache", a, 1, func(ctx context.Context) (bool, error) { return a.EnsureBatch(ctx, batch) })
	var canary *appsv1.ReplicaSet
	for _, rs := range replicaSets(t, d) {
		if workload.Revision(&rs.Spec.Template) == o.CanaryRevision {
			canary = rs.DeepCopy()
		}
	}
	if canary == nil {
		t.Fatalf("no ReplicaSet of the canary revision %s with the whole template", o.CanaryRevision)
	}
	if c := canary.Spec.Template; c.Spec.Containers[0].Image != "api:v2" || c.Annotations["prometheus.io/scrape"] != "true" {
		t.Fatalf("canary ReplicaSet's template %+v, want the Deployment's", c)
	}

	drive(t, "hand back through the stripped cache", a, 1, a.HandBack)
	get(t, d)
	if d.Spec.Paused || d.Annotations[v1alpha1.AnnotationControl] != "" {
		t.Fatalf("after the hand-back: paused %v, annotations %v; want released", d.Spec.Paused, d.Annotations)
	}
	if _, ok := d.Annotations["rollgate.dev/cached-template-revision"]; ok || d.Annotations["kubectl.kubernetes.io/last-applied-configuration"] != applied {
		t.Errorf("annotations on the API server after the hand-back: %v; want the last-applied configuration kept and nothing of the cache's", d.Annotations)
	}
	if workload.Revision(&d.Spec.Template) != o.CanaryRevision || d.Spec.Template.Annotations["prometheus.io/scrape"] != "true" {
		t.Errorf("template on the API server after the hand-back: %+v, want revision %s as declared", d.Spec.Template, o.CanaryRevision)
	}
	if len(d.Status.Conditions) == 0 {
		t.Error("the Deployment's status conditions went with the hand-back")
	}
}
