package bench

import (
	"context"
	"maps"
	"math"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// gateWatch timestamps, from a watch on the Rollouts, the moment each one
// starts releasing a revision other than its stable one, and the moment it
// first waits at the step-1 gate for it.
type gateWatch struct {
	mu      sync.Mutex
	started map[string]time.Time
	seen    map[string]time.Time
	want    int
	stable  map[string]string
	// state is each Rollout's step state in its last event (for
	// waveTrace, which reads it instead of listing the fleet).
	state map[string]v1alpha1.StepState
	done  chan struct{}
	watch *resumingWatch
}

// watchGates starts watching before the images change, so that no
// transition is missed, until want Rollouts are at their gates; it stops
// when ctx ends.
func (f *fleet) watchGates(ctx context.Context, want int) *gateWatch {
	f.b.Helper()
	wc, err := client.NewWithWatch(f.cluster.RESTConfig, client.Options{Scheme: f.scheme})
	if err != nil {
		f.b.Fatal(err)
	}
	g := &gateWatch{started: map[string]time.Time{}, seen: map[string]time.Time{}, want: want, stable: maps.Clone(f.stable),
		state: map[string]v1alpha1.StepState{}, done: make(chan struct{})}
	newList := func() client.ObjectList { return &v1alpha1.RolloutList{} }
	g.watch, err = startResumingWatch(ctx, wc, newList, []client.ListOption{client.InNamespace(f.listNamespace())}, func(obj client.Object, at time.Time) {
		if ro, ok := obj.(*v1alpha1.Rollout); ok {
			g.record(ro, at)
		}
	})
	if err != nil {
		f.b.Fatal(err)
	}
	return g
}

// record timestamps ro's start and gate, the first time each is seen.
func (g *gateWatch) record(ro *v1alpha1.Rollout, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.state[ro.Name] = ro.Status.CurrentStepState
	if _, dup := g.started[ro.Name]; !dup && releasing(ro, g.stable[ro.Name]) {
		g.started[ro.Name] = now
	}
	a := ro.Status.AwaitingApproval
	if a == nil || a.Step != 1 || a.Revision == g.stable[ro.Name] {
		return
	}
	if _, dup := g.seen[ro.Name]; !dup {
		g.seen[ro.Name] = now
		if len(g.seen) == g.want {
			close(g.done)
		}
	}
}

// releasing reports whether ro releases a revision other than stable.
func releasing(ro *v1alpha1.Rollout, stable string) bool {
	st := ro.Status
	return st.Phase == v1alpha1.PhaseProgressing && st.CanaryRevision != "" && st.CanaryRevision != stable
}

// wait returns the start and gate times once every Rollout is at its
// gate, or false after timeout.
func (g *gateWatch) wait(timeout time.Duration) (started, gated map[string]time.Time, ok bool) {
	select {
	case <-g.done:
	case <-time.After(timeout):
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return maps.Clone(g.started), maps.Clone(g.seen), len(g.seen) == g.want
}

// states counts the Rollouts of released by their step state in their
// last event; those with no event since the watch started count as
// "unchanged".
func (g *gateWatch) states(released map[string]bool) map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[string]int{}
	for name := range released {
		if st, ok := g.state[name]; ok {
			out[string(st)]++
		} else {
			out["unchanged"]++
		}
	}
	return out
}

// reopened is how many times the watch was resumed (no time late) and
// started over (some times late).
func (g *gateWatch) reopened() (resumes, replays int) { return g.watch.reopened() }

// percentile is the nearest-rank p-th percentile (0 < p <= 100) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(rank, 0)]
}

// heapMiB is the live heap of this process after a full collection: the
// controller's caches and work queues, plus the benchmark's own small
// client.
func heapMiB() float64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc) / (1 << 20)
}

// reconcileStats are controller-runtime's counters for the Rollout
// controller, read from its metrics registry (the same numbers /metrics
// serves).
type reconcileStats struct {
	reconciles, errors float64
	// seconds is the total time spent in Reconcile.
	seconds float64
	// requests and requestSeconds count every API request of the process
	// (controller, webhook and the benchmark's own client) and their time.
	requests, requestSeconds float64
}

// readReconcileStats reads the counters; take a difference of two reads.
func readReconcileStats(t testing.TB) reconcileStats {
	mfs, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var s reconcileStats
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "rest_client_requests_total":
				s.requests += m.GetCounter().GetValue()
			case "rest_client_request_duration_seconds":
				s.requestSeconds += m.GetHistogram().GetSampleSum()
			}
			rollout := false
			for _, l := range m.GetLabel() {
				rollout = rollout || (l.GetName() == "controller" && l.GetValue() == "rollout")
			}
			if !rollout {
				continue
			}
			switch mf.GetName() {
			case "controller_runtime_reconcile_total":
				s.reconciles += m.GetCounter().GetValue()
			case "controller_runtime_reconcile_errors_total":
				s.errors += m.GetCounter().GetValue()
			case "controller_runtime_reconcile_time_seconds":
				s.seconds += m.GetHistogram().GetSampleSum()
			}
		}
	}
	return s
}

func (s reconcileStats) minus(o reconcileStats) reconcileStats {
	return s.plus(o.times(-1))
}

func (s reconcileStats) plus(o reconcileStats) reconcileStats {
	return reconcileStats{
		reconciles: s.reconciles + o.reconciles, errors: s.errors + o.errors, seconds: s.seconds + o.seconds,
		requests: s.requests + o.requests, requestSeconds: s.requestSeconds + o.requestSeconds,
	}
}

func (s reconcileStats) times(k float64) reconcileStats {
	return reconcileStats{
		reconciles: k * s.reconciles, errors: k * s.errors, seconds: k * s.seconds,
		requests: k * s.requests, requestSeconds: k * s.requestSeconds,
	}
}
