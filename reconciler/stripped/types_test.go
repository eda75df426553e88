package stripped

import (
	"encoding/json"
	"slices"
	"testing"
	"time"
	"unsafe"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/utils/ptr"

	"github.com/rollgate/rollgate/reconciler/workload"
)

func fullPod(name string) *corev1.Pod {
	now := metav1.NewTime(time.Unix(1700000000, 0).UTC())
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "shop", UID: "u-" + "1", ResourceVersion: "42",
			Labels:          map[string]string{"app": "web", "pod-template-hash": "abc"},
			Annotations:     map[string]string{"sidecar.istio.io/status": "{...}", "k8s.io/initial-events-end": "true"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-abc", UID: "rs-1", Controller: ptr.To(true)}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate}},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "web:2", Env: []corev1.EnvVar{{Name: "A", Value: "b"}}}}, NodeName: "n1"},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: "10.0.0.1",
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: true}},
		},
	}
}

func fullReplicaSet(name string) *appsv1.ReplicaSet {
	return &appsv1.ReplicaSet{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ReplicaSet"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "shop", UID: "rs-1", ResourceVersion: "7",
			Annotations:     map[string]string{"deployment.kubernetes.io/revision": "3"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "d-1", Controller: ptr.To(true)}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager"}},
		},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To[int32](4), MinReadySeconds: 5,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "web:2"}}},
			},
		},
		Status: appsv1.ReplicaSetStatus{Replicas: 4, ReadyReplicas: 3},
	}
}

func fullDeployment(name string) *appsv1.Deployment {
	return &appsv1.Deployment{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "shop", UID: "d-1", ResourceVersion: "8", Generation: 3,
			Labels: map[string]string{"app": "web"},
			Annotations: map[string]string{"deployment.kubernetes.io/revision": "3", "rollgate.dev/control": `{"rollout":"web"}`,
				"kubectl.kubernetes.io/last-applied-configuration": `{"kind":"Deployment"}`},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kustomize-controller"}},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](4), MinReadySeconds: 5, Paused: true,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"team": "shop"}},
				Spec: corev1.PodSpec{
					InitContainers: []corev1.Container{{Name: "migrate", Image: "web-migrate:2"}},
					Containers: []corev1.Container{
						{Name: "proxy", Image: "envoy:1", Args: []string{"--x"}},
						{Name: "app", Image: "web:2", Env: []corev1.EnvVar{{Name: "A", Value: "b"}}},
						{Name: "app-metrics", Image: "exporter:1"},
					},
				},
			},
		},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 4, UpdatedReplicas: 4, ReadyReplicas: 4, AvailableReplicas: 3,
			Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Message: "ok"}}},
	}
}

// TestPodDecodesAsStripPod: a pod decoded from protobuf (what the API
// server sends the cache) or JSON, once through the cache's transform,
// reads back as exactly what workload.StripPod keeps of it, and before
// the transform it keeps the annotations a streamed list's bookmark is
// marked by.
func TestPodDecodesAsStripPod(t *testing.T) {
	full := fullPod("web-1")
	want := workload.StripPod(full)
	for name, p := range decodings[Pod](t, full) {
		if p.Annotations["k8s.io/initial-events-end"] != "true" {
			t.Errorf("%s: decoded pod lost its annotations before the transform: %v", name, p.Annotations)
		}
		if len(p.ManagedFields) != 0 {
			t.Errorf("%s: decoded pod keeps managedFields", name)
		}
		if _, err := dropAnnotations(p); err != nil {
			t.Fatal(err)
		}
		if got := p.Pod(); !same(got, want) {
			t.Errorf("%s: read back\n%+v\nwant what StripPod keeps\n%+v", name, got, want)
		}
	}
}

// TestReplicaSetDecodesAsStripReplicaSet: the same for ReplicaSets, whose
// template is kept as its revision.
func TestReplicaSetDecodesAsStripReplicaSet(t *testing.T) {
	full := fullReplicaSet("web-abc")
	want := workload.StripReplicaSet(full)
	for name, rs := range decodings[ReplicaSet](t, full) {
		got := rs.ReplicaSet()
		if !same(got, want) {
			t.Errorf("%s: read back\n%+v\nwant what StripReplicaSet keeps\n%+v", name, got, want)
		}
		if r, w := workload.ReplicaSetRevision(got), workload.Revision(&full.Spec.Template); r != w {
			t.Errorf("%s: revision %s, want %s", name, r, w)
		}
	}
}

