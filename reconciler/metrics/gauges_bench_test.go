package metrics_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/metrics"
)

// BenchmarkGaugesMemory prints the heap the per-Rollout gauges keep for
// each idle Rollout (SetRollout of 10,000 Rollouts, half of them at a
// gate), and the time and garbage of one scrape of them all.
func BenchmarkGaugesMemory(b *testing.B) {
	const n = 10_000
	statuses := make([]*v1alpha1.Rollout, n)
	for i := range statuses {
		st := v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseHealthy, CurrentStepIndex: 3, StepCount: 3}
		if i%2 == 0 {
			st = v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseProgressing, CurrentStepIndex: 1, StepCount: 3, CanaryWeight: 20,
				AwaitingApproval: &v1alpha1.ApprovalRequest{Revision: "r2", Step: 1, Since: metav1.Now()}}
		}
		statuses[i] = &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("team-%03d", i/100), Name: fmt.Sprintf("app-%05d", i)}, Status: st}
	}
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	reg := prometheus.NewRegistry()
	before := heap()
	m, err := metrics.New(reg)
	if err != nil {
		b.Fatal(err)
	}
	for _, ro := range statuses {
		m.SetRollout(ro)
	}
	perRollout := (float64(heap()) - float64(before)) / n
	runtime.KeepAlive(statuses) // alive in both readings: only the gauges' memory is counted
	fmt.Printf("metrics: heap kept by the per-Rollout gauges of %d Rollouts: %.0f B per Rollout\n", n, perRollout)
	b.ReportMetric(perRollout, "B/rollout")
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		families, err := reg.Gather()
		if err != nil {
			b.Fatal(err)
		}
		series := 0
		for _, f := range families {
			series += len(f.GetMetric())
		}
		if want := n*9 + n/2; series != want {
			b.Fatalf("%d series gathered, want %d", series, want)
		}
	}
	runtime.KeepAlive(m)
}
