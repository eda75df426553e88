package e2e

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/prom"
	"github.com/rollgate/rollgate/test/rig"
)

// blueGreenRollout is a blue-green release of echoserver: step 1 brings up
// every new (preview) pod beside the old ones with no traffic, analyses
// them and waits at a manual gate; step 2 switches all traffic to them,
// analyses again and waits at a second gate, so that a release can still
// be aborted after the switch. The analysis is test/e2e/analysis_test.go's
// error rate from a real Prometheus, 2 measurements per step.
var blueGreenRollout = rig.Rollout{Name: "echoserver", Namespace: "demo", BlueGreen: true, Steps: []string{
	`{replicas: "100%", traffic: "0%", analysis: {templates: [error-rate]}, pause: {}}`,
	`{replicas: "100%", traffic: "100%", analysis: {templates: [error-rate]}, pause: {}}`,
}}.YAML()

// blueGreenPhase is what the story allows while it is in one phase: the
// shares of traffic the HTTPRoute may send to the new revision and whether
// the old revision must keep all its pods ready.
type blueGreenPhase struct {
	name     string
	old, new string // images
	// newShares are the allowed percentages of traffic on the canary
	// Service; 0 also covers a route with no canary backend.
	newShares []int32
	// oldKept: the old revision keeps all 5 pods, all ready.
	oldKept bool
}

// blueGreenSampler samples the HTTPRoute and the pods every 100 ms and
// records every sample outside what the current phase allows.
type blueGreenSampler struct {
	w       *world
	phase   atomic.Pointer[blueGreenPhase]
	mu      sync.Mutex
	bad     []string
	samples int
	// moved counts the samples dropped because the route changed while
	// they were read.
	moved int
	stop  func()
}

func (w *world) sampleBlueGreen(p *blueGreenPhase) *blueGreenSampler {
	s := &blueGreenSampler{w: w}
	s.phase.Store(p)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				s.sample(ctx)
			}
		}
	}()
	s.stop = func() { cancel(); <-done }
	w.T.Cleanup(func() { s.stop() })
	return s
}

// enter moves the story to phase p; samples taken from now on are judged
// against it.
func (s *blueGreenSampler) enter(p *blueGreenPhase) { s.phase.Store(p) }

func (s *blueGreenSampler) sample(ctx context.Context) {
	p := s.phase.Load()
	// The route and the pods are two reads. A rollback can switch the
	// route and remove new pods between them (all of it took 352 ms on a
	// loaded CI machine), and a sample pairing the route from before the
	// switch with the pods from after it saw traffic on pods that were
	// already gone. So the route is read again after the pods, and the
	// sample counts only when the route did not change in between: then
	// the pair is what the cluster held at the moment the pods were read.
	share, before, err := s.w.routeShare(ctx)
	if err != nil {
		return
	}
	pods, err := s.w.podsByImage(ctx, s.w.NS, "echoserver")
	if err != nil {
		return
	}
	if _, after, err := s.w.routeShare(ctx); err != nil || after != before {
		s.mu.Lock()
		s.moved++
		s.mu.Unlock()
		return
	}
	// The phase may have moved on while the sample was read: judge it
	// against both.
	if now := s.phase.Load(); now != p && blueGreenAllows(now, share, pods) == "" {
		p = now
	}
	why := blueGreenAllows(p, share, pods)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples++
	if why != "" {
		s.bad = append(s.bad, fmt.Sprintf("%s: %s (traffic on new %d%%, pods %v)", p.name, why, share, pods))
	}
}

// blueGreenAllows says why a sample is outside phase p, or "".
func blueGreenAllows(p *blueGreenPhase, share int32, pods map[string][2]int) string {
	allowed := false
	for _, a := range p.newShares {
		allowed = allowed || a == share
	}
	switch {
	case !allowed:
		return fmt.Sprintf("traffic on new must be one of %v%%", p.newShares)
	case p.oldKept && pods[p.old] != [2]int{5, 5}:
		return "the old revision must keep its 5 pods ready"
	case p.oldKept && pods[p.new][1] > 5:
		return "more than 5 preview pods"
	case share > 0 && pods[p.new][0] < 5:
		return "traffic on the new revision before all its pods are ready"
	case pods[p.old][0]+pods[p.new][0] < 5:
		return "fewer than 5 ready pods"
	}
	return ""
}

