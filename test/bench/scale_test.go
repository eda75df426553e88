package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// scaleEnv sets the number of Rollouts of BenchmarkScale (default
// defaultScale): ROLLGATE_BENCH_SCALE=1000 make bench. inflightEnv sets
// how many of them are released at once (default all); heapProfileEnv,
// when set, is a file to write a heap profile to at rest (and to the same
// name with ".flight" appended with the releases at their gates).
const (
	scaleEnv       = "ROLLGATE_BENCH_SCALE"
	inflightEnv    = "ROLLGATE_BENCH_INFLIGHT"
	heapProfileEnv = "ROLLGATE_BENCH_HEAPPROFILE"
	defaultScale   = 200
	// restWindow is how long the fleet is watched at rest.
	restWindow = 30 * time.Second
	// scaleClientQPS is the client limit of the cluster's controller
	// manager and scheduler in BenchmarkScale and BenchmarkClusterAlone:
	// with their defaults (20 and 50 per second) the controller manager
	// paces every rolling update of a large release, and set-up of
	// thousands of Deployments takes most of an hour.
	scaleClientQPS = 1000
	// spreadAbove is the fleet size above which the workloads are spread
	// over namespaces of perNamespace each, as in a cluster of many teams
	// (at or below it they share one namespace, as in earlier runs).
	spreadAbove  = 1000
	perNamespace = 100
)

// BenchmarkScale is P2 of docs/benchmarks.md: one controller with N
// Rollouts of 1-replica Deployments (headless Services, so the cluster's
// Service range is not the limit), at rest and with N releases in flight
// (every Rollout released to its step-1 gate at once). It prints the
// process's RSS and live heap (the controller runs in this process, with
// the benchmark's own small client), the reconcile p99 from
// controller-runtime's reconcile-time histogram, the API requests per
// reconcile, and the times from the image changes to the gates.
func BenchmarkScale(b *testing.B) {
	n := scaleFromEnv(b)
	b.Run(fmt.Sprintf("rollouts=%d", n), func(b *testing.B) {
		for range b.N {
			benchmarkScale(b, n)
		}
	})
}

// scaleFromEnv reads scaleEnv (default defaultScale).
func scaleFromEnv(b *testing.B) int {
	n := defaultScale
	if v := os.Getenv(scaleEnv); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("%s=%q: want a number of Rollouts, such as 1000", scaleEnv, v)
		}
	}
	return n
}

// inflightFromEnv reads inflightEnv (default n, at most n).
func inflightFromEnv(b *testing.B, n int) int {
	v := os.Getenv(inflightEnv)
	if v == "" {
		return n
	}
	k, err := strconv.Atoi(v)
	if err != nil || k < 1 || k > n {
		b.Fatalf("%s=%q: want a number of releases from 1 to %s (%d), such as 1000", inflightEnv, v, scaleEnv, n)
	}
	return k
}

// spreadOut picks k of names evenly (every len/k-th), so that a partial
// release spans every namespace of a spread fleet.
func spreadOut(names []string, k int) []string {
	out := make([]string, 0, k)
	for i := range k {
		out = append(out, names[i*len(names)/k])
	}
	return out
}

// writeHeapProfile writes a heap profile to path (after a GC, so that it
// shows live memory), when path is set.
func writeHeapProfile(b *testing.B, path string) {
	if path == "" {
		return
	}
	runtime.GC()
	file, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer file.Close()
	if err := pprof.WriteHeapProfile(file); err != nil {
		b.Fatal(err)
	}
	fmt.Printf("heap profile: %s\n", path)
}

// loadAverage is the machine's 1-minute load average.
func loadAverage(b *testing.B) float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		b.Fatal(err)
	}
	v, err := strconv.ParseFloat(strings.Fields(string(data))[0], 64)
	if err != nil {
		b.Fatal(err)
	}
	return v
}

