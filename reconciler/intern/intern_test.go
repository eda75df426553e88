package intern_test

import (
	"strings"
	"testing"
	"unsafe"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/intern"
)

// fresh returns a copy of s in memory of its own, as a decoder makes one.
func fresh(s string) string { return strings.Clone(s) }

func pod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: fresh("shop"),
			Labels:          map[string]string{fresh("app.kubernetes.io/name"): fresh("web"), fresh("pod-template-hash"): fresh("7d9f")},
			Annotations:     map[string]string{fresh("prometheus.io/scrape"): fresh("true")},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: fresh("apps/v1"), Kind: fresh("ReplicaSet"), Name: fresh("web-7d9f"), UID: "u1", Controller: ptr.To(true)}},
			Finalizers:      []string{fresh("example.com/keep")},
		},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodConditionType(fresh("Ready")), Status: corev1.ConditionStatus(fresh("True"))}}},
	}
}

func same(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

// keyOf returns the key of m equal to k, as the map holds it.
func keyOf(m map[string]string, k string) string {
	for key := range m {
		if key == k {
			return key
		}
	}
	return ""
}

// TestObjectsShareTheirRepeatedStrings: two pods decoded apart hold one
// copy of their namespace, label and annotation keys, owners' apiVersion
// and kind, finalizers and condition strings after the transform, and
// each still reads as it did.
func TestObjectsShareTheirRepeatedStrings(t *testing.T) {
	tab := intern.New(0)
	a, b := pod("web-1"), pod("web-2")
	wantA, wantB := a.DeepCopy(), b.DeepCopy()
	for _, p := range []*corev1.Pod{a, b} {
		if _, err := tab.Object(p); err != nil {
			t.Fatal(err)
		}
	}
	if !equality.Semantic.DeepEqual(a, wantA) || !equality.Semantic.DeepEqual(b, wantB) {
		t.Fatalf("the transform changed what a pod reads:\n%+v\n%+v", a, wantA)
	}
	for what, pair := range map[string][2]string{
		"namespace":          {a.Namespace, b.Namespace},
		"label key":          {keyOf(a.Labels, "pod-template-hash"), keyOf(b.Labels, "pod-template-hash")},
		"annotation key":     {keyOf(a.Annotations, "prometheus.io/scrape"), keyOf(b.Annotations, "prometheus.io/scrape")},
		"owner's apiVersion": {a.OwnerReferences[0].APIVersion, b.OwnerReferences[0].APIVersion},
		"owner's kind":       {a.OwnerReferences[0].Kind, b.OwnerReferences[0].Kind},
		"finalizer":          {a.Finalizers[0], b.Finalizers[0]},
		"condition type":     {string(a.Status.Conditions[0].Type), string(b.Status.Conditions[0].Type)},
		"condition status":   {string(a.Status.Conditions[0].Status), string(b.Status.Conditions[0].Status)},
	} {
		if !same(pair[0], pair[1]) {
			t.Errorf("the two pods hold two copies of their %s %q", what, pair[0])
		}
	}
	// A value, a name or a UID is not kept: they are many and rarely repeated.
	if same(a.Labels["app.kubernetes.io/name"], b.Labels["app.kubernetes.io/name"]) || same(a.OwnerReferences[0].Name, b.OwnerReferences[0].Name) {
		t.Error("a label's value or an owner's name went into the table")
	}
}

// TestObjectLeavesSharedMapsAlone: a transform before this one (StripPod,
// StripReplicaSet) shares the decoded object's maps and slices; the
// transform replaces them and never writes into them.
func TestObjectLeavesSharedMapsAlone(t *testing.T) {
	tab := intern.New(0)
	tab.String("app.kubernetes.io/name") // the table's copy is not the pod's
	p := pod("web-1")
	labels, owners := p.Labels, p.OwnerReferences
	key, kind := keyOf(labels, "app.kubernetes.io/name"), owners[0].Kind
	if _, err := tab.Object(p); err != nil {
		t.Fatal(err)
	}
	if !same(keyOf(labels, "app.kubernetes.io/name"), key) || !same(owners[0].Kind, kind) {
		t.Error("the transform wrote into a map or slice the object shared")
	}
	if same(keyOf(p.Labels, "app.kubernetes.io/name"), key) {
		t.Error("the transformed pod kept its own copy of a key the table had")
	}
}

// TestEveryKindReadsTheSame: the transform changes no value of the kinds
// it knows beyond their metadata.
func TestEveryKindReadsTheSame(t *testing.T) {
	tab := intern.New(0)
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"},
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"a"}}}}
	tpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"a": "b"}}}
	for _, obj := range []any{
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"}, Spec: appsv1.DeploymentSpec{Selector: sel.DeepCopy(), Template: *tpl.DeepCopy()},
			Status: appsv1.DeploymentStatus{Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable", Message: "ok"}}}},
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop"}, Spec: appsv1.StatefulSetSpec{Selector: sel.DeepCopy(), Template: *tpl.DeepCopy()}},
		&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "shop"}, Spec: appsv1.DaemonSetSpec{Selector: sel.DeepCopy(), Template: *tpl.DeepCopy()}},
		&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop"}, Spec: appsv1.ReplicaSetSpec{Selector: sel.DeepCopy(), Replicas: ptr.To[int32](3)}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}}},
		&v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", Finalizers: []string{"rollgate.dev/finalizer"}},
			Status: v1alpha1.RolloutStatus{Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Healthy", Message: "serving"}}}},
		&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "route", Namespace: "shop", Labels: map[string]string{"a": "b"}}},
		"not an object",
	} {
		want := deepCopy(obj)
		got, err := tab.Object(obj)
		if err != nil {
			t.Fatal(err)
		}
		if !equality.Semantic.DeepEqual(got, want) {
			t.Errorf("%T reads differently after the transform:\n got %+v\nwant %+v", obj, got, want)
		}
	}
}

// deepCopy is a copy of obj, or obj itself when it is not an object.
func deepCopy(obj any) any {
	if o, ok := obj.(runtime.Object); ok {
		return o.DeepCopyObject()
	}
	return obj
}

// TestTableIsBounded: a table never keeps more strings than its bound; a
// full table empties itself and goes on sharing what comes next.
func TestTableIsBounded(t *testing.T) {
	tab := intern.New(3)
	for _, ns := range []string{"a", "b", "c", "d", "e"} {
		tab.String(ns)
		if tab.Len() > 3 {
			t.Fatalf("the table holds %d strings, bound 3", tab.Len())
		}
	}
	if tab.Resets() != 1 {
		t.Errorf("resets %d, want 1", tab.Resets())
	}
	e := fresh("e")
	if !same(tab.String(e), tab.String(fresh("e"))) {
		t.Error("a table that emptied itself no longer shares strings")
	}
	long := strings.Repeat("x", 200)
	if tab.String(long) != long || tab.Len() > 3 {
		t.Error("a string longer than the table keeps changed the table")
	}
}

// BenchmarkObject is the transform's cost for one pod as a decoder makes
// it (six strings kept, two maps and two slices rebuilt), the CPU it adds
// to each event of the cache.
func BenchmarkObject(b *testing.B) {
	tab := intern.New(0)
	for b.Loop() {
		b.StopTimer()
		p := pod("web-1")
		b.StartTimer()
		if _, err := tab.Object(p); err != nil {
			b.Fatal(err)
		}
	}
}