// check fails the test if any sample so far was outside its phase.
func (s *blueGreenSampler) check(what string) {
	s.w.T.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.bad) > 0 {
		s.w.T.Fatalf("%s: %d of %d samples outside the step, first ones:\n%s", what, len(s.bad), s.samples, strings.Join(s.bad[:min(len(s.bad), 10)], "\n"))
	}
	s.w.T.Logf("%s: %d samples, all within the step (%d more dropped: the route changed while they were read)", what, s.samples, s.moved)
}

// newShare reads the percentage of the HTTPRoute's traffic that goes to
// the canary (preview) Service.
func (w *world) newShare(ctx context.Context) (int32, error) {
	share, _, err := w.routeShare(ctx)
	return share, err
}

// routeShare is newShare with the resourceVersion of the route it read.
func (w *world) routeShare(ctx context.Context) (int32, string, error) {
	var route gatewayv1.HTTPRoute
	if err := w.C.Get(ctx, client.ObjectKey{Namespace: w.NS, Name: "echoserver"}, &route); err != nil {
		return 0, "", err
	}
	var canary, total int32
	for _, rule := range route.Spec.Rules {
		for _, ref := range rule.BackendRefs {
			weight := int32(1)
			if ref.Weight != nil {
				weight = *ref.Weight
			}
			total += weight
			if ref.Name == "echoserver-canary" {
				canary += weight
			}
		}
	}
	if total == 0 {
		return 0, "", fmt.Errorf("no weight on the route")
	}
	return canary * 100 / total, route.ResourceVersion, nil
}

// podsByImage counts the pods of app by image, ready and total, as
// world.pods does, returning the error for use off the test goroutine.
func (w *world) podsByImage(ctx context.Context, ns, app string) (map[string][2]int, error) {
	return rig.PodsByImage(ctx, w.C, ns, app)
}

