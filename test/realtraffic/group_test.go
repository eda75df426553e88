package realtraffic

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/rig"
)

// groupSteps are the steps of both members of the lockstep story: the
// group's gate at 20%, then 60% for 30 s (a window measured in each), then
// 100%.
const groupSteps = `
      - traffic: "20%"
        replicas: 1
        pause: {}
      - traffic: "60%"
        replicas: "60%"
        pause: {duration: 30}
      - traffic: "100%"
        replicas: "100%"`

// groupRate is the load on each member.
const groupRate = 100

// frontend is the second member of the lockstep story: the sample app as
// Deployment frontend at image, its Service and an HTTPRoute sending
// /frontend to it, and its Rollout in group shop.
func frontend(image string) string {
	wl := workload(image)
	wl = wl[strings.Index(wl, "---")+3:] // the namespace comes with the first member
	wl = strings.NewReplacer("name: echoserver", "name: frontend", "app: echoserver", "app: frontend").Replace(wl)
	return wl + `
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: frontend, namespace: demo}
spec:
  parentRefs: [{name: public}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /frontend}}]
    backendRefs: [{name: frontend, port: 80}]
---` + rig.Rollout{Name: "frontend", Namespace: "demo", Group: "shop",
		Strategy: "      steps:" + groupSteps + "\n" + strings.ReplaceAll(echoserverRoute, "echoserver", "frontend")}.YAML()
}

// TestLockstepGroupUnderLoad: two Deployments behind their own HTTPRoutes,
// echoserver and frontend, released as lockstep group shop under 100
// requests/s each through Traefik. Both get v2; the group waits at one
// gate, echoserver's (the coordinator, first by name), whose approval
// branch is merged in Git; frontend waits for it without an approval of
// its own. Then both take 60% and 100% together. Each member's share is
// measured at each step; a reader listing both Rollouts every 100 ms never
// sees a member start a step before the other finished the one before; no
// request fails on either route.
func TestLockstepGroupUnderLoad(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	w := newWorldOf(t, ctx, worldOptions{
		rollout: rollout(groupSteps) + "  group: {name: shop}\n",
		extra:   func(*world) string { return frontend("localhost/verserver:v1") },
	})
	w.Until(ctx, 2*time.Minute, "frontend answers v1 and its Rollout is healthy", func() (bool, string) {
		body, err := get(w.url + "frontend")
		ro := w.member(ctx, "frontend")
		return err == nil && strings.HasPrefix(body, "v1 ") && ro.Status.Phase == v1alpha1.PhaseHealthy,
			fmt.Sprintf("frontend: %q %v; %s", body, err, describe(ro))
	})
	loads := map[string]*load{"echoserver": startLoad(w.url, groupRate, nil), "frontend": startLoad(w.url+"frontend", groupRate, nil)}
	stopped := false
	defer func() {
		if !stopped {
			for _, l := range loads {
				l.stop()
			}
		}
	}()
	measure := func(name string, declared float64) {
		t.Helper()
		var wg sync.WaitGroup
		for _, m := range []string{"echoserver", "frontend"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				window(t, ctx, loads[m], false, m+" "+name, "v2", declared)
			}()
		}
		wg.Wait()
	}
	rec := rig.RecordGroup(w.C, w.NS, 100*time.Millisecond)

	start := time.Now()
	w.ApplyYAML(app("localhost/verserver:v2", w.port()) + "---" + frontend("localhost/verserver:v2"))
	w.Until(ctx, 3*time.Minute, "both members at the group's gate: echoserver asks for the approval, frontend waits for it", func() (bool, string) {
		e, f := w.member(ctx, "echoserver"), w.member(ctx, "frontend")
		atGate := func(ro *v1alpha1.Rollout) bool {
			return ro.Status.CurrentStepIndex == 1 && ro.Status.CurrentStepState == v1alpha1.StepPaused && ro.Status.CanaryWeight == 20
		}
		ok := atGate(e) && e.Status.AwaitingApproval != nil && atGate(f) && f.Status.AwaitingApproval == nil &&
			strings.Contains(f.Status.Message, "approve step 1 of Rollout echoserver")
		return ok, "echoserver: " + describe(e) + "; frontend: " + describe(f)
	})
	t.Logf("both at the group's gate %s after the image bump", time.Since(start).Round(time.Millisecond))
	measure("step 1, declared 20%", 20)

	w.mergeApproval(ctx)
	w.applyDeclared(ctx)
	approved := time.Now()
	for _, m := range []string{"echoserver", "frontend"} {
		w.Until(ctx, 2*time.Minute, m+" at 60%", func() (bool, string) {
			ro := w.member(ctx, m)
			return ro.Status.CurrentStepIndex == 2 && ro.Status.CurrentStepState == v1alpha1.StepPaused && ro.Status.CanaryWeight == 60, describe(ro)
		})
	}
	t.Logf("both at 60%% %s after the group's approval", time.Since(approved).Round(time.Millisecond))
	measure("step 2, declared 60%", 60)
	for _, m := range []string{"echoserver", "frontend"} {
		w.Until(ctx, 3*time.Minute, m+" released", func() (bool, string) {
			ro := w.member(ctx, m)
			if ro.Status.Phase == v1alpha1.PhaseFailed {
				t.Fatalf("%s failed: %s", m, ro.Status.Message)
			}
			return ro.Status.Phase == v1alpha1.PhaseHealthy && ro.Status.CanaryRevision == ro.Status.StableRevision, describe(ro)
		})
	}
	t.Logf("the group released %s after its approval", time.Since(approved).Round(time.Millisecond))
	measure("after completion", 100)

	rec.Check(t, 2)
	for _, l := range loads {
		l.stop()
	}
	stopped = true
	for _, m := range []string{"echoserver", "frontend"} {
		wholeStory(t, m+", whole story", loads[m])
	}
}

// member reads Rollout name of the story.
func (w *world) member(ctx context.Context, name string) *v1alpha1.Rollout {
	ro := &v1alpha1.Rollout{}
	_ = w.C.Get(ctx, types.NamespacedName{Namespace: w.NS, Name: name}, ro)
	return ro
}