// TestDeploymentDecodesAsStripDeployment: the same for Deployments, whose
// template is kept as its revision and images, without the kubectl
// last-applied configuration and the status conditions.
func TestDeploymentDecodesAsStripDeployment(t *testing.T) {
	full := fullDeployment("web")
	want := workload.StripDeployment(full)
	for name, d := range decodings[Deployment](t, full) {
		got := d.Deployment()
		if !same(got, want) {
			t.Errorf("%s: read back\n%+v\nwant what StripDeployment keeps\n%+v", name, got, want)
		}
		if r, w := workload.DeploymentRevision(got), workload.Revision(&full.Spec.Template); r != w {
			t.Errorf("%s: revision %s, want %s", name, r, w)
		}
		if g, w := workload.Images(&got.Spec.Template), workload.Images(&full.Spec.Template); !slices.Equal(g, w) {
			t.Errorf("%s: images %v, want %v", name, g, w)
		}
		if _, ok := got.Annotations["kubectl.kubernetes.io/last-applied-configuration"]; ok || got.Annotations["rollgate.dev/control"] == "" {
			t.Errorf("%s: annotations %v, want the control annotation without the last-applied configuration", name, got.Annotations)
		}
		if st := got.Status; len(st.Conditions) != 0 || st.AvailableReplicas != 3 || st.ObservedGeneration != 3 || !got.Spec.Paused {
			t.Errorf("%s: spec %+v status %+v, want paused and the counts without conditions", name, got.Spec, st)
		}
		// What the cache hands out strips to itself: a second pass (a
		// write's response, a deep copy) keeps the revision.
		if again := workload.StripDeployment(got); !same(again, got) {
			t.Errorf("%s: stripping again changed it:\n%+v\nwas\n%+v", name, again, got)
		}
	}
	// A whole Deployment is never taken for a stripped one, even carrying
	// the cache's annotation.
	forged := full.DeepCopy()
	forged.Annotations["rollgate.dev/cached-template-revision"] = "forged"
	if r := workload.DeploymentRevision(forged); r != workload.Revision(&full.Spec.Template) {
		t.Errorf("revision of a whole Deployment carrying the cache's annotation: %s", r)
	}
}

// TestListsDecodeThroughTheScheme: the lists the informers read decode,
// through the scheme NewCache builds and the codecs a typed client uses,
// into the stripped kinds, item by item as the kinds themselves do.
func TestListsDecodeThroughTheScheme(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := addToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	codecs := serializer.NewCodecFactory(scheme)
	pods := &corev1.PodList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"}, ListMeta: metav1.ListMeta{ResourceVersion: "99"},
		Items: []corev1.Pod{*fullPod("web-1"), *fullPod("web-2")}}
	rss := &appsv1.ReplicaSetList{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ReplicaSetList"}, Items: []appsv1.ReplicaSet{*fullReplicaSet("web-abc")}}
	ds := &appsv1.DeploymentList{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DeploymentList"}, Items: []appsv1.Deployment{*fullDeployment("web")}}
	for _, mediaType := range []string{runtime.ContentTypeProtobuf, runtime.ContentTypeJSON} {
		info, ok := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), mediaType)
		if !ok {
			t.Fatalf("no serializer for %s", mediaType)
		}
		for _, c := range []struct {
			in, into runtime.Object
			check    func(runtime.Object)
		}{
			{pods, &PodList{}, func(o runtime.Object) {
				l := o.(*PodList)
				if len(l.Items) != 2 || l.ResourceVersion != "99" {
					t.Fatalf("%s: pod list %d items, resourceVersion %q", mediaType, len(l.Items), l.ResourceVersion)
				}
				for i := range l.Items {
					_, _ = dropAnnotations(&l.Items[i])
					if got, want := l.Items[i].Pod(), workload.StripPod(&pods.Items[i]); !same(got, want) {
						t.Errorf("%s: item %d read back %+v, want %+v", mediaType, i, got, want)
					}
				}
			}},
			{rss, &ReplicaSetList{}, func(o runtime.Object) {
				l := o.(*ReplicaSetList)
				if len(l.Items) != 1 || !same(l.Items[0].ReplicaSet(), workload.StripReplicaSet(&rss.Items[0])) {
					t.Errorf("%s: ReplicaSet list read back %+v", mediaType, l.Items)
				}
			}},
			{ds, &DeploymentList{}, func(o runtime.Object) {
				l := o.(*DeploymentList)
				if len(l.Items) != 1 || !same(l.Items[0].Deployment(), workload.StripDeployment(&ds.Items[0])) {
					t.Errorf("%s: Deployment list read back %+v", mediaType, l.Items)
				}
			}},
		} {
			data, err := runtime.Encode(serializerFor(t, mediaType), c.in)
			if err != nil {
				t.Fatal(err)
			}
			out, _, err := info.Serializer.Decode(data, nil, c.into)
			if err != nil {
				t.Fatalf("%s: decode %T: %v", mediaType, c.into, err)
			}
			c.check(out)
		}
	}
}

