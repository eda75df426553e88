package traffic_test

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/traffic"
)

// heldAnnotations records a step of 30% from v1 to v2 for Service web.
func heldAnnotations(t *testing.T) map[string]string {
	raw, err := json.Marshal(traffic.Held{Rollout: "web", CanaryWeight: 30, StableService: "web",
		CanaryService: "web-canary", StableRevision: "v1", CanaryRevision: "v2"})
	must(t, err)
	return map[string]string{traffic.AnnotationHeld: string(raw)}
}

// TestAdmitHTTPRoute: the verdict on each kind of update of a held route,
// and the step in what is stored.
func TestAdmitHTTPRoute(t *testing.T) {
	git := func(weight int32) *gatewayv1.HTTPRoute {
		r := &gatewayv1.HTTPRoute{}
		r.Name, r.Namespace = "web", "ns"
		r.Spec.Rules = []gatewayv1.HTTPRouteRule{ruleTo(backend("web", ptr.To(weight)))}
		return r
	}
	held := git(1)
	held.Annotations = heldAnnotations(t)
	if v, err := traffic.AdmitHTTPRoute(held.DeepCopy(), held); err != nil || v != traffic.Reasserted {
		t.Fatalf("first admission: %s %v", v, err)
	}
	relabelled := held.DeepCopy()
	relabelled.Labels = map[string]string{"team": "web"}
	tests := []struct {
		name   string
		old    *gatewayv1.HTTPRoute
		update *gatewayv1.HTTPRoute
		want   traffic.Verdict
		stored string
	}{
		{"not held", git(1), git(1), traffic.NotHeld, "web=1"},
		{"Git's rules written back", held, git(1), traffic.Reasserted, "web=70,web-canary=30"},
		{"new rules from Git", held, git(2), traffic.Redeclared, "web=140,web-canary=60"},
		{"another field changed", held, relabelled, traffic.Kept, "web=70,web-canary=30"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			update := tc.update.DeepCopy()
			v, err := traffic.AdmitHTTPRoute(tc.old.DeepCopy(), update)
			must(t, err)
			if v != tc.want {
				t.Errorf("verdict %q, want %q", v, tc.want)
			}
			if got := w(update.Spec.Rules[0]); got != tc.stored {
				t.Errorf("stored weights %s, want %s", got, tc.stored)
			}
		})
	}
}

// TestAdmitService: a selector written back from Git is narrowed again.
func TestAdmitService(t *testing.T) {
	old := &corev1.Service{}
	old.Annotations = heldAnnotations(t)
	old.Spec.Selector = map[string]string{"app": "web"}
	if _, err := traffic.AdmitService(old.DeepCopy(), old); err != nil {
		t.Fatal(err)
	}
	update := &corev1.Service{}
	update.Spec.Selector = map[string]string{"app": "web", "tier": "front"}
	v, err := traffic.AdmitService(old, update)
	must(t, err)
	if v != traffic.Redeclared || update.Spec.Selector[v1alpha1.LabelRevision] != "v1" || update.Spec.Selector["tier"] != "front" {
		t.Errorf("verdict %s, selector %v: want the new selector narrowed to v1", v, update.Spec.Selector)
	}
}
