package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/traffic"
)

// The flap stories: a GitOps tool re-applies the manifests Git declares
// (v2 of the app, its Service and routes, the Rollout) every second while
// a release waits at its step-1 gate. The routing objects must never be
// stored, nor seen by an independent reader, with anything but the step's
// traffic, and no pod may be created or deleted: the route admission
// webhook (reconciler/routehook) puts the step into every write before it
// is stored, the workload webhook keeps the Deployment held.

// argocdManager is the field manager Argo CD's application controller
// writes with.
const argocdManager = "argocd-controller"

// reapplyFor is how long each writer re-applies: 20 s in `make test`;
// ROLLGATE_REAPPLY_SECONDS=60 (make bench) runs the measurement.
func reapplyFor(t *testing.T) time.Duration {
	if s := os.Getenv("ROLLGATE_REAPPLY_SECONDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("ROLLGATE_REAPPLY_SECONDS=%q: want a number of seconds", s)
		}
		return time.Duration(n) * time.Second
	}
	return 20 * time.Second
}

// sampleEvery is the independent watcher's period.
const sampleEvery = 50 * time.Millisecond

// TestGitOpsReapplyNeverFlipsHTTPRoute: at a gate, Argo CD re-applies the
// app every second, first with server-side apply (force), then with a
// client-side full-object Update, then Helm with a merge patch; the
// HTTPRoute keeps 80/20 and the stable Service its narrowed selector in
// every sample and every stored version, and no pod moves.
func TestGitOpsReapplyNeverFlipsHTTPRoute(t *testing.T) {
	t.Parallel()
	s := givenRoutedApp(t, routedRollout(gateSteps, gatewayRouting), httpRoute, httpRouteGVK)
	s.flaps(map[routedKey]flapView{
		{"HTTPRoute", "echoserver"}: {rulesView, weightedRules(20)},
		{"Service", "echoserver"}:   {selectorView, stableSelector},
	})
}

// TestGitOpsReapplyNeverFlipsVirtualService: the same through Lua, for an
// Istio DestinationRule and VirtualService.
func TestGitOpsReapplyNeverFlipsVirtualService(t *testing.T) {
	t.Parallel()
	routing := `        customNetworkRefs:
        - {apiVersion: networking.istio.io/v1, kind: DestinationRule, name: echoserver}
        - {apiVersion: networking.istio.io/v1, kind: VirtualService, name: echoserver}`
	s := givenRoutedApp(t, routedRollout(gateSteps, routing), istioRoutes, virtualSvcGVK, destRuleGVK)
	s.flaps(map[routedKey]flapView{
		{"VirtualService", "echoserver"}:  {specView, virtualService(20)},
		{"DestinationRule", "echoserver"}: {specView, subsetsDestinationRule},
		{"Service", "echoserver"}:         {selectorView, stableSelector},
	})
}

// flapView is the part of an object a flap story checks and its state at
// the step.
type flapView struct {
	view routeView
	step string
}

