package rollout

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// TestVerificationTemplate: a step whose traffic is a weight gets one
// metric per verifying traffic routing, passing within the tolerance of the
// step's declared weight, with the CRD's defaults when fields are unset; a
// header-match step and a Rollout without verify get none.
func TestVerificationTemplate(t *testing.T) {
	one := intstr.FromInt32(1)
	ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web"}}
	ro.Spec.Strategy.Canary = &v1alpha1.CanaryStrategy{
		Steps: []v1alpha1.CanaryStep{
			{Replicas: &one, TrafficRoutingStrategy: v1alpha1.TrafficRoutingStrategy{Traffic: ptr.To("30%")}},
			{Replicas: &one, TrafficRoutingStrategy: v1alpha1.TrafficRoutingStrategy{Matches: []v1alpha1.HttpRouteMatch{{}}}},
		},
		TrafficRoutings: []v1alpha1.TrafficRoutingRef{{
			Service: "web", Gateway: &v1alpha1.GatewayTrafficRouting{HTTPRouteName: ptr.To("web")},
		}},
	}
	if got := verification(ro, 1); got != nil {
		t.Fatalf("without verify: %+v, want none", got)
	}
	ro.Spec.Strategy.Canary.TrafficRoutings[0].Verify = &v1alpha1.TrafficVerification{
		Prometheus: v1alpha1.PrometheusMetric{Address: "http://prom:9090", Query: "share"},
		Tolerance:  ptr.To(int32(4)),
	}
	got := verification(ro, 1)
	if got == nil || got.Name != VerificationTemplate || len(got.Spec.Metrics) != 1 {
		t.Fatalf("step 1: %+v, want one metric of template %s", got, VerificationTemplate)
	}
	m := got.Spec.Metrics[0]
	if m.SuccessCondition != "result[0] >= 26 && result[0] <= 34" {
		t.Errorf("condition %q, want 30%% ± 4", m.SuccessCondition)
	}
	if m.Name != "traffic share of web (declared 30%, tolerance 4)" {
		t.Errorf("metric name %q", m.Name)
	}
	if m.InitialDelay.Duration != 30*time.Second || m.Interval.Duration != 10*time.Second || *m.Count != 3 || m.FailureLimit != 1 {
		t.Errorf("defaults: initialDelay %v interval %v count %d failureLimit %d, want 30s 10s 3 1",
			m.InitialDelay.Duration, m.Interval.Duration, *m.Count, m.FailureLimit)
	}
	if m.Provider.Prometheus == nil || m.Provider.Prometheus.Query != "share" {
		t.Errorf("provider %+v, want the routing's Prometheus query", m.Provider)
	}
	if got := verification(ro, 2); got != nil {
		t.Errorf("a header-match step: %+v, want none", got)
	}
}