func benchmarkScale(b *testing.B, n int) {
	crmetrics.RegisterRESTClientMetrics(crmetrics.MetricRequestLatency)
	inflight := inflightFromEnv(b, n)
	opts := fleetOptions{replicas: 1, clientQPS: scaleClientQPS}
	if n > spreadAbove {
		opts.perNamespace = perNamespace
	}
	start := time.Now()
	f := startFleetWith(b, n, opts)
	row := func(what string, v float64, unit string) {
		fmt.Printf("P2 scale, %d Rollouts, %s: %.*f %s\n", n, what, decimals(v), v, unit)
	}
	row("set-up until every Rollout is healthy", time.Since(start).Seconds(), "s")
	fmt.Printf("P2 scale, %d Rollouts, namespaces: %d\n", n, len(f.namespaces()))
	fmt.Printf("P2 scale, %d Rollouts, workers (--concurrent): %d\n", n, concurrentFromEnv(b))

	// At rest: N healthy Rollouts, nothing changing.
	time.Sleep(5 * time.Second)
	h0, s0 := readReconcileHistogram(b), readReconcileStats(b)
	time.Sleep(restWindow)
	h1, s1 := readReconcileHistogram(b), readReconcileStats(b)
	rest := s1.minus(s0)
	row("RSS at rest", rssMiB(b), "MiB")
	row("heap at rest", heapMiB(), "MiB")
	row(fmt.Sprintf("reconciles at rest in %v", restWindow), rest.reconciles, "reconciles")
	row("reconcile p99 at rest", 1000*h1.minus(h0).quantile(0.99), "ms")
	fmt.Printf("P2 scale, %d Rollouts, load average (1 min) at rest: %.1f\n", n, loadAverage(b))
	profile := os.Getenv(heapProfileEnv)
	writeHeapProfile(b, profile)

	// In flight: inflight Rollouts (default all) released to their step-1
	// gates at once.
	released := spreadOut(f.names, inflight)
	inWave := map[string]bool{}
	for _, name := range released {
		inWave[name] = true
	}
	q1, r1 := readQueueWait(b), f.apiCalls.snapshot()
	traceCtx, stopTrace := context.WithCancel(context.Background())
	trace := f.traceWave(traceCtx, 10*time.Second, inWave)
	b.ResetTimer()
	s := f.releaseSomeToGate("app:2.0", released)
	b.StopTimer()
	stopTrace()
	h2 := readReconcileHistogram(b)
	trace.log(b)
	q2, r2 := readQueueWait(b), f.apiCalls.snapshot()
	wait := q2.minus(q1)
	row("work-queue wait p50 during the release", wait.quantile(0.5), "s")
	row("work-queue wait p99 during the release", wait.quantile(0.99), "s")
	row("work-queue depth max during the release", trace.maxQ, "items")
	for _, k := range sortedKeys(r2) {
		if v := r2[k] - r1[k]; v > 0 {
			fmt.Printf("requests: %-40s %6.0f (%.2f per reconcile)\n", k, v, v/max(s.stats.reconciles, 1))
		}
	}

	row(fmt.Sprintf("RSS with %d releases at their gates", inflight), rssMiB(b), "MiB")
	row(fmt.Sprintf("heap with %d releases at their gates", inflight), heapMiB(), "MiB")
	if profile != "" {
		writeHeapProfile(b, profile+".flight")
	}
	row("first gate p50", percentile(s.gate, 50).Seconds(), "s")
	row("first gate p95", percentile(s.gate, 95).Seconds(), "s")
	row("first gate max", percentile(s.gate, 100).Seconds(), "s")
	row("reconcile p99 during the release", 1000*h2.minus(h1).quantile(0.99), "ms")
	row("reconciles per released Rollout during the release", s.stats.reconciles/float64(inflight), "reconciles")
	fmt.Printf("P2 scale, %d Rollouts, load average (1 min) with the releases at their gates: %.1f\n", n, loadAverage(b))
	own := float64(inflight + 1) // the benchmark's applies and its watch
	row("API requests per reconcile during the release", (s.stats.requests-own)/max(s.stats.reconciles, 1), "requests")
}

// decimals keeps two significant decimals for small values.
func decimals(v float64) int {
	if v >= 100 || v == 0 {
		return 0
	}
	if v >= 10 {
		return 1
	}
	return 2
}

// rssMiB is the resident set size of this process.
func rssMiB(b *testing.B) float64 { return procRSSMiB(b, os.Getpid()) }

// histogram is a cumulative histogram: count of observations at or below
// each upper bound.
type histogram struct {
	bounds []float64
	counts []float64
	total  float64
}

// readReconcileHistogram reads controller-runtime's reconcile-time
// histogram of the Rollout controller.
func readReconcileHistogram(b *testing.B) histogram {
	return readNamedHistogram(b, "controller_runtime_reconcile_time_seconds", "controller", "rollout")
}

// minus is h less an earlier read of the same histogram.
func (h histogram) minus(o histogram) histogram {
	out := histogram{bounds: h.bounds, counts: make([]float64, len(h.counts)), total: h.total - o.total}
	for i := range h.counts {
		out.counts[i] = h.counts[i]
		if i < len(o.counts) {
			out.counts[i] -= o.counts[i]
		}
	}
	return out
}

// quantile estimates the q-quantile in seconds, interpolating linearly
// within the bucket it falls in (as Prometheus' histogram_quantile does).
func (h histogram) quantile(q float64) float64 {
	if h.total <= 0 {
		return 0
	}
	rank := q * h.total
	lower, below := 0.0, 0.0
	for i, c := range h.counts {
		if c >= rank {
			if c == below {
				return h.bounds[i]
			}
			return lower + (h.bounds[i]-lower)*(rank-below)/(c-below)
		}
		lower, below = h.bounds[i], c
	}
	return lower
}