// flaps releases v2 to its gate, then re-applies the Git manifests as each
// writer for reapplyFor while sampling objects every sampleEvery, and
// fails on any sample or stored version of them off the step, any pod
// created or deleted, or any move of the release.
func (s *trafficStory) flaps(objects map[routedKey]flapView) {
	t := s.t
	ro := s.atGate()
	for k, v := range objects {
		s.assertNow(k, v.view, v.step)
	}
	docs := routedApp("echo:2.0", s.routes) + "\n---\n" + s.rolloutYAML()
	for _, writer := range []struct {
		name  string
		write func(ctx context.Context, u *unstructured.Unstructured) error
	}{
		{"server-side apply as " + argocdManager + " with force", s.ssa},
		{"client-side full-object Update as " + argocdManager, s.update},
		{"JSON merge patch as helm", s.mergePatch},
	} {
		s.rec.catchUp(s.w)
		since := len(s.rec.timeline())
		known := map[string]bool{}
		for _, v := range s.rec.timeline() {
			if v.key.kind == "Pod" {
				known[v.key.name] = true
			}
		}
		sampler := s.sample(objects)
		writes, refused := s.reapply(docs, writer.write)
		samples, off := sampler()
		s.rec.catchUp(s.w)
		stored, offStored, created, deleted := 0, 0, 0, 0
		for _, v := range s.rec.timeline()[since:] {
			if v.key.kind == "Pod" {
				switch {
				case v.obj == nil:
					deleted++
				case !known[v.key.name]:
					known[v.key.name] = true
					created++
				}
				continue
			}
			fv, ok := objects[v.key]
			if !ok || v.obj == nil {
				continue
			}
			stored++
			if !reflect.DeepEqual(jsonValue(fv.view(v.obj)), s.norm(fv.step)) {
				offStored++
				t.Errorf("%s: %s stored off its step at resourceVersion %d:\n%s", writer.name, v.key, v.rv, yamlOf(fv.view(v.obj)))
			}
		}
		t.Logf("%s, every second for %s: %d writes (%d refused); %d samples of the %d routing objects every %s, %d off the step; "+
			"%d versions of them stored, %d off the step; pods created %d, deleted %d",
			writer.name, reapplyFor(t), writes, refused, samples, len(objects), sampleEvery, len(off), stored, offStored, created, deleted)
		for _, o := range off {
			t.Errorf("%s: sample off the step: %s", writer.name, o)
		}
		if refused > 0 {
			t.Errorf("%s: %d writes refused, want 0 (a GitOps tool would report a failed sync)", writer.name, refused)
		}
		if created+deleted > 0 {
			t.Errorf("%s: %d pods created and %d deleted at the gate, want none", writer.name, created, deleted)
		}
		if a, b := releaseState(ro), releaseState(s.w.Rollout(s.w.NS, "echoserver")); a != b {
			t.Errorf("%s moved the release:\nbefore %s\nafter  %s", writer.name, a, b)
		}
	}
}

// rolloutYAML is the Rollout as Git declares it.
func (s *trafficStory) rolloutYAML() string {
	ro := s.rec.first(rolloutKey).DeepCopy()
	delete(ro.Object, "status")
	ro.Object["metadata"] = map[string]any{"name": ro.GetName(), "namespace": ro.GetNamespace()}
	return yamlOf(ro.Object)
}

// sample reads objects every sampleEvery until the returned function is
// called; it returns the number of samples and a description of each
// sample off its step.
func (s *trafficStory) sample(objects map[routedKey]flapView) func() (int, []string) {
	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu      sync.Mutex
		samples int
		off     []string
		wg      sync.WaitGroup
	)
	start := time.Now()
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(sampleEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for k, fv := range objects {
				u := &unstructured.Unstructured{}
				u.SetGroupVersionKind(s.gvks[k.kind])
				if err := s.w.C.Get(ctx, client.ObjectKey{Namespace: s.w.NS, Name: k.name}, u); err != nil {
					if ctx.Err() == nil {
						mu.Lock()
						off = append(off, fmt.Sprintf("%s at %s: %v", k, time.Since(start).Round(time.Millisecond), err))
						mu.Unlock()
					}
					continue
				}
				got := jsonValue(fv.view(u))
				mu.Lock()
				samples++
				if !reflect.DeepEqual(got, s.norm(fv.step)) {
					off = append(off, fmt.Sprintf("%s at %s:\n%s", k, time.Since(start).Round(time.Millisecond), yamlOf(got)))
				}
				mu.Unlock()
			}
		}
	}()
	return func() (int, []string) {
		cancel()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return samples, off
	}
}

