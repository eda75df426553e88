package realtraffic

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// mirrorSteps: a shadow step copying 30% of the requests to one new pod,
// held at a gate, then all traffic.
const mirrorSteps = `
      - mirror: "30%"
        replicas: 1
        pause: {}
      - traffic: "100%"
        replicas: "100%"`

// podClient reads a pod's own counter.
var podClient = &http.Client{Timeout: 5 * time.Second}

// mirrorWindow is how many requests the mirror step is measured over.
const mirrorWindow = 1500

// canaryServed sums what the pods of revision answered so far (verserver's
// /requests), read from each ready pod directly.
func (w *world) canaryServed(ctx context.Context, revision string) (int, error) {
	var pods corev1.PodList
	if err := w.C.List(ctx, &pods, client.InNamespace(w.NS), client.MatchingLabels{v1alpha1.LabelRevision: revision}); err != nil {
		return 0, err
	}
	total, counted := 0, 0
	for _, p := range pods.Items {
		if p.Status.PodIP == "" || p.DeletionTimestamp != nil {
			continue
		}
		body, err := getWith(podClient, fmt.Sprintf("http://%s:8080/requests", p.Status.PodIP))
		if err != nil {
			return 0, fmt.Errorf("pod %s: %w", p.Name, err)
		}
		n, err := strconv.Atoi(body)
		if err != nil {
			return 0, fmt.Errorf("pod %s answered %q", p.Name, body)
		}
		total += n
		counted++
	}
	if counted == 0 {
		return 0, fmt.Errorf("no running pod of revision %s", revision)
	}
	return total, nil
}

// traefikServiceSpec is the live TraefikService's spec as YAML-ish text.
func (w *world) traefikServiceSpec(ctx context.Context, name string) string {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("traefik.io/v1alpha1")
	u.SetKind("TraefikService")
	if err := w.C.Get(ctx, types.NamespacedName{Namespace: w.NS, Name: name}, u); err != nil {
		return err.Error()
	}
	spec, _, _ := unstructured.NestedMap(u.Object, "spec")
	return fmt.Sprint(spec)
}

// TestMirrorThroughTraefikService: under continuous load through Traefik,
// v2's first step mirrors 30% of the requests to its one pod through the
// built-in TraefikService script (the weighted TraefikService becomes a
// mirroring one). Over 1,500 requests after the step is reported done, not
// one answer comes from v2, while v2's pod receives 30% of them as copies
// (±3 points, counted by the pod itself); then v2 is aborted, the
// TraefikService is weighted as declared again, and nothing reaches v2.
// No request fails over the story.
func TestMirrorThroughTraefikService(t *testing.T) {
	t.Parallel()
	builtInTraefikServiceScript(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	const ref = "echoserver-wrr"
	rollout := luaRollout(mirrorSteps, "TraefikService", ref)
	w := newWorldOf(t, ctx, worldOptions{rollout: rollout, app: traefikServiceApp})
	l := startLoad(w.url, rate, nil)
	defer l.stop()

	w.ApplyYAML(traefikServiceApp("localhost/verserver:v2", w.port()))
	ro := w.waitStep(ctx, 1, 0)
	v2 := ro.Status.CanaryRevision
	if ro.Status.Traffic != "mirror 30%" {
		t.Errorf("status.traffic at the mirror step = %q, want \"mirror 30%%\"", ro.Status.Traffic)
	}
	spec := w.traefikServiceSpec(ctx, ref)
	t.Logf("mirror step: TraefikService %s", spec)
	if !strings.Contains(spec, "mirroring:") || !strings.Contains(spec, "echoserver-canary") {
		t.Errorf("TraefikService %s at the mirror step: %s, want mirroring to echoserver-canary", ref, spec)
	}

	before, err := w.canaryServed(ctx, v2)
	if err != nil {
		t.Fatalf("count v2's requests: %v", err)
	}
	tl := count(l.since(ctx, l.mark(), mirrorWindow), false)
	after, err := w.canaryServed(ctx, v2)
	if err != nil {
		t.Fatalf("count v2's requests: %v", err)
	}
	copies := after - before
	share := 100 * float64(copies) / float64(tl.total)
	t.Logf("%-40s %5d requests (%.0f/s), answered by v2 %d, copies received by v2's pod %d = %.1f%% (declared 30%%), failed %d",
		"mirror step, declared 30%", tl.total, tl.rate, tl.byVersion["v2"], copies, share, tl.failed)
	if tl.total < mirrorWindow-50 {
		t.Errorf("mirror step: %d requests measured, want about %d", tl.total, mirrorWindow)
	}
	if tl.byVersion["v2"] != 0 {
		t.Errorf("mirror step: %d of %d answers came from v2; a mirror step answers every request from v1", tl.byVersion["v2"], tl.total)
	}
	if share < 30-tolerance || share > 30+tolerance {
		t.Errorf("mirror step: v2's pod received %d copies of %d requests (%.1f%%), declared 30%% (±%.0f)", copies, tl.total, share, tolerance)
	}

	w.ApplyYAML(rollout + fmt.Sprintf("  abort: {revision: %q, reason: realtraffic aborts the mirror step}\n", v2))
	w.waitRolledBack(ctx, v2)
	if got := w.weightedServices(ctx, ref); got != "echoserver:<nil>" {
		t.Errorf("TraefikService %s after the abort: %s, want it as declared (echoserver:<nil>)", ref, got)
	}
	t.Logf("after the abort: TraefikService %s", w.traefikServiceSpec(ctx, ref))
	window(t, ctx, l, false, "after the abort", "v2", 0)

	l.stop()
	all := wholeStory(t, "whole story", l)
	if all.byVersion["v2"] > 0 {
		t.Errorf("%d requests answered by v2, whose only step mirrored", all.byVersion["v2"])
	}
}
