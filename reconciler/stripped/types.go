package stripped

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/rollgate/rollgate/reconciler/workload"
)

// Pod is what the cache keeps of a pod: its metadata and its Ready
// condition (workload.StripPod), in 272 bytes where a corev1.Pod is 1,240
// with nothing in its spec. It decodes from a whole pod, in protobuf (what
// the API server sends a typed client) or JSON, and keeps its annotations
// until the cache's transform (dropAnnotations): a streamed list's last
// event is a bookmark marked by an annotation, which the informer reads
// before the transform.
type Pod struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	// Ready is the pod's Ready condition, nil when it has none.
	Ready *corev1.PodCondition
}

// PodList is a list of Pods, as the informer lists them.
type PodList struct {
	metav1.TypeMeta
	metav1.ListMeta
	Items []Pod
}

// ReplicaSet is what the cache keeps of a ReplicaSet
// (workload.StripReplicaSet): its metadata, with the Revision of its pod
// template in an annotation of the cache's own, its replicas, selector and
// minReadySeconds, in 288 bytes where an appsv1.ReplicaSet is 1,168
// with nothing in its template.
type ReplicaSet struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	Replicas        *int32
	MinReadySeconds int32
	Selector        *metav1.LabelSelector
}

// ReplicaSetList is a list of ReplicaSets, as the informer lists them.
type ReplicaSetList struct {
	metav1.TypeMeta
	metav1.ListMeta
	Items []ReplicaSet
}

// Deployment is what the cache keeps of a Deployment
// (workload.StripDeployment): its metadata, with the Revision of its pod
// template in an annotation of the cache's own, the spec fields rollgate
// reads, its containers' images (workload.Images) and the status counts,
// in 360 bytes where an appsv1.Deployment is 1,232 with nothing in its
// template.
type Deployment struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	Replicas        *int32
	Selector        *metav1.LabelSelector
	MinReadySeconds int32
	Paused          bool
	Strategy        appsv1.DeploymentStrategy
	// Images are workload.Images of the pod template.
	Images []string
	Status DeploymentStatus
}

// DeploymentStatus is what the cache keeps of a Deployment's status.
type DeploymentStatus struct {
	ObservedGeneration                           int64
	Replicas, UpdatedReplicas, AvailableReplicas int32
}

// DeploymentList is a list of Deployments, as the informer lists them.
type DeploymentList struct {
	metav1.TypeMeta
	metav1.ListMeta
	Items []Deployment
}

// fromPod keeps what rollgate reads of p.
func fromPod(p *corev1.Pod) Pod {
	s := workload.StripPod(p)
	out := Pod{TypeMeta: p.TypeMeta, ObjectMeta: s.ObjectMeta}
	out.Annotations = p.Annotations
	if c := s.Status.Conditions; len(c) == 1 {
		out.Ready = &c[0]
	}
	return out
}

// Pod is the corev1.Pod that workload.StripPod makes of the pod p was
// decoded from, once its annotations are dropped (the cache's transform).
// It shares p's metadata.
func (p *Pod) Pod() *corev1.Pod {
	out := &corev1.Pod{}
	p.into(out)
	return out
}

// into sets out to p.Pod().
func (p *Pod) into(out *corev1.Pod) {
	*out = corev1.Pod{TypeMeta: p.TypeMeta, ObjectMeta: p.ObjectMeta}
	if p.Ready != nil {
		out.Status.Conditions = []corev1.PodCondition{*p.Ready}
	}
}

// fromReplicaSet keeps what rollgate reads of rs.
func fromReplicaSet(rs *appsv1.ReplicaSet) ReplicaSet {
	s := workload.StripReplicaSet(rs)
	return ReplicaSet{TypeMeta: rs.TypeMeta, ObjectMeta: s.ObjectMeta,
		Replicas: s.Spec.Replicas, MinReadySeconds: s.Spec.MinReadySeconds, Selector: s.Spec.Selector}
}

// ReplicaSet is the appsv1.ReplicaSet that workload.StripReplicaSet makes
// of the ReplicaSet rs was decoded from. It shares rs's metadata.
func (rs *ReplicaSet) ReplicaSet() *appsv1.ReplicaSet {
	out := &appsv1.ReplicaSet{}
	rs.into(out)
	return out
}

// into sets out to rs.ReplicaSet().
func (rs *ReplicaSet) into(out *appsv1.ReplicaSet) {
	*out = appsv1.ReplicaSet{TypeMeta: rs.TypeMeta, ObjectMeta: rs.ObjectMeta}
	out.Spec.Replicas, out.Spec.MinReadySeconds, out.Spec.Selector = rs.Replicas, rs.MinReadySeconds, rs.Selector
}

