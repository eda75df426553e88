package bench

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// timeline records what one workload of a P5 release went through, each
// change of its Rollout's phase, step and message, of its pods (by image:
// ready, starting, terminating), of the canary's share of its route and
// of its Deployment, with the time the benchmark saw it. Printed after the
// release (printTimeline), it shows where a column's seconds go: which
// part of a completion came last, and what it waited for.
type timeline struct {
	name  string
	mu    sync.Mutex
	lines []timed
	// last is the last line of each source, so that only changes count.
	last map[string]string
	// pods is the state of each of the workload's pods.
	pods map[string]string
}

type timed struct {
	at   time.Time
	what string
}

func newTimeline(name string) *timeline {
	return &timeline{name: name, last: map[string]string{}, pods: map[string]string{}}
}

// note records what of source at, unless it says what source said last.
func (tl *timeline) note(source, what string, at time.Time) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if tl.last[source] == what {
		return
	}
	tl.last[source] = what
	tl.lines = append(tl.lines, timed{at, source + ": " + what})
}

// rollout notes a Rollout of any contender: phase, step and message.
func (tl *timeline) rollout(ro *unstructured.Unstructured, at time.Time) {
	if ro.GetName() != tl.name {
		return
	}
	phase, _, _ := unstructured.NestedString(ro.Object, "status", "phase")
	step, found, _ := unstructured.NestedInt64(ro.Object, "status", "currentStepIndex")
	if !found {
		step, found, _ = unstructured.NestedInt64(ro.Object, "status", "canaryStatus", "currentStepIndex")
	}
	msg, _, _ := unstructured.NestedString(ro.Object, "status", "message")
	what := phase
	if found {
		what += fmt.Sprintf(", step %d", step)
	}
	tl.note("Rollout", what+": "+msg, at)
}

// pod notes the workload's pods by image once one of them changes.
func (tl *timeline) pod(pod *unstructured.Unstructured, deleted bool, at time.Time) {
	if pod.GetLabels()["app"] != tl.name {
		return
	}
	tl.mu.Lock()
	if deleted {
		delete(tl.pods, pod.GetName())
	} else {
		tl.pods[pod.GetName()] = podState(pod)
	}
	counts := map[string]int{}
	for _, s := range tl.pods {
		counts[s]++
	}
	var parts []string
	for _, s := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%d %s", counts[s], s))
	}
	tl.mu.Unlock()
	tl.note("pods", strings.Join(parts, ", "), at)
}

// podState is a pod's image and whether it is ready, starting or
// terminating.
func podState(pod *unstructured.Unstructured) string {
	image := "?"
	if cs, _, _ := unstructured.NestedSlice(pod.Object, "spec", "containers"); len(cs) > 0 {
		if c, ok := cs[0].(map[string]any); ok {
			image = fmt.Sprint(c["image"])
		}
	}
	switch {
	case pod.GetDeletionTimestamp() != nil:
		return image + " terminating"
	case podReadyWith(pod, image):
		return image + " ready"
	default:
		return image + " starting"
	}
}

// share notes the canary's share of the workload's route.
func (tl *timeline) share(s routeShare, at time.Time) {
	if s.workload == tl.name {
		tl.note("route", fmt.Sprintf("%.0f%% on the canary", s.share), at)
	}
}

// deployment notes the workload's Deployment: paused, and its status
// against its generation.
func (tl *timeline) deployment(d *unstructured.Unstructured, at time.Time) {
	if d.GetName() != tl.name {
		return
	}
	paused, _, _ := unstructured.NestedBool(d.Object, "spec", "paused")
	replicas, _, _ := unstructured.NestedInt64(d.Object, "spec", "replicas")
	observed, _, _ := unstructured.NestedInt64(d.Object, "status", "observedGeneration")
	var counts []string
	for _, field := range []string{"replicas", "updatedReplicas", "readyReplicas", "availableReplicas"} {
		v, _, _ := unstructured.NestedInt64(d.Object, "status", field)
		counts = append(counts, fmt.Sprint(v))
	}
	tl.note("Deployment", fmt.Sprintf("replicas %d, paused %t, generation %d observed %d, status replicas / updated / ready / available %s",
		replicas, paused, d.GetGeneration(), observed, strings.Join(counts, " / ")), at)
}

// watch feeds the timeline with the workload's pods, deletions included
// (the tracker's own watches feed the rest): its pods alone, so that the
// API server sends this watch nothing of the rest of the fleet.
func (tl *timeline) watch(ctx context.Context, f *fleet) {
	f.watchKindDeletes(ctx, podGVK, tl.pod, client.MatchingLabels{"app": tl.name})
}

// print writes the timeline, every line's time from the image change,
// with the approval among them.
func (tl *timeline) print(controller string, n int, bumped, approved time.Time) {
	tl.mu.Lock()
	lines := slices.Clone(tl.lines)
	tl.mu.Unlock()
	if !approved.IsZero() {
		lines = append(lines, timed{approved, "approved by the benchmark"})
	}
	slices.SortStableFunc(lines, func(a, b timed) int { return a.at.Compare(b.at) })
	for _, l := range lines {
		if l.at.Before(bumped) {
			continue
		}
		fmt.Printf("P5 timeline, %s, %d Rollouts, %s: +%.1f s %s\n", controller, n, tl.name, l.at.Sub(bumped).Seconds(), l.what)
	}
}

// TestTimelineNotesChangesOnly checks that the timeline keeps one line per
// change of a source, counts the workload's pods by image and state, and
// leaves other workloads out.
func TestTimelineNotesChangesOnly(t *testing.T) {
	tl := newTimeline("app-000")
	t0 := time.Now()
	pod := func(name, app, image string, ready, terminating bool) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"metadata": map[string]any{"name": name, "labels": map[string]any{"app": app}},
			"spec":     map[string]any{"containers": []any{map[string]any{"name": "c", "image": image}}},
		}}
		if ready {
			u.Object["status"] = map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": "True"}}}
		}
		if terminating {
			u.SetDeletionTimestamp(&metav1.Time{Time: t0})
		}
		return u
	}
	tl.pod(pod("a", "app-000", "app:1.0", true, false), false, t0.Add(1*time.Second))
	tl.pod(pod("b", "app-000", "app:2.0", false, false), false, t0.Add(2*time.Second))
	tl.pod(pod("x", "app-001", "app:2.0", true, false), false, t0.Add(3*time.Second))
	tl.pod(pod("b", "app-000", "app:2.0", true, false), false, t0.Add(4*time.Second))
	tl.pod(pod("a", "app-000", "app:1.0", true, true), false, t0.Add(5*time.Second))
	tl.pod(pod("a", "app-000", "app:1.0", true, true), true, t0.Add(6*time.Second))
	tl.share(routeShare{workload: "app-000", share: 20}, t0.Add(7*time.Second))
	tl.share(routeShare{workload: "app-000", share: 20}, t0.Add(8*time.Second))
	var got []string
	for _, l := range tl.lines {
		got = append(got, fmt.Sprintf("+%.0f %s", l.at.Sub(t0).Seconds(), l.what))
	}
	want := []string{
		"+1 pods: 1 app:1.0 ready",
		"+2 pods: 1 app:1.0 ready, 1 app:2.0 starting",
		"+4 pods: 1 app:1.0 ready, 1 app:2.0 ready",
		"+5 pods: 1 app:1.0 terminating, 1 app:2.0 ready",
		"+6 pods: 1 app:2.0 ready",
		"+7 route: 20% on the canary",
	}
	if !slices.Equal(got, want) {
		t.Errorf("timeline\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
