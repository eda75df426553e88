package bench

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// BenchmarkReleaseToFirstGate changes the image of N Deployments at once,
// as one GitOps commit applied by Flux does, and measures how long each
// Rollout takes from its image change to waiting at the step-1 gate with
// one new pod ready and 20% of traffic: the webhook holding the
// Deployment, the batch, the HTTPRoute and the gate, under the load of all
// N releases together.
//
// Reported per operation (one release of all N): p50-s, p95-s and max-s
// are per-Rollout latencies; rollouts/s is N over the time until the last
// gate; reconciles/rollout and ms/reconcile come from controller-runtime's
// metrics; ctrl-heap-MiB is the live heap of the in-process controller at
// the gates, release-heap-MiB its growth during the release.
func BenchmarkReleaseToFirstGate(b *testing.B) {
	for _, n := range []int{50, 200} {
		b.Run(fmt.Sprintf("rollouts=%d", n), func(b *testing.B) { benchmarkReleaseToGate(b, n) })
	}
}

func benchmarkReleaseToGate(b *testing.B, n int) {
	f := startFleet(b, n)
	heapIdle := heapMiB()
	var lat []time.Duration
	var stats reconcileStats
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i > 0 {
			b.StopTimer()
			f.promoteAll()
			b.StartTimer()
		}
		l, s := f.releaseToGate(fmt.Sprintf("app:%d.0", i+2))
		lat = append(lat, l...)
		stats = stats.plus(s)
	}
	b.StopTimer()
	heapGate := heapMiB()
	b.ReportMetric(percentile(lat, 50).Seconds(), "p50-s")
	b.ReportMetric(percentile(lat, 95).Seconds(), "p95-s")
	b.ReportMetric(percentile(lat, 100).Seconds(), "max-s")
	b.ReportMetric(float64(len(lat))/b.Elapsed().Seconds(), "rollouts/s")
	b.ReportMetric(stats.reconciles/float64(len(lat)), "reconciles/rollout")
	b.ReportMetric(1000*stats.seconds/max(stats.reconciles, 1), "ms/reconcile")
	b.ReportMetric(stats.errors, "reconcile-errors")
	b.ReportMetric(heapGate-f.heapBase, "ctrl-heap-MiB")
	b.ReportMetric(heapGate-heapIdle, "release-heap-MiB")
}

// releaseToGate applies image to every Deployment in parallel and waits
// until every Rollout waits at its step-1 gate. It returns each Rollout's
// latency from its image change, and the controller's work meanwhile.
func (f *fleet) releaseToGate(image string) ([]time.Duration, reconcileStats) {
	f.b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gates := f.watchGates(ctx)
	before := readReconcileStats(f.b)
	var mu sync.Mutex
	bumped := map[string]time.Time{}
	f.parallel(func(name string) {
		at := time.Now()
		f.applyYAML(deploymentYAML(name, image))
		mu.Lock()
		bumped[name] = at
		mu.Unlock()
	})
	seen, ok := gates.wait(10 * time.Minute)
	stats := readReconcileStats(f.b).minus(before)
	if !ok {
		f.b.Fatalf("%d of %d Rollouts at the step-1 gate after 10 minutes", len(seen), len(f.names))
	}
	f.checkGates()
	lat := make([]time.Duration, 0, len(seen))
	for name, at := range seen {
		lat = append(lat, at.Sub(bumped[name]))
	}
	return lat, stats
}

// checkGates fails the benchmark unless every Rollout waits at step 1 with
// one new pod ready and 20% of traffic on it.
func (f *fleet) checkGates() {
	f.b.Helper()
	var list v1alpha1.RolloutList
	if err := f.c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		f.b.Fatal(err)
	}
	for _, ro := range list.Items {
		st := ro.Status
		if st.CurrentStepIndex != 1 || st.CurrentStepState != v1alpha1.StepPaused || st.CanaryReadyReplicas != 1 || st.Traffic != "20%" {
			f.b.Fatalf("%s at the gate: step %d %s, %d new pods ready, traffic %q: %s",
				ro.Name, st.CurrentStepIndex, st.CurrentStepState, st.CanaryReadyReplicas, st.Traffic, st.Message)
		}
	}
}

// promoteAll finishes every release (spec.promote) and waits until each
// Rollout is Healthy on its new revision, ready for the next iteration.
func (f *fleet) promoteAll() {
	f.b.Helper()
	var list v1alpha1.RolloutList
	if err := f.c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		f.b.Fatal(err)
	}
	canary := map[string]string{}
	for _, ro := range list.Items {
		canary[ro.Name] = ro.Status.CanaryRevision
	}
	f.parallel(func(name string) {
		ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"promote":{"revision":%q}}}`, canary[name]))
		if err := f.c.Patch(context.Background(), ro, patch); err != nil {
			f.b.Errorf("promote %s: %v", name, err)
		}
	})
	f.waitHealthy(5*time.Minute, maps.Clone(f.stable))
}