// fromDeployment keeps what rollgate reads of d.
func fromDeployment(d *appsv1.Deployment) Deployment {
	s := workload.StripDeployment(d)
	st := s.Status
	return Deployment{TypeMeta: d.TypeMeta, ObjectMeta: s.ObjectMeta,
		Replicas: s.Spec.Replicas, Selector: s.Spec.Selector, MinReadySeconds: s.Spec.MinReadySeconds,
		Paused: s.Spec.Paused, Strategy: s.Spec.Strategy, Images: workload.Images(&s.Spec.Template),
		Status: DeploymentStatus{ObservedGeneration: st.ObservedGeneration, Replicas: st.Replicas,
			UpdatedReplicas: st.UpdatedReplicas, AvailableReplicas: st.AvailableReplicas}}
}

// Deployment is the appsv1.Deployment that workload.StripDeployment makes
// of the Deployment d was decoded from. It shares d's metadata.
func (d *Deployment) Deployment() *appsv1.Deployment {
	out := &appsv1.Deployment{}
	d.into(out)
	return out
}

// into sets out to d.Deployment(): the pod template's containers come
// back from Images, each with its name and image.
func (d *Deployment) into(out *appsv1.Deployment) {
	*out = appsv1.Deployment{TypeMeta: d.TypeMeta, ObjectMeta: d.ObjectMeta}
	out.Spec = appsv1.DeploymentSpec{Replicas: d.Replicas, Selector: d.Selector, MinReadySeconds: d.MinReadySeconds,
		Paused: d.Paused, Strategy: d.Strategy}
	var init, main []corev1.Container
	for _, img := range d.Images {
		rest, isInit := strings.CutPrefix(img, "init:")
		name, image, _ := strings.Cut(rest, "=")
		if isInit {
			init = append(init, corev1.Container{Name: name, Image: image})
		} else {
			main = append(main, corev1.Container{Name: name, Image: image})
		}
	}
	spec := &out.Spec.Template.Spec
	spec.InitContainers, spec.Containers = workload.NamesAndImages(init), workload.NamesAndImages(main)
	st := d.Status
	out.Status = appsv1.DeploymentStatus{ObservedGeneration: st.ObservedGeneration, Replicas: st.Replicas,
		UpdatedReplicas: st.UpdatedReplicas, AvailableReplicas: st.AvailableReplicas}
}

// Reset, Unmarshal and UnmarshalJSON decode each kind from the whole
// object in protobuf (what the API server sends a typed client) or JSON,
// keeping what fromPod and fromReplicaSet keep.

func (p *Pod) Reset() { *p = Pod{} }

func (p *Pod) Unmarshal(data []byte) error {
	return fromProto(data, func(f *corev1.Pod) { *p = fromPod(f) })
}

func (p *Pod) UnmarshalJSON(data []byte) error {
	return fromJSON(data, func(f *corev1.Pod) { *p = fromPod(f) })
}

func (l *PodList) Reset() { *l = PodList{} }

func (l *PodList) Unmarshal(data []byte) error { return fromProto(data, l.fill) }

func (l *PodList) UnmarshalJSON(data []byte) error { return fromJSON(data, l.fill) }

func (l *PodList) fill(full *corev1.PodList) {
	*l = PodList{TypeMeta: full.TypeMeta, ListMeta: full.ListMeta, Items: make([]Pod, len(full.Items))}
	for i := range full.Items {
		l.Items[i] = fromPod(&full.Items[i])
	}
}

func (rs *ReplicaSet) Reset() { *rs = ReplicaSet{} }

func (rs *ReplicaSet) Unmarshal(data []byte) error {
	return fromProto(data, func(f *appsv1.ReplicaSet) { *rs = fromReplicaSet(f) })
}

func (rs *ReplicaSet) UnmarshalJSON(data []byte) error {
	return fromJSON(data, func(f *appsv1.ReplicaSet) { *rs = fromReplicaSet(f) })
}

func (l *ReplicaSetList) Reset() { *l = ReplicaSetList{} }

func (l *ReplicaSetList) Unmarshal(data []byte) error { return fromProto(data, l.fill) }

func (l *ReplicaSetList) UnmarshalJSON(data []byte) error { return fromJSON(data, l.fill) }

func (l *ReplicaSetList) fill(full *appsv1.ReplicaSetList) {
	*l = ReplicaSetList{TypeMeta: full.TypeMeta, ListMeta: full.ListMeta, Items: make([]ReplicaSet, len(full.Items))}
	for i := range full.Items {
		l.Items[i] = fromReplicaSet(&full.Items[i])
	}
}

// fromProto decodes data, in protobuf, into a new T and hands it to keep.
func fromProto[T any, P interface {
	*T
	Unmarshal([]byte) error
}](data []byte, keep func(P)) error {
	full := P(new(T))
	if err := full.Unmarshal(data); err != nil {
		return err
	}
	keep(full)
	return nil
}

