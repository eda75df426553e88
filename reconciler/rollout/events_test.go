package rollout

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/rollgate/rollgate/reconciler/workload"
)

// The pod watch's creation filter: a starting pod's creation wakes no
// Rollout, a Ready one's does, and the filter leaves the other events and
// other kinds to the watch's other predicates.
func TestPodCreationsThatWake(t *testing.T) {
	p := createdIf(workload.PodCreateWakes)
	starting := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1"}}
	ready := starting.DeepCopy()
	ready.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if p.Create(event.CreateEvent{Object: starting}) {
		t.Error("a starting pod's creation passes, want filtered")
	}
	if !p.Create(event.CreateEvent{Object: ready}) {
		t.Error("a Ready pod's creation is filtered, want passed")
	}
	if !p.Update(event.UpdateEvent{ObjectOld: starting, ObjectNew: ready}) || !p.Delete(event.DeleteEvent{Object: starting}) {
		t.Error("an update or a deletion is filtered, want passed (PodReadChanged decides)")
	}
	if !p.Create(event.CreateEvent{Object: &corev1.Service{}}) {
		t.Error("another kind's creation is filtered, want passed")
	}
}
