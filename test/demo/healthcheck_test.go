package demo

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// kustomizationTimeout is the Kustomization's spec.timeout in the health
// check story: a gate outlasts it three times.
const kustomizationTimeout = 10 * time.Second

// TestKustomizationHealthCheckAtGate: the demo's Kustomization lists the
// Rollout in spec.healthChecks, with a 10 s timeout (docs/flux.md, section
// 1). The real kustomize-controller applies the new image and its health
// check passes once rollgate holds the new revision; while the gate waits
// three times the timeout, the Kustomization stays Ready at that commit
// (never HealthCheckFailed).
func TestKustomizationHealthCheckAtGate(t *testing.T) {
	t.Parallel()
	s := givenDemoWithHealthCheck(t)
	commit, err := s.git.Commit(RepoName, Branch, "echoserver: release 2.0", map[string]string{deploymentFile: deploymentYAML(NewImage)})
	s.must(err)
	s.p.step("developer: pushed %s: %s image %s -> %s", short(commit), deploymentFile, OldImage, NewImage)
	s.must(s.until(3*time.Minute, "the gate and the Kustomization Ready at "+short(commit), func(ctx context.Context) (bool, string, error) {
		ro, err := s.rollout(ctx)
		if err != nil {
			return false, "", err
		}
		ready, why, err := s.kustomizationReadyAt(ctx, commit)
		return ready && ro.Status.AwaitingApproval != nil, fmt.Sprintf("%s; Rollout %s step %d", why, ro.Status.Phase, ro.Status.CurrentStepIndex), err
	}))
	s.p.step("kustomize-controller: applied %s, health check passed; rollgate: step 1 waits for approval", short(commit))
	// Every 5 s interval kustomize-controller reconciles again (Ready is
	// Unknown, "Reconciliation in progress", for a moment): it must never
	// turn False, and must end each run Ready.
	hold := 3 * kustomizationTimeout
	until := time.Now().Add(hold)
	samples, readySamples := 0, 0
	s.must(s.until(hold+time.Minute, "the Kustomization never to fail at the gate", func(ctx context.Context) (bool, string, error) {
		ro, err := s.rollout(ctx)
		if err != nil {
			return false, "", err
		}
		ready, why, err := s.kustomizationReadyAt(ctx, commit)
		if err != nil {
			return false, "", err
		}
		if strings.Contains(why, "Ready=False") || ro.Status.AwaitingApproval == nil {
			return false, "", fmt.Errorf("at the gate: %s; Rollout %s awaiting approval %v", why, ro.Status.Phase, ro.Status.AwaitingApproval != nil)
		}
		samples++
		if ready {
			readySamples++
		}
		return time.Now().After(until) && ready, why, nil
	}))
	s.p.step("the Kustomization never failed for %s at the gate: %d samples, %d Ready=True, 0 Ready=False", hold, samples, readySamples)
	if readySamples*2 < samples {
		t.Errorf("the Kustomization was Ready in %d of %d samples at the gate, want most", readySamples, samples)
	}
}

// givenDemoWithHealthCheck starts the demo's platform, lets Flux apply
// version 1, then gives the Kustomization a health check on the Rollout.
func givenDemoWithHealthCheck(t *testing.T) *helmStory {
	s := &helmStory{t: t}
	s.world, s.ctx = newTestWorld(t, nil, 6*time.Minute)
	ctx := s.ctx
	var err error
	s.must(s.setup(ctx))
	objs := fluxObjects(s.repoURL)
	kustomization := objs[strings.Index(objs, "---\n")+4:]
	kustomization = strings.Replace(kustomization, "  timeout: 1m\n", fmt.Sprintf("  timeout: %s\n", kustomizationTimeout), 1) +
		"  healthChecks:\n  - {apiVersion: rollgate.dev/v1alpha1, kind: Rollout, name: " + App + ", namespace: " + Namespace + "}\n"
	_, err = s.applyYAML(ctx, kustomization)
	s.must(err)
	s.p.step("platform: Kustomization %s/%s health-checks Rollout %s/%s, timeout %s", FluxNamespace, App, Namespace, App, kustomizationTimeout)
	return s
}

// kustomizationReadyAt reports whether the Kustomization applied commit
// and is Ready (its health checks passed).
func (s *helmStory) kustomizationReadyAt(ctx context.Context, commit string) (bool, string, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(kustomizationGVK)
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: FluxNamespace, Name: App}, u); err != nil {
		return false, "", err
	}
	rev, _, _ := unstructured.NestedString(u.Object, "status", "lastAppliedRevision")
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	ready, reason, msg := "", "", ""
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == "Ready" {
			ready, reason, msg = fmt.Sprint(m["status"]), fmt.Sprint(m["reason"]), fmt.Sprint(m["message"])
		}
	}
	ok := strings.HasSuffix(rev, commit) && ready == "True"
	return ok, fmt.Sprintf("Kustomization at %s Ready=%s %s: %s", rev, ready, reason, msg), nil
}