// reapply writes every document of docs with write once a second for
// reapplyFor; it returns the writes made and how many were refused.
func (s *trafficStory) reapply(docs string, write func(context.Context, *unstructured.Unstructured) error) (writes, refused int) {
	t := s.t
	objs := s.w.Decode(docs)
	end := time.Now().Add(reapplyFor(t))
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for time.Now().Before(end) {
		for _, o := range objs {
			writes++
			if err := write(context.Background(), o.DeepCopy()); err != nil {
				refused++
				t.Logf("%s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
		<-tick.C
	}
	return writes, refused
}

// ssa applies u as Argo CD does with ServerSideApply=true.
func (s *trafficStory) ssa(ctx context.Context, u *unstructured.Unstructured) error {
	return s.w.C.Patch(ctx, u, client.Apply, client.FieldOwner(argocdManager), client.ForceOwnership)
}

// mergePatch writes u as a JSON merge patch, as Helm and kubectl patch
// custom resources.
func (s *trafficStory) mergePatch(ctx context.Context, u *unstructured.Unstructured) error {
	raw, err := json.Marshal(u.Object)
	if err != nil {
		return err
	}
	return s.w.C.Patch(ctx, u, client.RawPatch(types.MergePatchType, raw), client.FieldOwner("helm"))
}

// update replaces the live object with u (client-side, the whole object,
// as `kubectl replace` or a tool that PUTs what Git declares), retrying
// on a conflict with a concurrent write.
func (s *trafficStory) update(ctx context.Context, u *unstructured.Unstructured) error {
	for range 5 {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(u.GroupVersionKind())
		if err := s.w.C.Get(ctx, client.ObjectKeyFromObject(u), live); err != nil {
			return err
		}
		u.SetResourceVersion(live.GetResourceVersion())
		err := s.w.C.Update(ctx, u, client.FieldOwner(argocdManager))
		if !apierrors.IsConflict(err) {
			return err
		}
	}
	return fmt.Errorf("update %s %s: conflicts 5 times", u.GetKind(), u.GetName())
}

// TestRouteChangedInGitMidReleaseIsKept: at a gate, Git changes the
// HTTPRoute (a request timeout on the rule that reaches the app) and Flux
// applies it. The change is live at once with the step's weights on top
// (the route is never stored with Git's 100/0), and it is what the route
// keeps when the release ends.
func TestRouteChangedInGitMidReleaseIsKept(t *testing.T) {
	t.Parallel()
	s := givenRoutedApp(t, routedRollout(gateSteps, gatewayRouting), httpRoute, httpRouteGVK)
	ro := s.atGate()
	route := routedKey{"HTTPRoute", "echoserver"}
	s.assertNow(route, rulesView, weightedRules(20))

	// When Git adds a timeout to the rule and Flux applies the route.
	s.rec.catchUp(s.w)
	since := len(s.rec.timeline())
	s.w.ApplyYAML(strings.Replace(httpRoute, "  - backendRefs: [{name: echoserver, port: 80}]",
		"  - backendRefs: [{name: echoserver, port: 80}]\n    timeouts: {request: 5s}", 1))

	// Then the route carries the timeout and still 80/20, in every version stored.
	withTimeout := func(rules string) string {
		return strings.Replace(rules, "  matches: [{path: {type: PathPrefix, value: /}}]",
			"  matches: [{path: {type: PathPrefix, value: /}}]\n  timeouts: {request: 5s}", 1)
	}
	s.assertNow(route, rulesView, withTimeout(weightedRules(20)))
	s.rec.catchUp(s.w)
	for _, v := range s.rec.timeline()[since:] {
		if v.key == route && v.obj != nil && !reflect.DeepEqual(jsonValue(rulesView(v.obj)), s.norm(withTimeout(weightedRules(20)))) {
			t.Errorf("the HTTPRoute was stored off the step at resourceVersion %d:\n%s", v.rv, yamlOf(rulesView(v.obj)))
		}
	}

	// When step 1 is approved and the release completes.
	s.w.Update(ro, func() {
		ro.Spec.Approvals = append(ro.Spec.Approvals, v1alpha1.Approval{Revision: ro.Status.CanaryRevision, Step: 1})
	})
	s.w.Eventually(60*time.Second, "the release completes", func(ctx context.Context) (bool, error) {
		st := s.w.Rollout(s.w.NS, "echoserver").Status
		return st.Phase == v1alpha1.PhaseHealthy && st.StableRevision == ro.Status.CanaryRevision, nil
	})

	// Then the route is Git's new version, without rollgate's marks.
	s.w.Eventually(30*time.Second, "the route restored", func(ctx context.Context) (bool, error) {
		return reflect.DeepEqual(s.get(route, rulesView), s.norm(withTimeout(declaredRules))), nil
	})
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(httpRouteGVK)
	if err := s.w.C.Get(context.Background(), client.ObjectKey{Namespace: s.w.NS, Name: "echoserver"}, u); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{traffic.AnnotationHeld, v1alpha1.AnnotationOriginal} {
		if _, ok := u.GetAnnotations()[k]; ok {
			t.Errorf("the route keeps the annotation %s after the release", k)
		}
	}
	if _, ok := u.GetLabels()[traffic.LabelHeld]; ok {
		t.Errorf("the route keeps the label %s after the release", traffic.LabelHeld)
	}
}