// TestBlueGreenThroughTheController: given a Deployment behind a Service
// and an HTTPRoute, released blue-green; when Flux applies a new image,
// the preview pods come up beside the old ones without traffic, the
// traffic switches only at the step that says so and only after the
// approval, and the release completes with the new revision everywhere
// and the route as Git declares it. A second release aborted after the
// switch sends traffic back to the old revision and removes the new pods.
// Each step's analysis (a real Prometheus, no errors) passes before its
// gate opens.
func TestBlueGreenThroughTheController(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	src := prom.StartErrorSource(t)
	p := prom.Start(t, prom.Options{Targets: []string{src.Addr}, ScrapeInterval: time.Second})
	w.ApplyYAML(echoApp("echo:1.0"))
	w.ApplyYAML(errorRateTemplate(p.URL, 2, 2))
	w.ApplyYAML(blueGreenRollout)
	w.Eventually(60*time.Second, "v1 running and the Rollout healthy", func(ctx context.Context) (bool, error) {
		ro := w.Rollout(w.NS, "echoserver")
		return w.Pods(w.NS, "echoserver")["echo:1.0"] == [2]int{5, 5} && ro.Status.Phase == v1alpha1.PhaseHealthy &&
			conditions.IsReady(ro) && w.Deployment(w.NS, "echoserver").Labels[v1alpha1.LabelControlled] != "", nil
	})
	waitQueryable(w, p.URL, errorRateQuery)

	// Release 1: v1 -> v2, approved through both gates.
	preview := &blueGreenPhase{name: "preview of v2", old: "echo:1.0", new: "echo:2.0", newShares: []int32{0}, oldKept: true}
	s := w.sampleBlueGreen(preview)
	w.ApplyYAML(echoApp("echo:2.0"))
	ro := w.atBlueGreenGate(1, "echo:2.0")
	v2 := ro.Status.CanaryRevision
	w.assertPreviewService(ro)
	s.check("v2's preview at the gate of step 1")
	w.holdsGate(3*time.Second, 1)
	s.check("the gate of step 1 holding")

	// Approving step 1 lets step 2 switch all traffic, at once.
	s.enter(&blueGreenPhase{name: "switch to v2", old: "echo:1.0", new: "echo:2.0", newShares: []int32{0, 100}, oldKept: true})
	w.ApplyYAML(blueGreenRollout + "  approvals:\n  - {revision: " + v2 + ", step: 1, approvedBy: e2e}\n")
	w.atBlueGreenGate(2, "echo:2.0")
	w.Eventually(30*time.Second, "all traffic on v2", func(ctx context.Context) (bool, error) {
		share, err := w.newShare(ctx)
		return err == nil && share == 100, nil
	})
	s.enter(&blueGreenPhase{name: "switched to v2", old: "echo:1.0", new: "echo:2.0", newShares: []int32{100}, oldKept: true})
	w.holdsGate(3*time.Second, 2)
	s.check("the switch to v2")

	// Approving step 2 completes the release: v2 everywhere, the route and
	// the Deployment as Git declares them.
	s.enter(&blueGreenPhase{name: "completing v2", old: "echo:1.0", new: "echo:2.0", newShares: []int32{0, 100}})
	w.ApplyYAML(blueGreenRollout + "  approvals:\n  - {revision: " + v2 + ", step: 1, approvedBy: e2e}\n  - {revision: " + v2 + ", step: 2, approvedBy: e2e}\n")
	w.Eventually(90*time.Second, "v2 released everywhere", func(ctx context.Context) (bool, error) {
		ro = w.Rollout(w.NS, "echoserver")
		pods := w.Pods(w.NS, "echoserver")
		return ro.Status.Phase == v1alpha1.PhaseHealthy && ro.Status.StableRevision == v2 && conditions.IsReady(ro) &&
			len(pods) == 1 && pods["echo:2.0"] == [2]int{5, 5}, nil
	})
	s.check("the completion of v2")
	w.assertBlueGreenAsDeclared("echo:2.0")

	// Release 2: v2 -> v3, aborted after the switch.
	s.enter(&blueGreenPhase{name: "preview of v3", old: "echo:2.0", new: "echo:3.0", newShares: []int32{0}, oldKept: true})
	w.ApplyYAML(echoApp("echo:3.0"))
	ro = w.atBlueGreenGate(1, "echo:3.0")
	v3 := ro.Status.CanaryRevision
	w.assertPreviewService(ro)
	s.enter(&blueGreenPhase{name: "switch to v3", old: "echo:2.0", new: "echo:3.0", newShares: []int32{0, 100}, oldKept: true})
	w.ApplyYAML(blueGreenRollout + "  approvals:\n  - {revision: " + v3 + ", step: 1, approvedBy: e2e}\n")
	w.atBlueGreenGate(2, "echo:3.0")
	w.Eventually(30*time.Second, "all traffic on v3", func(ctx context.Context) (bool, error) {
		share, err := w.newShare(ctx)
		return err == nil && share == 100, nil
	})
	s.check("the switch to v3")

	// When the release is aborted after the switch, traffic goes back to
	// v2, whose pods never left, and the v3 pods are removed.
	s.enter(&blueGreenPhase{name: "abort of v3", old: "echo:2.0", new: "echo:3.0", newShares: []int32{0, 100}, oldKept: true})
	w.ApplyYAML(blueGreenRollout + "  approvals:\n  - {revision: " + v3 + ", step: 1, approvedBy: e2e}\n" +
		"  abort: {revision: " + v3 + ", reason: errors after the switch}\n")
	w.Eventually(60*time.Second, "rolled back to v2", func(ctx context.Context) (bool, error) {
		ro = w.Rollout(w.NS, "echoserver")
		share, err := w.newShare(ctx)
		pods := w.Pods(w.NS, "echoserver")
		return err == nil && share == 0 && ro.Status.Phase == v1alpha1.PhaseFailed && len(pods) == 1 && pods["echo:2.0"] == [2]int{5, 5}, nil
	})
	s.enter(&blueGreenPhase{name: "rolled back to v2", old: "echo:2.0", new: "echo:3.0", newShares: []int32{0}, oldKept: true})
	w.Eventually(30*time.Second, "Stalled=True with reason Aborted", func(ctx context.Context) (bool, error) {
		ro = w.Rollout(w.NS, "echoserver")
		return conditions.IsStalled(ro) && conditions.GetReason(ro, v1alpha1.StalledCondition) == v1alpha1.ReasonAborted, nil
	})
	s.check("the abort of v3")
	if ro.Status.StableRevision == v3 {
		t.Fatalf("status.stableRevision is the aborted revision %s", v3)
	}
	w.Eventually(30*time.Second, "the route as Git declares it", func(ctx context.Context) (bool, error) {
		return w.routeAsDeclared(ctx) == "", nil
	})
	s.check("after the abort")
}

