package luascripts

import (
	"context"
	"testing"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

func benchVirtualServiceInput(b *testing.B, step v1alpha1.TrafficRoutingStrategy) CustomInput {
	spec := map[string]any{}
	tc, _, err := loadCase("testdata/trafficrouting/networking.istio.io/VirtualService/weights.yaml", NewLibrary(), nil)
	if err != nil {
		b.Fatal(err)
	}
	spec = tc.Original["spec"].(map[string]any)
	in, err := NewCustomInput(ObjectData{Spec: spec}, step, Target{StableService: "echoserver", CanaryService: "echoserver-canary"})
	if err != nil {
		b.Fatal(err)
	}
	return in
}

// BenchmarkRunVirtualService measures one run of the built-in
// VirtualService script on a weight step: a fresh Lua state, the input
// conversion, the script and the result conversion.
func BenchmarkRunVirtualService(b *testing.B) {
	traffic := "40%"
	in := benchVirtualServiceInput(b, v1alpha1.TrafficRoutingStrategy{Traffic: &traffic})
	s, err := NewLibrary().Resolve("VirtualService", "networking.istio.io", nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := (Runner{}).RunCustom(ctx, s, in); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRunVirtualServiceMatches is the same on a match step.
func BenchmarkRunVirtualServiceMatches(b *testing.B) {
	in := benchVirtualServiceInput(b, v1alpha1.TrafficRoutingStrategy{
		Matches: []v1alpha1.HttpRouteMatch{{Headers: []gatewayv1.HTTPHeaderMatch{{Name: "X-Canary", Value: "yes"}}}},
	})
	s, err := NewLibrary().Resolve("VirtualService", "networking.istio.io", nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := (Runner{}).RunCustom(ctx, s, in); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRunNginx measures one run of the built-in nginx dialect.
func BenchmarkRunNginx(b *testing.B) {
	s, err := NewLibrary().ResolveIngress("nginx", nil)
	if err != nil {
		b.Fatal(err)
	}
	in := IngressInput{Annotations: map[string]string{"nginx.ingress.kubernetes.io/rewrite-target": "/"}, Weight: 20}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := (Runner{}).RunIngress(ctx, s, in); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEmptyScript measures the fixed cost of a run.
func BenchmarkEmptyScript(b *testing.B) {
	s, err := NewScript("empty", "return {}")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := (Runner{}).RunIngress(ctx, s, IngressInput{}); err != nil {
			b.Fatal(err)
		}
	}
}