// fromJSON decodes data, in JSON, into a new T and hands it to keep.
func fromJSON[T any](data []byte, keep func(*T)) error {
	full := new(T)
	if err := json.Unmarshal(data, full); err != nil {
		return err
	}
	keep(full)
	return nil
}

func (d *Deployment) Reset() { *d = Deployment{} }

func (d *Deployment) Unmarshal(data []byte) error {
	return fromProto(data, func(f *appsv1.Deployment) { *d = fromDeployment(f) })
}

func (d *Deployment) UnmarshalJSON(data []byte) error {
	return fromJSON(data, func(f *appsv1.Deployment) { *d = fromDeployment(f) })
}

func (l *DeploymentList) Reset() { *l = DeploymentList{} }

func (l *DeploymentList) Unmarshal(data []byte) error { return fromProto(data, l.fill) }

func (l *DeploymentList) UnmarshalJSON(data []byte) error { return fromJSON(data, l.fill) }

func (l *DeploymentList) fill(full *appsv1.DeploymentList) {
	*l = DeploymentList{TypeMeta: full.TypeMeta, ListMeta: full.ListMeta, Items: make([]Deployment, len(full.Items))}
	for i := range full.Items {
		l.Items[i] = fromDeployment(&full.Items[i])
	}
}

// The deep copies the cache makes of what it hands out.

func (p *Pod) DeepCopyObject() runtime.Object {
	out := &Pod{TypeMeta: p.TypeMeta}
	p.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if p.Ready != nil {
		out.Ready = p.Ready.DeepCopy()
	}
	return out
}

func (l *PodList) DeepCopyObject() runtime.Object {
	out := &PodList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]Pod, len(l.Items))
		for i := range l.Items {
			out.Items[i] = *l.Items[i].DeepCopyObject().(*Pod)
		}
	}
	return out
}

func (rs *ReplicaSet) DeepCopyObject() runtime.Object {
	out := &ReplicaSet{TypeMeta: rs.TypeMeta, MinReadySeconds: rs.MinReadySeconds}
	rs.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if rs.Replicas != nil {
		n := *rs.Replicas
		out.Replicas = &n
	}
	if rs.Selector != nil {
		out.Selector = rs.Selector.DeepCopy()
	}
	return out
}

func (l *ReplicaSetList) DeepCopyObject() runtime.Object {
	out := &ReplicaSetList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]ReplicaSet, len(l.Items))
		for i := range l.Items {
			out.Items[i] = *l.Items[i].DeepCopyObject().(*ReplicaSet)
		}
	}
	return out
}

func (d *Deployment) DeepCopyObject() runtime.Object {
	out := &Deployment{TypeMeta: d.TypeMeta, MinReadySeconds: d.MinReadySeconds, Paused: d.Paused, Status: d.Status}
	d.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if d.Replicas != nil {
		n := *d.Replicas
		out.Replicas = &n
	}
	if d.Selector != nil {
		out.Selector = d.Selector.DeepCopy()
	}
	d.Strategy.DeepCopyInto(&out.Strategy)
	out.Images = slices.Clone(d.Images)
	return out
}

func (l *DeploymentList) DeepCopyObject() runtime.Object {
	out := &DeploymentList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]Deployment, len(l.Items))
		for i := range l.Items {
			out.Items[i] = *l.Items[i].DeepCopyObject().(*Deployment)
		}
	}
	return out
}

// addToScheme registers the stripped kinds under the API's own kinds (v1
// Pod, apps/v1 ReplicaSet and Deployment), so that a cache built on the scheme lists and
// watches those resources and decodes them into these types.
func addToScheme(s *runtime.Scheme) error {
	core, apps := corev1.SchemeGroupVersion, appsv1.SchemeGroupVersion
	s.AddKnownTypeWithName(core.WithKind("Pod"), &Pod{})
	s.AddKnownTypeWithName(core.WithKind("PodList"), &PodList{})
	s.AddKnownTypeWithName(apps.WithKind("ReplicaSet"), &ReplicaSet{})
	s.AddKnownTypeWithName(apps.WithKind("ReplicaSetList"), &ReplicaSetList{})
	s.AddKnownTypeWithName(apps.WithKind("Deployment"), &Deployment{})
	s.AddKnownTypeWithName(apps.WithKind("DeploymentList"), &DeploymentList{})
	metav1.AddToGroupVersion(s, core)
	metav1.AddToGroupVersion(s, apps)
	if _, err := s.New(core.WithKind("Pod")); err != nil {
		return fmt.Errorf("stripped scheme: %w", err)
	}
	return nil
}
