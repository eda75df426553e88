package bench

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

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
	crmetrics.RegisterRESTClientMetrics(crmetrics.MetricRequestLatency)
	f := startFleet(b, n)
	heapIdle := heapMiB()
	var all sample
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i > 0 {
			b.StopTimer()
			f.promoteAll()
			b.StartTimer()
		}
		all.add(f.releaseToGate(fmt.Sprintf("app:%d.0", i+2)))
	}
	b.StopTimer()
	heapGate := heapMiB()
	b.ReportMetric(percentile(all.start, 50).Seconds(), "start-p50-s")
	b.ReportMetric(percentile(all.gate, 50).Seconds(), "p50-s")
	b.ReportMetric(percentile(all.gate, 95).Seconds(), "p95-s")
	b.ReportMetric(percentile(all.gate, 100).Seconds(), "max-s")
	b.ReportMetric(float64(len(all.gate))/b.Elapsed().Seconds(), "rollouts/s")
	b.ReportMetric(all.stats.reconciles/float64(len(all.gate)), "reconciles/rollout")
	b.ReportMetric(1000*all.stats.seconds/max(all.stats.reconciles, 1), "ms/reconcile")
	b.ReportMetric(all.stats.errors, "reconcile-errors")
	// The benchmark's own requests: one apply per Rollout and one watch
	// per release.
	own := float64(len(all.gate) + b.N)
	b.ReportMetric((all.stats.requests-own)/max(all.stats.reconciles, 1), "api-calls/reconcile")
	b.ReportMetric(1000*all.stats.requestSeconds/max(all.stats.requests, 1), "ms/api-call")
	b.ReportMetric(heapGate-f.heapBase, "ctrl-heap-MiB")
	b.ReportMetric(heapGate-heapIdle, "release-heap-MiB")
	b.Logf("start p95 %v; heap %.1f MiB before the controller, %.1f MiB with %d healthy Rollouts, %.1f MiB at the gates",
		percentile(all.start, 95).Round(time.Millisecond), f.heapBase, heapIdle, n, heapGate)
}

// sample is what releases of the fleet measured.
type sample struct {
	// start and gate are, per Rollout, the times from its image change to
	// its release starting (status.canaryRevision set) and to its gate.
	start, gate []time.Duration
	// stats is the controller's work meanwhile.
	stats reconcileStats
}

func (s *sample) add(o sample) {
	s.start = append(s.start, o.start...)
	s.gate = append(s.gate, o.gate...)
	s.stats = s.stats.plus(o.stats)
}

// releaseToGate applies image to every Deployment in parallel and waits
// until every Rollout waits at its step-1 gate.
func (f *fleet) releaseToGate(image string) sample {
	f.b.Helper()
	return f.releaseSomeToGate(image, f.names)
}

// releaseSomeToGate is releaseToGate for the workloads names only; the
// fleet's other Rollouts stay at rest.
func (f *fleet) releaseSomeToGate(image string, names []string) sample {
	f.b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gates := f.watchGates(ctx, len(names))
	f.wave.Store(gates)
	defer f.wave.Store(nil)
	before := readReconcileStats(f.b)
	var mu sync.Mutex
	bumped := map[string]time.Time{}
	f.parallelOver(names, func(name string) {
		at := time.Now()
		f.applyIn(f.namespace(name), deploymentYAML(name, image, f.opts.replicas))
		mu.Lock()
		bumped[name] = at
		mu.Unlock()
	})
	// 10 minutes, or 1.2 s per Rollout for large releases.
	timeout := max(10*time.Minute, time.Duration(len(names))*1200*time.Millisecond)
	started, gated, ok := gates.wait(timeout)
	s := sample{stats: readReconcileStats(f.b).minus(before)}
	if !ok {
		f.b.Fatalf("%d of %d Rollouts at the step-1 gate after %v; the others: %s", len(gated), len(names), timeout, f.whereAre(gated, bumped))
	}
	if resumes, replays := gates.reopened(); resumes+replays > 0 {
		f.b.Logf("the watch was resumed %d times (no time late) and started over %d times (some times late)", resumes, replays)
	}
	f.checkGates(bumped)
	for name, at := range gated {
		s.gate = append(s.gate, at.Sub(bumped[name]))
		s.start = append(s.start, started[name].Sub(bumped[name]))
	}
	return s
}

// checkGates fails the benchmark unless every Rollout of released waits
// at step 1 with one new pod ready and 20% of traffic on it.
func (f *fleet) checkGates(released map[string]time.Time) {
	f.b.Helper()
	var bad []string
	err := f.eachRollout(context.Background(), func(ro *v1alpha1.Rollout) {
		if _, ok := released[ro.Name]; !ok {
			return
		}
		st := ro.Status
		if st.CurrentStepIndex != 1 || st.CurrentStepState != v1alpha1.StepPaused || st.CanaryReadyReplicas != 1 || st.Traffic != "20%" {
			bad = append(bad, fmt.Sprintf("%s at the gate: step %d %s, %d new pods ready, traffic %q: %s",
				ro.Name, st.CurrentStepIndex, st.CurrentStepState, st.CanaryReadyReplicas, st.Traffic, st.Message))
		}
	})
	if err != nil {
		f.b.Fatal(err)
	}
	if len(bad) > 0 {
		f.b.Fatalf("%d Rollouts not at their gate as expected; first: %s", len(bad), bad[0])
	}
}

// promoteAll finishes every release (spec.promote) and waits until each
// Rollout is Healthy on its new revision, ready for the next iteration.
func (f *fleet) promoteAll() {
	f.b.Helper()
	canary := map[string]string{}
	if err := f.eachRollout(context.Background(), func(ro *v1alpha1.Rollout) { canary[ro.Name] = ro.Status.CanaryRevision }); err != nil {
		f.b.Fatal(err)
	}
	f.parallel(func(name string) {
		ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: f.namespace(name), Name: name}}
		patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"promote":{"revision":%q}}}`, canary[name]))
		if err := f.c.Patch(context.Background(), ro, patch); err != nil {
			f.b.Errorf("promote %s: %v", name, err)
		}
	})
	f.waitHealthy(5*time.Minute, maps.Clone(f.stable))
}

// whereAre summarises where the Rollouts of released missing from seen
// stand, for a failure message: a count and an example message per step
// and state.
func (f *fleet) whereAre(seen, released map[string]time.Time) string {
	count, example := map[string]int{}, map[string]string{}
	err := f.eachRollout(context.Background(), func(ro *v1alpha1.Rollout) {
		if _, ok := seen[ro.Name]; ok {
			return
		}
		if _, ok := released[ro.Name]; !ok {
			return
		}
		st := ro.Status
		key := fmt.Sprintf("%s step %d %s", st.Phase, st.CurrentStepIndex, st.CurrentStepState)
		count[key]++
		example[key] = ro.Name + ": " + st.Message
		if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ReadyCondition); c != nil && c.Message != st.Message {
			example[key] += "; Ready: " + c.Message
		}
	})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for key, n := range count {
		fmt.Fprintf(&b, "\n  %d at %s (%s)", n, key, example[key])
	}
	return b.String()
}
