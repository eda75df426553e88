package rollout

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/rollgate/rollgate/reconciler/workload"
	"github.com/rollgate/rollgate/traffic"
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

// The EndpointSlice watch: a canary Service's slice wakes its Rollout when
// it comes with a ready endpoint, when its first ready endpoint comes or
// its last one goes, and when its labels (whose slice it is) change; not
// for the slice rewrites of canary pods that come, become ready or go
// while another endpoint serves.
func TestSliceEventsThatWake(t *testing.T) {
	ready := func(addrs ...bool) *discoveryv1.EndpointSlice {
		sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "web-canary-x", Labels: map[string]string{traffic.LabelCanaryOf: "web"}}}
		for _, r := range addrs {
			sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: &r}})
		}
		return sl
	}
	unset := ready()
	unset.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.2"}}}
	relabelled := ready(true)
	relabelled.Labels[traffic.LabelCanaryOf] = "api"

	created := createdIf(traffic.SliceServes)
	for _, c := range []struct {
		name string
		sl   *discoveryv1.EndpointSlice
		want bool
	}{
		{"empty", ready(), false},
		{"an endpoint not ready", ready(false), false},
		{"a ready endpoint", ready(false, true), true},
		{"an endpoint without a ready condition (ready, as the API says)", unset, true},
	} {
		if got := created.Create(event.CreateEvent{Object: c.sl}); got != c.want {
			t.Errorf("created %s: wakes %v, want %v", c.name, got, c.want)
		}
	}
	for _, c := range []struct {
		name     string
		old, cur *discoveryv1.EndpointSlice
		want     bool
	}{
		{"a pod comes, not ready", ready(), ready(false), false},
		{"the first ready endpoint", ready(false), ready(true), true},
		{"another ready endpoint", ready(true), ready(true, true), false},
		{"one of two ready endpoints goes", ready(true, true), ready(true, false), false},
		{"the last ready endpoint goes", ready(true), ready(false), true},
		{"another canary Service's", ready(true), relabelled, true},
	} {
		if got := sliceReadChanged(c.old, c.cur); got != c.want {
			t.Errorf("%s: wakes %v, want %v", c.name, got, c.want)
		}
	}
}
