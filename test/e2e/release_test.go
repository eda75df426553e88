package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
)

const echoRollout = `
apiVersion: rollgate.dev/v1alpha1
kind: Rollout
metadata:
  name: echoserver
  namespace: demo
spec:
  workloadRef: {apiVersion: apps/v1, kind: Deployment, name: echoserver}
  strategy:
    canary:
      steps:
      - traffic: "20%"
        replicas: 1
        pause: {}            # a manual gate: merge the approval branch
      - traffic: "40%"
        replicas: "40%"
        pause: {duration: 2}
      - traffic: "100%"
        replicas: "100%"
      trafficRoutings:
      - service: echoserver
        gracePeriodSeconds: 0
        gateway: {httpRouteName: echoserver}
  git: {repository: app-repo, path: apps/echoserver/rollout.yaml}
`

func echoApp(image string) string {
	return fmt.Sprintf(`
apiVersion: apps/v1
kind: Deployment
metadata: {name: echoserver, namespace: demo}
spec:
  replicas: 5
  selector: {matchLabels: {app: echoserver}}
  template:
    metadata: {labels: {app: echoserver}}
    spec:
      containers:
      - name: echoserver
        image: %s
---
apiVersion: v1
kind: Service
metadata: {name: echoserver, namespace: demo}
spec:
  selector: {app: echoserver}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: echoserver, namespace: demo}
spec:
  parentRefs: [{name: public}]
  rules:
  - backendRefs: [{name: echoserver, port: 80}]
`, image)
}

// TestReleaseWithApprovalMergedInGit is the story rollgate exists for.
func TestReleaseWithApprovalMergedInGit(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	w.ensureNamespace("demo")
	repoURL, err := w.git.CreateRepo("app", map[string]string{"apps/echoserver/rollout.yaml": echoRollout})
	if err != nil {
		t.Fatal(err)
	}
	w.applyYAML(fmt.Sprintf(`
apiVersion: rollgate.dev/v1alpha1
kind: Repository
metadata: {name: app-repo, namespace: demo}
spec: {url: %q, branch: main, interval: 1s, status: {window: 1s}}
`, repoURL))

	// Given a running workload and its Rollout, applied from Git.
	w.applyYAML(echoApp("echo:1.0"))
	w.applyYAML(echoRollout)
	w.eventually(60*time.Second, "v1 running and the Rollout healthy", func(ctx context.Context) (bool, error) {
		ro := w.rollout("demo", "echoserver")
		return w.pods("demo", "echoserver")["echo:1.0"] == [2]int{5, 5} && conditions.IsReady(ro) &&
			w.deployment("demo", "echoserver").Labels[v1alpha1.LabelControlled] != "", nil
	})

	// When the image changes in Git and Flux applies it.
	w.applyYAML(echoApp("echo:2.0"))

	// Then batch 1 has exactly one new pod and 20% of traffic, and the
	// release waits for approval on an approval branch in Git.
	var ro *v1alpha1.Rollout
	w.eventually(90*time.Second, "step 1 waiting for approval", func(ctx context.Context) (bool, error) {
		ro = w.rollout("demo", "echoserver")
		return ro.Status.AwaitingApproval != nil && ro.Status.AwaitingApproval.Branch != "", nil
	})
	if got := w.pods("demo", "echoserver"); got["echo:2.0"] != [2]int{1, 1} || got["echo:1.0"] != [2]int{4, 4} {
		t.Fatalf("step 1: want 1 new and 4 old ready pods, got %v", got)
	}
	if d := w.deployment("demo", "echoserver"); !d.Spec.Paused {
		t.Fatalf("the Deployment must be held paused during the release: %+v", d.Spec)
	}
	assertWeights(t, w, 80, 20)
	if conditions.IsStalled(ro) || conditions.IsReady(ro) || !conditions.IsTrue(ro, v1alpha1.AwaitingApprovalCondition) {
		t.Fatalf("waiting for approval must be AwaitingApproval=True, Ready=False, not Stalled: %+v", ro.Status.Conditions)
	}
	assertKstatus(t, ro)
	branch := ro.Status.AwaitingApproval.Branch
	if want := gitsync.ApprovalBranch("demo", "echoserver", gitsync.Approval{Revision: ro.Status.CanaryRevision, Step: 1}); branch != want {
		t.Fatalf("approval branch %q, want %q", branch, want)
	}

	// A controller restart while waiting skips no gate.
	w.stopController()
	w.startController()
	time.Sleep(3 * time.Second) // several fetch intervals: nothing may move without the merge
	if ro = w.rollout("demo", "echoserver"); ro.Status.CurrentStepIndex != 1 || ro.Status.AwaitingApproval == nil {
		t.Fatalf("after a restart the gate must still hold: step %d, awaiting %v", ro.Status.CurrentStepIndex, ro.Status.AwaitingApproval)
	}

	// When a user merges the approval branch.
	if _, err := w.git.Merge("app", "main", branch, "Merge approval of echoserver step 1"); err != nil {
		t.Fatal(err)
	}

	// Then the release goes on, to completion, before Flux even applies the
	// Rollout manifest the merge changed.
	w.eventually(120*time.Second, "the release completes", func(ctx context.Context) (bool, error) {
		ro = w.rollout("demo", "echoserver")
		return ro.Status.Phase == v1alpha1.PhaseHealthy && conditions.IsReady(ro) && ro.Status.StableRevision == ro.Status.CanaryRevision, nil
	})
	w.eventually(60*time.Second, "all pods on v2 and the Deployment given back", func(ctx context.Context) (bool, error) {
		d := w.deployment("demo", "echoserver")
		return w.pods("demo", "echoserver")["echo:2.0"] == [2]int{5, 5} && !d.Spec.Paused && d.Spec.Strategy.Type != "Recreate", nil
	})
	assertKstatus(t, w.rollout("demo", "echoserver"))
	var route gatewayv1.HTTPRoute
	if err := w.c.Get(ctx, client.ObjectKey{Namespace: "demo", Name: "echoserver"}, &route); err != nil {
		t.Fatal(err)
	}
	if refs := route.Spec.Rules[0].BackendRefs; len(refs) != 1 || refs[0].Name != "echoserver" {
		t.Fatalf("the HTTPRoute must be back to what Git declares, got %+v", refs)
	}

	// And Git tells the story without the cluster.
	w.eventually(30*time.Second, "status in Git", func(ctx context.Context) (bool, error) {
		s, err := w.git.ReadFile("app", "rollgate/status", "demo/echoserver.yaml")
		return err == nil && strings.Contains(s, "phase: Healthy"), nil
	})
}

// assertWeights checks the share of requests each backend of the
// HTTPRoute's first rule gets, in percent (a missing backend gets none).
func assertWeights(t *testing.T, w *world, stable, canary int32) {
	t.Helper()
	w.eventually(30*time.Second, fmt.Sprintf("HTTPRoute split %d/%d", stable, canary), func(ctx context.Context) (bool, error) {
		var route gatewayv1.HTTPRoute
		if err := w.c.Get(ctx, client.ObjectKey{Namespace: "demo", Name: "echoserver"}, &route); err != nil {
			return false, err
		}
		got, total := map[string]int32{}, int32(0)
		for _, ref := range route.Spec.Rules[0].BackendRefs {
			weight := int32(1)
			if ref.Weight != nil {
				weight = *ref.Weight
			}
			got[string(ref.Name)] += weight
			total += weight
		}
		if total == 0 {
			return false, nil
		}
		return got["echoserver"]*100/total == stable && got["echoserver-canary"]*100/total == canary, nil
	})
}
