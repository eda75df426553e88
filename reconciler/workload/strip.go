package workload

import (
	"maps"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// StripPod is what rollgate's cache keeps of a pod (reconciler/stripped
// holds it in a type of its own): what rollgate reads of it, without the
// rest, which is most of a cached pod (the spec with
// its containers, volumes and tolerations; the container statuses and
// addresses), its annotations and managedFields.
//
// What rollgate reads of a pod, every reader included (the adapters, the
// owner index, the pod watch of the Rollout controller, the Service
// router's wait for labels): its metadata but for its annotations (name,
// namespace, UID, labels, owner references, deletion timestamp) and its
// Ready condition (its status and when it became so); of the status only
// that condition is kept. A pod's annotations are its template's and what
// a mesh, a scraper or a tool adds (a sidecar's status, a restart time),
// often larger than the rest of a stripped pod, and nothing of rollgate
// reads them. rollgate writes pods only with label merge patches and
// deletes them, never with an update of a cached copy, so nothing it drops
// can be written back. TestStrippedPodsObserveTheSame keeps this list
// honest, and PodReadChanged compares what it names.
func StripPod(p *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{TypeMeta: p.TypeMeta, ObjectMeta: p.ObjectMeta}
	out.ManagedFields, out.Annotations = nil, nil
	if ready := readyCondition(p); ready != nil {
		out.Status.Conditions = []corev1.PodCondition{*ready}
	}
	return out
}

// PodReadChanged reports whether what rollgate reads of a pod (StripPod)
// differs between two copies of it. The Rollout controller's pod watch
// passes only such updates: a kubelet reports a starting pod in several
// status writes (scheduled, initialized, running, containers ready,
// ready), and all but the one that makes it Ready would wake its Rollout
// to read the same. A terminating pod counts for nothing but its going
// (Pods.count, available): the status writes of its shutdown wake nothing.
func PodReadChanged(old, cur *corev1.Pod) bool {
	if !maps.Equal(old.Labels, cur.Labels) || !equality.Semantic.DeepEqual(old.OwnerReferences, cur.OwnerReferences) ||
		!old.DeletionTimestamp.Equal(cur.DeletionTimestamp) {
		return true
	}
	if cur.DeletionTimestamp != nil {
		return false
	}
	s0, ok0 := readySince(old)
	s1, ok1 := readySince(cur)
	return ok0 != ok1 || !s0.Equal(s1)
}

// PodCreateWakes reports whether a pod the cache sees for the first time
// wakes its Rollout: only when it is Ready already or terminating (a
// re-list, a controller start). A starting pod, created by its workload's
// controller, counts for nothing a release waits for until it is Ready,
// and becoming Ready wakes its Rollout then (PodReadChanged). Where it
// counts before (a batch of a ReplicaSet that grew back to its size, a
// DaemonSet's new pod on a node), it is followed by its readiness or, if
// it never becomes Ready, by the poll of a moving workload.
func PodCreateWakes(p *corev1.Pod) bool {
	_, ready := readySince(p)
	return ready || p.DeletionTimestamp != nil
}

// readySince is when pod p became Ready, and false when it is not Ready:
// all that rollgate reads of its Ready condition (available,
// becomesAvailable). A pod not Ready is not Ready whether its condition
// is missing or False, whenever it became so: the kubelet's first status
// of a starting pod (Ready False) wakes no Rollout.
func readySince(p *corev1.Pod) (time.Time, bool) {
	ready := readyCondition(p)
	if ready == nil || ready.Status != corev1.ConditionTrue {
		return time.Time{}, false
	}
	return ready.LastTransitionTime.Time, true
}

// readyCondition is the pod's Ready condition, nil when it has none.
func readyCondition(p *corev1.Pod) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == corev1.PodReady {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// cachedRevisionAnnotation holds, on a ReplicaSet or Deployment in the
// cache only, the Revision of the pod template StripReplicaSet or
// StripDeployment dropped. It is never written to the API server:
// rollgate writes ReplicaSets only by creating them (from the Deployment's
// template as the API server has it) and by merge patches of their
// replicas, and Deployments only by merge patches, each computed between
// two copies that both carry it.
const cachedRevisionAnnotation = labelPrefix + "cached-template-revision"

// StripReplicaSet is what rollgate's cache keeps of a ReplicaSet
// (reconciler/stripped holds it in a type of its own): its metadata,
// replicas, selector and minReadySeconds, with the pod template (most of a
// ReplicaSet, the same bytes as its Deployment's template) replaced by the
// template's Revision, which is all rollgate reads of it
// (ReplicaSetRevision). The status goes: rollgate counts a ReplicaSet's
// pods itself. A revert, which needs the stable template itself, reads the
// ReplicaSet from the API server. TestStrippedPodsObserveTheSame keeps
// this honest for the adapters, and ReplicaSetReadChanged compares what
// it keeps.
//
// Stripping a stripped ReplicaSet changes nothing: one with no containers
// keeps the revision it has.
func StripReplicaSet(rs *appsv1.ReplicaSet) *appsv1.ReplicaSet {
	out := &appsv1.ReplicaSet{TypeMeta: rs.TypeMeta, ObjectMeta: rs.ObjectMeta}
	out.ManagedFields = nil
	out.Spec.Replicas = rs.Spec.Replicas
	out.Spec.MinReadySeconds = rs.Spec.MinReadySeconds
	out.Spec.Selector = rs.Spec.Selector
	if len(rs.Spec.Template.Spec.Containers) > 0 {
		out.Annotations = maps.Clone(rs.Annotations)
		if out.Annotations == nil {
			out.Annotations = map[string]string{}
		}
		out.Annotations[cachedRevisionAnnotation] = Revision(&rs.Spec.Template)
	}
	return out
}

// lastAppliedAnnotation is where `kubectl apply` and Argo CD's
// client-side apply keep a second copy of the object they applied.
const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// StripDeployment is what rollgate's cache keeps of a Deployment
// (reconciler/stripped holds it in a type of its own): its metadata but
// for managedFields and a kubectl last-applied configuration; of its spec
// the replicas, selector, minReadySeconds, paused and strategy; of its pod
// template only what rollgate reads, the template's Revision (in
// cachedRevisionAnnotation) and its containers' names and images (Images);
// of its status only the counts that say whether its controller finished
// (deploymentComplete, DeploymentReadChanged), without the conditions,
// which the Deployment controller rewrites with every status write.
//
// The template is most of a Deployment, the same bytes as its newest
// ReplicaSet's. What needs the whole of it, the ReplicaSet of a new
// revision and the canary Deployment of the canary style, reads the
// Deployment from the API server (deployment.full). rollgate writes
// Deployments only with merge patches computed between two copies that
// both went through here (base.update), so nothing dropped is written
// back: TestCacheStripsManagedFields checks that the API server keeps the
// template, the conditions and the annotation after such a write.
//
// Stripping a stripped Deployment changes nothing: one whose template has
// no labels (an API server refuses such a Deployment: its selector must
// match them) keeps the revision it has.
func StripDeployment(d *appsv1.Deployment) *appsv1.Deployment {
	out := &appsv1.Deployment{TypeMeta: d.TypeMeta, ObjectMeta: d.ObjectMeta}
	out.ManagedFields = nil
	s := d.Spec
	out.Spec = appsv1.DeploymentSpec{Replicas: s.Replicas, Selector: s.Selector, MinReadySeconds: s.MinReadySeconds, Paused: s.Paused, Strategy: s.Strategy}
	st := d.Status
	out.Status = appsv1.DeploymentStatus{ObservedGeneration: st.ObservedGeneration, Replicas: st.Replicas, UpdatedReplicas: st.UpdatedReplicas, AvailableReplicas: st.AvailableReplicas}
	if stripped(d) {
		out.Spec.Template = *s.Template.DeepCopy()
		return out
	}
	out.Annotations = maps.Clone(d.Annotations)
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	delete(out.Annotations, lastAppliedAnnotation)
	out.Annotations[cachedRevisionAnnotation] = Revision(&s.Template)
	out.Spec.Template.Spec = imagesOnly(&s.Template.Spec)
	return out
}

// imagesOnly is a pod spec with spec's containers and init containers,
// each with only its name and image (what Images reads), in the order of
// their names.
func imagesOnly(spec *corev1.PodSpec) corev1.PodSpec {
	return corev1.PodSpec{InitContainers: NamesAndImages(spec.InitContainers), Containers: NamesAndImages(spec.Containers)}
}

// NamesAndImages is cs with only their names and images, in the order of
// their names; nil for none.
func NamesAndImages(cs []corev1.Container) []corev1.Container {
	var out []corev1.Container
	for _, c := range cs {
		out = append(out, corev1.Container{Name: c.Name, Image: c.Image})
	}
	slices.SortFunc(out, func(a, b corev1.Container) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// stripped reports whether d is what StripDeployment made: it carries
// cachedRevisionAnnotation and a template without labels.
func stripped(d *appsv1.Deployment) bool {
	_, ok := d.Annotations[cachedRevisionAnnotation]
	return ok && len(d.Spec.Template.Labels) == 0
}

// DeploymentRevision is the Revision of d's pod template, read from the
// template or, for a Deployment from the cache, from what StripDeployment
// kept of it.
func DeploymentRevision(d *appsv1.Deployment) string {
	if stripped(d) {
		return d.Annotations[cachedRevisionAnnotation]
	}
	return Revision(&d.Spec.Template)
}

// TemplateRevision is the Revision of obj's pod template (PodTemplate),
// for a Deployment as DeploymentRevision reads it.
func TemplateRevision(obj client.Object) (string, error) {
	if d, ok := obj.(*appsv1.Deployment); ok {
		return DeploymentRevision(d), nil
	}
	tpl, err := PodTemplate(obj)
	if err != nil {
		return "", err
	}
	return Revision(tpl), nil
}

// ReplicaSetReadChanged reports whether what rollgate reads of a
// ReplicaSet (StripReplicaSet) differs between two copies of it. The
// Rollout controller's ReplicaSet watch passes only such updates: the
// ReplicaSet controller writes a status for every pod that starts or
// becomes ready, and rollgate counts those pods from their own events.
func ReplicaSetReadChanged(old, cur *appsv1.ReplicaSet) bool {
	return metadataReadChanged(&old.ObjectMeta, &cur.ObjectMeta) ||
		ptr.Deref(old.Spec.Replicas, 1) != ptr.Deref(cur.Spec.Replicas, 1) || old.Spec.MinReadySeconds != cur.Spec.MinReadySeconds ||
		!equality.Semantic.DeepEqual(old.Spec.Selector, cur.Spec.Selector) || ReplicaSetRevision(old) != ReplicaSetRevision(cur)
}

// DeploymentReadChanged reports whether what rollgate reads of a
// Deployment differs between two copies of it: its metadata, its spec
// (which moves its generation) and the status fields that say whether the
// Deployment controller finished (deploymentComplete). The Deployment
// controller writes a status for every pod that starts or becomes ready,
// with conditions whose times move each time; those writes wake no Rollout
// unless a field rollgate reads moved.
//
// While a release holds the Deployment (rollgate's control annotation on
// both copies) rollgate reads none of its status: it counts the pods
// itself, and each of those status writes follows a pod event that woke
// the Rollout already. Except with minReadySeconds: a pod becomes
// available that long after it is ready, with no pod event, and the
// Deployment controller's count of available pods is what tells.
func DeploymentReadChanged(old, cur *appsv1.Deployment) bool {
	if metadataReadChanged(&old.ObjectMeta, &cur.ObjectMeta) || old.Generation != cur.Generation {
		return true
	}
	if held(old) && held(cur) && cur.Spec.MinReadySeconds == 0 {
		return false
	}
	o, c := old.Status, cur.Status
	return o.ObservedGeneration != c.ObservedGeneration || o.Replicas != c.Replicas ||
		o.UpdatedReplicas != c.UpdatedReplicas || o.AvailableReplicas != c.AvailableReplicas
}

// held reports whether obj carries rollgate's control annotation.
func held(obj client.Object) bool {
	_, ok := obj.GetAnnotations()[v1alpha1.AnnotationControl]
	return ok
}

// metadataReadChanged reports whether the metadata rollgate reads of an
// object moved: labels, annotations, owners and deletion.
func metadataReadChanged(old, cur *metav1.ObjectMeta) bool {
	return !maps.Equal(old.Labels, cur.Labels) || !maps.Equal(old.Annotations, cur.Annotations) ||
		!equality.Semantic.DeepEqual(old.OwnerReferences, cur.OwnerReferences) || !old.DeletionTimestamp.Equal(cur.DeletionTimestamp)
}

// ReplicaSetRevision is the Revision of rs's pod template, read from the
// template or, for a ReplicaSet from the cache, from what StripReplicaSet
// kept of it.
func ReplicaSetRevision(rs *appsv1.ReplicaSet) string {
	if rev, ok := rs.Annotations[cachedRevisionAnnotation]; ok && len(rs.Spec.Template.Spec.Containers) == 0 {
		return rev
	}
	return Revision(&rs.Spec.Template)
}