// serializerFor encodes the API's own types, as the API server does.
func serializerFor(t *testing.T, mediaType string) runtime.Encoder {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := appsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	info, ok := runtime.SerializerInfoForMediaType(serializer.NewCodecFactory(scheme).SupportedMediaTypes(), mediaType)
	if !ok {
		t.Fatalf("no serializer for %s", mediaType)
	}
	return info.Serializer
}

// TestKeptKindsAreSmall keeps the point of the package: a kept pod and
// ReplicaSet are a fraction of the API's types, which stay whole in
// memory whatever a transform drops.
func TestKeptKindsAreSmall(t *testing.T) {
	if kept, api := unsafe.Sizeof(Pod{}), unsafe.Sizeof(corev1.Pod{}); kept*3 > api {
		t.Errorf("a kept Pod is %d bytes, a corev1.Pod %d: want a third or less", kept, api)
	}
	if kept, api := unsafe.Sizeof(ReplicaSet{}), unsafe.Sizeof(appsv1.ReplicaSet{}); kept*3 > api {
		t.Errorf("a kept ReplicaSet is %d bytes, an appsv1.ReplicaSet %d: want a third or less", kept, api)
	}
	if kept, api := unsafe.Sizeof(Deployment{}), unsafe.Sizeof(appsv1.Deployment{}); kept*3 > api {
		t.Errorf("a kept Deployment is %d bytes, an appsv1.Deployment %d: want a third or less", kept, api)
	}
	t.Logf("kept Pod %d, ReplicaSet %d, Deployment %d bytes", unsafe.Sizeof(Pod{}), unsafe.Sizeof(ReplicaSet{}), unsafe.Sizeof(Deployment{}))
}

// TestDeepCopiesAreDeep: what the cache hands out shares nothing with
// what it keeps.
func TestDeepCopiesAreDeep(t *testing.T) {
	var p Pod
	if err := json.Unmarshal(mustJSON(t, fullPod("web-1")), &p); err != nil {
		t.Fatal(err)
	}
	c := p.DeepCopyObject().(*Pod)
	c.Labels["app"], c.OwnerReferences[0].Name, c.Ready.Status = "x", "x", corev1.ConditionFalse
	if p.Labels["app"] != "web" || p.OwnerReferences[0].Name != "web-abc" || p.Ready.Status != corev1.ConditionTrue {
		t.Error("a Pod's deep copy shares its labels, owners or condition")
	}
	var rs ReplicaSet
	if err := json.Unmarshal(mustJSON(t, fullReplicaSet("web-abc")), &rs); err != nil {
		t.Fatal(err)
	}
	rc := rs.DeepCopyObject().(*ReplicaSet)
	*rc.Replicas, rc.Selector.MatchLabels["app"], rc.Annotations["deployment.kubernetes.io/revision"] = 9, "x", "9"
	if *rs.Replicas != 4 || rs.Selector.MatchLabels["app"] != "web" || rs.Annotations["deployment.kubernetes.io/revision"] != "3" {
		t.Error("a ReplicaSet's deep copy shares its replicas, selector or annotations")
	}
	var d Deployment
	if err := json.Unmarshal(mustJSON(t, fullDeployment("web")), &d); err != nil {
		t.Fatal(err)
	}
	dc := d.DeepCopyObject().(*Deployment)
	*dc.Replicas, dc.Selector.MatchLabels["app"], dc.Images[0], dc.Annotations["team"] = 9, "x", "x", "x"
	if *d.Replicas != 4 || d.Selector.MatchLabels["app"] != "web" || d.Images[0] == "x" || d.Annotations["team"] == "x" {
		t.Error("a Deployment's deep copy shares its replicas, selector, images or annotations")
	}
}

// decodings decodes full, marshalled in protobuf and in JSON, into a new K
// each way, by the name of the encoding.
func decodings[K any, PK interface {
	*K
	Unmarshal([]byte) error
}](t *testing.T, full interface{ Marshal() ([]byte, error) }) map[string]PK {
	t.Helper()
	pb, err := full.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	fromPB, fromJS := PK(new(K)), PK(new(K))
	if err := fromPB.Unmarshal(pb); err != nil {
		t.Fatalf("protobuf: %v", err)
	}
	if err := json.Unmarshal(js, fromJS); err != nil {
		t.Fatalf("JSON: %v", err)
	}
	return map[string]PK{"protobuf": fromPB, "JSON": fromJS}
}

// same compares two objects but for their TypeMeta (which protobuf does
// not carry: the decoder sets it after) and the time zones of their times
// (JSON decodes them in local time).
func same(a, b runtime.Object) bool {
	a, b = a.DeepCopyObject(), b.DeepCopyObject()
	a.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	b.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	return equality.Semantic.DeepEqual(a, b)
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
