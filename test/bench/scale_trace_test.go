package bench

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// requestCounter counts the controller's API requests by verb and
// resource ("PATCH pods", "PATCH rollouts/status"), to tell which requests
// a reconcile makes.
type requestCounter struct {
	mu    sync.Mutex
	count map[string]float64
}

// wrap is a rest.Config's WrapTransport: every client the controller
// builds counts through c.
func (c *requestCounter) wrap(next http.RoundTripper) http.RoundTripper {
	return countingTransport{c: c, next: next}
}

type countingTransport struct {
	c    *requestCounter
	next http.RoundTripper
}

func (t countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.c.add(req)
	return t.next.RoundTrip(req)
}

func (c *requestCounter) add(req *http.Request) {
	key := req.Method + " " + resourceOf(req.URL.Path)
	if req.URL.Query().Get("watch") == "true" {
		key = "WATCH " + resourceOf(req.URL.Path)
	}
	c.mu.Lock()
	c.count[key]++
	c.mu.Unlock()
}

// snapshot copies the counts.
func (c *requestCounter) snapshot() map[string]float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]float64, len(c.count))
	for k, v := range c.count {
		out[k] = v
	}
	return out
}

// resourceOf is the resource (and subresource) of an API path:
// /api/v1/namespaces/x/pods/y -> pods, .../rollouts/y/status -> rollouts/status.
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	// Drop the prefix: api/v1 or apis/group/version.
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return path
	}
	if len(parts) >= 2 && parts[0] == "namespaces" {
		if len(parts) == 2 {
			return "namespaces"
		}
		parts = parts[2:]
	}
	switch len(parts) {
	case 0:
		return "?"
	case 1, 2:
		return parts[0]
	default:
		return parts[0] + "/" + parts[2]
	}
}

// waveTrace samples, every few seconds during a release, the Rollout
// controller's work-queue depth by priority, the reconciles done, and how
// many released Rollouts are in which step state: it shows whether the
// queue or the cluster holds the releases back.
type waveTrace struct {
	mu    sync.Mutex
	lines []string
	maxQ  float64
}

// traceWave samples until ctx ends.
func (f *fleet) traceWave(ctx context.Context, every time.Duration, released map[string]bool) *waveTrace {
	t := &waveTrace{}
	start := time.Now()
	go func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		last := readReconcileStats(f.b)
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			depth := queueDepth(f.b)
			s := readReconcileStats(f.b)
			d := s.minus(last)
			last = s
			// From the release's own watch: a list of the whole fleet
			// every tick would be the benchmark's garbage in the
			// controller's heap (at 10,000 Rollouts, tens of MB a tick),
			// paid by its collector and counted in its reconcile times.
			var states map[string]int
			if g := f.wave.Load(); g != nil {
				states = g.states(released)
			}
			var total float64
			var prios []string
			for p, v := range depth {
				total += v
				if v > 0 {
					prios = append(prios, fmt.Sprintf("%s:%.0f", p, v))
				}
			}
			slices.Sort(prios)
			var st []string
			for k, v := range states {
				st = append(st, fmt.Sprintf("%s:%d", k, v))
			}
			slices.Sort(st)
			t.mu.Lock()
			t.maxQ = max(t.maxQ, total)
			t.lines = append(t.lines, fmt.Sprintf("t=%3.0fs queue %4.0f [%s] reconciles/s %5.1f (%.2f s each) states %s",
				time.Since(start).Seconds(), total, strings.Join(prios, " "), d.reconciles/every.Seconds(),
				d.seconds/max(d.reconciles, 1), strings.Join(st, " ")))
			t.mu.Unlock()
		}
	}()
	return t
}

func (t *waveTrace) log(b *testing.B) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, l := range t.lines {
		fmt.Println("trace:", l)
	}
}

// queueDepth reads the Rollout controller's work-queue depth by priority.
func queueDepth(b *testing.B) map[string]float64 {
	mfs, err := crmetrics.Registry.Gather()
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "workqueue_depth" {
			continue
		}
		for _, m := range mf.GetMetric() {
			name, prio := "", ""
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "name":
					name = l.GetValue()
				case "priority":
					prio = l.GetValue()
				}
			}
			if name == "rollout" {
				out[prio] += m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// readQueueWait reads the Rollout controller's work-queue wait histogram.
func readQueueWait(b *testing.B) histogram {
	return readNamedHistogram(b, "workqueue_queue_duration_seconds", "name", "rollout")
}

// readNamedHistogram reads a histogram of crmetrics.Registry whose label
// key has value.
func readNamedHistogram(b *testing.B, metric, key, value string) histogram {
	mfs, err := crmetrics.Registry.Gather()
	if err != nil {
		b.Fatal(err)
	}
	var h histogram
	for _, mf := range mfs {
		if mf.GetName() != metric {
			continue
		}
		for _, m := range mf.GetMetric() {
			ok := false
			for _, l := range m.GetLabel() {
				ok = ok || (l.GetName() == key && l.GetValue() == value)
			}
			if !ok {
				continue
			}
			for _, bk := range m.GetHistogram().GetBucket() {
				h.bounds = append(h.bounds, bk.GetUpperBound())
				h.counts = append(h.counts, float64(bk.GetCumulativeCount()))
			}
			h.total = float64(m.GetHistogram().GetSampleCount())
		}
	}
	return h
}

func sortedKeys(m map[string]float64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