// atBlueGreenGate waits until the release of image waits for approval at
// step (1-based) with every preview pod ready, and checks that the step's
// analysis passed first.
func (w *world) atBlueGreenGate(step int32, image string) *v1alpha1.Rollout {
	w.T.Helper()
	var ro *v1alpha1.Rollout
	w.Eventually(90*time.Second, fmt.Sprintf("%s at the gate of step %d", image, step), func(ctx context.Context) (bool, error) {
		ro = w.Rollout(w.NS, "echoserver")
		return ro.Status.AwaitingApproval != nil && ro.Status.CurrentStepIndex == step &&
			w.Pods(w.NS, "echoserver")[image] == [2]int{5, 5}, nil
	})
	if res := stepResult(ro, step); res == nil || res.Phase != "Successful" || res.Successful != 2 {
		w.T.Fatalf("the gate of step %d opened for approval before its analysis passed: %+v", step, res)
	}
	return ro
}

// assertPreviewService checks that while a release runs the preview
// (canary) Service selects only the new revision's pods and the stable
// Service only the old revision's.
func (w *world) assertPreviewService(ro *v1alpha1.Rollout) {
	w.T.Helper()
	for name, rev := range map[string]string{"echoserver": ro.Status.StableRevision, "echoserver-canary": ro.Status.CanaryRevision} {
		var svc corev1.Service
		if err := w.C.Get(context.Background(), client.ObjectKey{Namespace: w.NS, Name: name}, &svc); err != nil {
			w.T.Fatalf("Service %s: %v", name, err)
		}
		if want := map[string]string{"app": "echoserver", v1alpha1.LabelRevision: rev}; !maps.Equal(svc.Spec.Selector, want) {
			w.T.Fatalf("Service %s selects %v, want %v", name, svc.Spec.Selector, want)
		}
	}
}

// holdsGate checks for d that the Rollout stays at the gate of step.
func (w *world) holdsGate(d time.Duration, step int32) {
	w.T.Helper()
	w.Holds(d, fmt.Sprintf("the gate of step %d", step), func(ctx context.Context) error {
		if ro := w.Rollout(w.NS, "echoserver"); ro.Status.CurrentStepIndex != step || ro.Status.AwaitingApproval == nil {
			return fmt.Errorf("step %d state %s", ro.Status.CurrentStepIndex, ro.Status.CurrentStepState)
		}
		return nil
	})
}

// routeAsDeclared says how the HTTPRoute differs from echoApp's, or "".
func (w *world) routeAsDeclared(ctx context.Context) string {
	var route gatewayv1.HTTPRoute
	if err := w.C.Get(ctx, client.ObjectKey{Namespace: w.NS, Name: "echoserver"}, &route); err != nil {
		return err.Error()
	}
	if len(route.Spec.Rules) != 1 || len(route.Spec.Rules[0].BackendRefs) != 1 {
		return fmt.Sprintf("rules %+v, want one rule with one backend", route.Spec.Rules)
	}
	ref := route.Spec.Rules[0].BackendRefs[0]
	if ref.Name != "echoserver" || ref.Port == nil || *ref.Port != 80 || ref.Weight != nil && *ref.Weight != 1 {
		return fmt.Sprintf("backendRef %+v, want echoserver:80", ref.BackendObjectReference)
	}
	return ""
}

// assertBlueGreenAsDeclared checks that a completed release left the
// Deployment, the Services and the route as Git declares them.
func (w *world) assertBlueGreenAsDeclared(image string) {
	w.T.Helper()
	w.Eventually(30*time.Second, "the route, Services and Deployment as Git declares them", func(ctx context.Context) (bool, error) {
		if why := w.routeAsDeclared(ctx); why != "" {
			return false, nil
		}
		d := w.Deployment(w.NS, "echoserver")
		if d.Spec.Paused || d.Spec.Template.Spec.Containers[0].Image != image {
			return false, nil
		}
		var stable, preview corev1.Service
		if err := w.C.Get(ctx, client.ObjectKey{Namespace: w.NS, Name: "echoserver"}, &stable); err != nil {
			return false, err
		}
		if len(stable.Spec.Selector) != 1 || stable.Spec.Selector["app"] != "echoserver" {
			return false, nil
		}
		err := w.C.Get(ctx, client.ObjectKey{Namespace: w.NS, Name: "echoserver-canary"}, &preview)
		return apierrors.IsNotFound(err), nil
	})
}
