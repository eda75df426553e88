package chart

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/chartrun"
	"github.com/rollgate/rollgate/test/repo"
)

// TestShardedChartReleases installs the chart with one shard and runs
// both controller Deployments as the chart declares them (their args,
// their ServiceAccount's RBAC, through test/chartrun). A Rollout labelled
// for the shard is released to the end, through two manual gates, by the
// shard's controller: only the shard reports it in its metrics, the main
// controller never does, and neither is refused a request. A Rollout
// labelled for a shard that no Deployment runs is reconciled by no one.
func TestShardedChartReleases(t *testing.T) {
	t.Parallel()
	s := newUpgradeStory(t)
	bin := buildCurrentController(t)
	s.helm("install", release, chartDir(), "-n", releaseNS, "--create-namespace", "--set", "replicaCount=1",
		"--set", "sharding.shards={shard1}", "--wait", "--timeout=2m")
	main := chartrun.StartT(t, chartrun.Options{Kubeconfig: s.cluster.Kubeconfig, Namespace: releaseNS, Deployment: controller, Binary: bin})
	shard := chartrun.StartT(t, chartrun.Options{Kubeconfig: s.cluster.Kubeconfig, Namespace: releaseNS, Deployment: controller + "-shard1", Binary: bin})
	s.ctrl = shard
	for _, c := range []*chartrun.Controller{main, shard} {
		if !strings.Contains(strings.Join(c.Args(), " "), "--watch-label-selector=") {
			t.Fatalf("controller run without the chart's --watch-label-selector: %v", c.Args())
		}
	}

	// Given the application in shard1, released at v1.
	labelled := strings.Replace(rolloutYAML, "metadata: {name: web, namespace: shop}",
		"metadata: {name: web, namespace: shop, labels: {sharding.fluxcd.io/key: shard1}}", 1)
	if labelled == rolloutYAML {
		t.Fatal("the Rollout manifest changed: cannot label it")
	}
	// And a Rollout labelled for a shard that no Deployment runs.
	orphan := strings.Replace(strings.ReplaceAll(labelled, "web", "orphan"), "shard1", "shard9", 1)
	s.apply(namespaceYAML + serviceYAML + deploymentYAML(webV1) + labelled + orphan)
	s.until(90*time.Second, "v1 on every pod and the Rollout Healthy", func() (bool, string) {
		ro := s.rollout()
		return ro.Status.Phase == "Healthy" && s.deployment().Labels["rollgate.dev/controlled"] != "", fmt.Sprint(positionOf(ro))
	})

	// When v2 arrives, it goes through both gates to the end.
	s.apply(deploymentYAML(webV2))
	s.atGate(1, 1)
	canary := s.rollout().Status.CanaryRevision
	s.approve(1)
	s.atGate(2, appReplicas/2)
	s.approve(2)
	s.assertReleased(webV2, canary)

	// Then the shard released it and the main controller never did.
	if !reports(t, shard, "web") {
		t.Errorf("the shard's metrics do not report Rollout shop/web")
	}
	if reports(t, main, "web") {
		t.Errorf("the main controller reports Rollout shop/web, which is labelled for shard1")
	}
	s.assertNoForbidden(main, shard)

	// And the Rollout of the shard nobody runs, there since the start of
	// the release, was never touched: no finalizer, no status.
	var ro v1alpha1.Rollout
	if err := s.c.Get(context.Background(), client.ObjectKey{Namespace: appNS, Name: "orphan"}, &ro); err != nil {
		t.Fatal(err)
	}
	if len(ro.Finalizers) > 0 || ro.Status.ObservedGeneration != 0 || reports(t, main, "orphan") || reports(t, shard, "orphan") {
		t.Errorf("a Rollout labelled for shard9, which no controller runs, was reconciled: finalizers %v, status %+v", ro.Finalizers, ro.Status)
	}
}

// reports tells whether controller c exports the phase of Rollout
// shop/<name>: rollgate's per-Rollout metrics come only from the
// instance that reconciles it.
func reports(t *testing.T, c *chartrun.Controller, name string) bool {
	t.Helper()
	body, err := httpGet(c.MetricsURL())
	if err != nil {
		t.Fatalf("scrape %s: %v", c.MetricsURL(), err)
	}
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "rollgate_rollout_phase{") && strings.Contains(line, `name="`+name+`"`) && strings.Contains(line, `namespace="`+appNS+`"`) {
			return true
		}
	}
	return false
}

// buildCurrentController builds cmd/rollgate-controller of this tree
// (bin/rollgate-controller may predate the flags the chart now passes).
func buildCurrentController(t *testing.T) string {
	t.Helper()
	return buildCurrent(t, "rollgate-controller")
}

// buildCurrent builds ./cmd/<name> into the test's temporary folder: a
// story runs the code under test, whatever bin/ holds.
func buildCurrent(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/"+name)
	cmd.Dir = repo.Root()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/%s: %v\n%s", name, err, out)
	}
	return bin
}
