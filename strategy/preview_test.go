package strategy_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/strategy"
)

func TestPreview(t *testing.T) {
	steps := []v1alpha1.CanaryStep{
		{TrafficRoutingStrategy: v1alpha1.TrafficRoutingStrategy{Traffic: ptr.To("5%")}, Replicas: ptr.To(intstr.FromInt32(1)), Pause: &v1alpha1.RolloutPause{}},
		{TrafficRoutingStrategy: v1alpha1.TrafficRoutingStrategy{Traffic: ptr.To("40%")}, Replicas: ptr.To(intstr.FromString("40%"))},
		{TrafficRoutingStrategy: v1alpha1.TrafficRoutingStrategy{Traffic: ptr.To("100%")}, Replicas: ptr.To(intstr.FromString("100%"))},
	}
	routes := []v1alpha1.TrafficRoutingRef{{Service: "web", Gateway: &v1alpha1.GatewayTrafficRouting{HTTPRouteName: ptr.To("web")}}}
	cases := []struct {
		name           string
		strategy       v1alpha1.RolloutStrategy
		canary, stable []int32
	}{
		{"canary replaces stable pods", v1alpha1.RolloutStrategy{Canary: &v1alpha1.CanaryStrategy{Steps: steps, TrafficRoutings: routes}},
			[]int32{1, 4, 10}, []int32{9, 6, 0}},
		{"extra workload keeps them", v1alpha1.RolloutStrategy{Canary: &v1alpha1.CanaryStrategy{Steps: steps, TrafficRoutings: routes, EnableExtraWorkloadForCanary: true}},
			[]int32{1, 4, 10}, []int32{10, 10, 10}},
		{"blue-green keeps them", v1alpha1.RolloutStrategy{BlueGreen: &v1alpha1.BlueGreenStrategy{Steps: steps, TrafficRoutings: routes}},
			[]int32{1, 4, 10}, []int32{10, 10, 10}},
	}
	for _, tc := range cases {
		got, err := strategy.Preview(&v1alpha1.RolloutSpec{Strategy: tc.strategy}, 10)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for i, s := range got {
			if s.Replicas != tc.canary[i] || s.Stable != tc.stable[i] {
				t.Errorf("%s: step %d has %d new and %d old pods, want %d and %d", tc.name, i+1, s.Replicas, s.Stable, tc.canary[i], tc.stable[i])
			}
		}
		if !got[0].Gate || got[1].Gate || got[0].Traffic.Weight != 5 {
			t.Errorf("%s: step 1 = %+v", tc.name, got[0])
		}
	}
}
