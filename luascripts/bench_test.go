package luascripts

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

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
// VirtualService Lua script on a weight step: a fresh Lua state, the input
// conversion, the script and the result conversion.
func BenchmarkRunVirtualService(b *testing.B) {
	traffic := "40%"
	in := benchVirtualServiceInput(b, v1alpha1.TrafficRoutingStrategy{Traffic: &traffic})
	benchCustom(b, builtinVirtualService(b).luaOnly(), Runner{}, in, "")
}

// BenchmarkRunVirtualServicePooled is one evaluation of the built-in
// VirtualService on a weight step as the controller runs it: the Go
// implementation (native_istio.go; the Lua script runs only for inputs
// it leaves to it), with the routing guard, one evaluation after another
// on one goroutine. evals/s/core is evaluations per second of CPU time
// (user + system) the process spent, so a loaded machine does not count
// against it.
func BenchmarkRunVirtualServicePooled(b *testing.B) {
	traffic := "40%"
	in := benchVirtualServiceInput(b, v1alpha1.TrafficRoutingStrategy{Traffic: &traffic})
	lib := NewLibrary()
	benchCustom(b, builtinVirtualService(b), Runner{Pool: lib.Pool()}, in, "built-in, Go implementation")
}

// BenchmarkRunVirtualServiceLuaPooled is the same evaluation by the Lua
// script on the states of a Library's pool (what a ConfigMap copy of the
// built-in costs).
func BenchmarkRunVirtualServiceLuaPooled(b *testing.B) {
	traffic := "40%"
	in := benchVirtualServiceInput(b, v1alpha1.TrafficRoutingStrategy{Traffic: &traffic})
	lib := NewLibrary()
	benchCustom(b, builtinVirtualService(b).luaOnly(), Runner{Pool: lib.Pool()}, in, "Lua script on pooled sandboxes")
}

func builtinVirtualService(b *testing.B) Script {
	s, err := NewLibrary().Resolve("VirtualService", "networking.istio.io", nil)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// benchCustom runs s on in and reports evaluations per second of CPU
// time; with a label it prints the P4 lines of make bench.
func benchCustom(b *testing.B, s Script, r Runner, in CustomInput, label string) {
	ctx := context.Background()
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	for b.Loop() {
		if _, err := r.RunCustom(ctx, s, in); err != nil {
			b.Fatal(err)
		}
	}
	used := cpuTime(b) - cpu0
	if used <= 0 {
		return
	}
	b.ReportMetric(float64(b.N)/used.Seconds(), "evals/s/core")
	if label != "" {
		// b.Loop runs this function once: one line per make bench.
		fmt.Printf("P4 VirtualService evaluations (%s): %.0f evals/s per core (CPU time)\n", label, float64(b.N)/used.Seconds())
		fmt.Printf("P4 VirtualService evaluation (%s): %.1f µs\n", label, float64(b.Elapsed().Nanoseconds())/1e3/float64(b.N))
	}
}

// cpuTime is the CPU time the process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func benchMatchStep() v1alpha1.TrafficRoutingStrategy {
	return v1alpha1.TrafficRoutingStrategy{
		Matches: []v1alpha1.HttpRouteMatch{{Headers: []gatewayv1.HTTPHeaderMatch{{Name: "X-Canary", Value: "yes"}}}},
	}
}

// BenchmarkRunVirtualServiceMatches is BenchmarkRunVirtualService on a
// match step (a fresh Lua state).
func BenchmarkRunVirtualServiceMatches(b *testing.B) {
	in := benchVirtualServiceInput(b, benchMatchStep())
	benchCustom(b, builtinVirtualService(b).luaOnly(), Runner{}, in, "")
}

// BenchmarkRunVirtualServiceMatchesPooled is a match step as the
// controller runs it (the Go implementation).
func BenchmarkRunVirtualServiceMatchesPooled(b *testing.B) {
	in := benchVirtualServiceInput(b, benchMatchStep())
	benchCustom(b, builtinVirtualService(b), Runner{Pool: NewLibrary().Pool()}, in, "")
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

// BenchmarkEmptyScriptPooled measures the fixed cost of a run on a pooled
// state: the watch, the input, the reset.
func BenchmarkEmptyScriptPooled(b *testing.B) {
	s, err := NewScript("empty", "return {}")
	if err != nil {
		b.Fatal(err)
	}
	r := Runner{Pool: NewPool(1)}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.RunIngress(ctx, s, IngressInput{}); err != nil {
			b.Fatal(err)
		}
	}
}
