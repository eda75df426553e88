package chart

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	appsv1 "k8s.io/api/apps/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/chartrun"
	"github.com/rollgate/rollgate/test/repo"
)

// The release of a Deployment is waiting at a manual gate when the chart is
// upgraded from the previous version and the controller pod replaced. The
// release lives in the Rollout's status (and in Git), not in the
// controller: the new controller resumes it where it stands. Its gates stay
// closed, no step is skipped or repeated, no pod is touched, and the
// webhook keeps holding the Deployment against the GitOps tool's re-apply.

const (
	releaseNS   = "rollgate-system"
	release     = "rg"
	controller  = "rg-rollgate" // the chart's full name for release rg
	appNS       = "shop"
	fluxManager = "kustomize-controller" // Flux's field manager
	webV1       = "web:1"
	webV2       = "web:2"
	webV3       = "web:3"
	appReplicas = 4
	// stillFor is how long the Rollout must not move under the new
	// controller, once it leads and has reconciled the Rollout.
	stillFor = 5 * time.Second
)

func TestUpgradeMidRelease(t *testing.T) {
	t.Parallel()
	s := newUpgradeStory(t)

	// Given the previous chart installed with its controller running, and
	// the release of a Deployment waiting at the gate of step 1.
	s.installPrevious()
	s.givenAtGate()
	before := s.snapshot()
	t.Logf("at the gate of step 1: %s; pods %v", before.position, before.pods)
	lease := s.leaseHolder()
	still := s.watchStill(before)

	// When the chart is upgraded as docs/install.md says, and the
	// controller pod replaced as the Deployment's rollout would.
	upgraded := time.Now()
	s.upgradeChart(before)
	s.replaceController(lease, before.webhook)
	leading := time.Now()
	t.Logf("new controller leading %s after the upgrade began", leading.Sub(upgraded).Round(time.Millisecond))

	// Then the new controller holds the release where it stood, and two
	// approvals complete it.
	s.resumedThenReleased(before, still, leading)
	// And a release reverted in Git mid-release goes back, with the
	// chart's RBAC.
	s.revertedMidRelease()
	s.assertNoForbidden(s.old, s.ctrl)

	// Finally helm uninstall removes the release; the CRDs, and so the
	// Rollout, stay.
	s.uninstall()
}

// resumedThenReleased checks a release resumed by a new controller (one
// that leads since leading) at the gate of step 1 snapshot before saw:
// the webhook holds the Deployment against Flux's re-apply; the release
// does not move (same step, same state, gate closed, no pod created or
// deleted since before, watched by still); when step 1 is approved, step 2
// runs half the pods and waits; when step 2 is approved, the release
// completes and the Deployment is handed back as Git declares it.
func (s *upgradeStory) resumedThenReleased(before snapshot, still *stillWatch, leading time.Time) {
	s.t.Helper()
	s.assertHeldAgainstReapply(before)
	time.Sleep(stillFor) // deliberately: nothing may move without an approval
	s.assertStill(before, still.stop(), leading)
	s.approve(1)
	s.atGate(2, appReplicas/2)
	s.approve(2)
	s.assertReleased(webV2, before.canary)
}

// revertedMidRelease releases v3 to the gate of step 1, then reverts it
// in Git (v2 applied again, as Flux applies a revert commit): the
// controller scales v3's ReplicaSet back to nothing and deletes it, and
// hands the Deployment back at v2 with the Rollout Healthy. It runs with
// the chart's RBAC (chartrun), so a verb the chart lacks for this path
// fails here.
func (s *upgradeStory) revertedMidRelease() {
	s.t.Helper()
	stable := s.rollout().Status.StableRevision
	s.apply(deploymentYAML(webV3))
	s.atGateOf(1, 1, webV3, webV2)
	start := time.Now()
	s.apply(deploymentYAML(webV2))
	s.until(120*time.Second, "v3 reverted: v2 on every pod, v3's ReplicaSet gone, the Deployment released, the Rollout Healthy at v2", func() (bool, string) {
		ro, pods, d := s.rollout(), s.pods(), s.deployment()
		_, held := d.Annotations[v1alpha1.AnnotationControl]
		var rss appsv1.ReplicaSetList
		if err := s.c.List(context.Background(), &rss, client.InNamespace(appNS)); err != nil {
			s.t.Fatal(err)
		}
		var images []string
		for _, rs := range rss.Items {
			images = append(images, rs.Spec.Template.Spec.Containers[0].Image)
		}
		return ro.Status.Phase == v1alpha1.PhaseHealthy && conditions.IsReady(ro) && ro.Status.StableRevision == stable &&
				pods.count(webV2) == ready(appReplicas) && len(pods) == appReplicas && !held && !d.Spec.Paused && !slices.Contains(images, webV3),
			fmt.Sprintf("%s, pods %v, ReplicaSets of %v, paused %t, held %t", positionOf(ro), pods, images, d.Spec.Paused, held)
	})
	s.t.Logf("v3 reverted after %s", time.Since(start).Round(time.Millisecond))
}

// installPrevious installs the previous chart release with one replica and
// starts its controller.
func (s *upgradeStory) installPrevious() {
	s.t.Helper()
	path, version := previousChart(s.t)
	s.prevVersion = version
	s.helm("install", release, path, "-n", releaseNS, "--create-namespace", "--set", "replicaCount=1", "--wait", "--timeout=2m")
	s.assertChartLabels(version)
	s.old = s.startController(previousController(s.t))
	s.assertChartFlags(s.old)
}

// givenAtGate creates the application at v1 and its Rollout, waits until
// it is Healthy, then applies v2 as Flux would and waits for step 1's gate.
func (s *upgradeStory) givenAtGate() {
	s.t.Helper()
	s.apply(namespaceYAML + serviceYAML + deploymentYAML(webV1) + rolloutYAML)
	s.until(90*time.Second, "v1 on 4 pods and the Rollout Healthy", func() (bool, string) {
		ro, pods := s.rollout(), s.pods()
		covered := s.deployment().Labels[v1alpha1.LabelControlled] != ""
		return ro.Status.Phase == v1alpha1.PhaseHealthy && conditions.IsReady(ro) && pods.count(webV1) == ready(appReplicas) && covered,
			fmt.Sprintf("%s, pods %v, covered %t", positionOf(ro), pods, covered)
	})
	s.warnings.take()
	s.apply(deploymentYAML(webV2))
	if w := strings.Join(s.warnings.take(), "; "); !strings.Contains(w, "releases this new revision in steps") {
		s.t.Fatalf("the %s controller's webhook did not hold v2; warnings: %q", s.prevVersion, w)
	}
	s.atGate(1, 1)
}

// upgradeChart applies the current chart's CRDs and upgrades the release
// to the current chart, keeping its values; the live webhook registration
// must survive.
func (s *upgradeStory) upgradeChart(before snapshot) {
	s.t.Helper()
	s.applyCRDs()
	s.helm("upgrade", release, chartDir(), "-n", releaseNS, "--reset-then-reuse-values", "--wait", "--timeout=2m")
	s.assertChartLabels(chartVersion(s.t))
	s.assertWebhooksKept(before.webhook, s.old.WebhookURL())
	var pdbs policyv1.PodDisruptionBudgetList
	if err := s.c.List(context.Background(), &pdbs, client.InNamespace(releaseNS)); err != nil || len(pdbs.Items) != 0 {
		s.t.Errorf("with one replica the chart must render no PodDisruptionBudget: %d (%v)", len(pdbs.Items), err)
	}
}

// replaceController stops the old controller and starts one from the
// upgraded Deployment, and waits until it leads (the old one's Lease has
// expired), serves the webhooks with the same CA, and has reconciled the
// Rollout.
func (s *upgradeStory) replaceController(lease string, bundle []byte) {
	s.t.Helper()
	if err := s.old.Stop(); err != nil {
		s.t.Fatalf("stop the %s controller: %v", s.prevVersion, err)
	}
	s.startController("")
	s.assertChartFlags(s.ctrl)
	s.until(60*time.Second, "the new controller to lead (the old one's Lease expires)", func() (bool, string) {
		h := s.leaseHolder()
		return h != "" && h != lease, "holder " + h
	})
	s.until(30*time.Second, "the webhooks registered at the new controller's URL, with the same CA", func() (bool, string) {
		url, ca := s.webhookRegistration()
		return strings.HasPrefix(url, s.ctrl.WebhookURL()+"/") && bytes.Equal(ca, bundle), fmt.Sprintf("url %s, CA bundle %d bytes", url, len(ca))
	})
	s.until(30*time.Second, "the new controller to reconcile the Rollout", func() (bool, string) {
		n, _ := s.reconciles()
		return n > 0, fmt.Sprintf("%d reconciles", n)
	})
}

// assertHeldAgainstReapply re-applies v2 as Flux does at every interval:
// the webhook must re-assert the hold.
func (s *upgradeStory) assertHeldAgainstReapply(before snapshot) {
	s.t.Helper()
	s.warnings.take()
	s.apply(deploymentYAML(webV2))
	if w := strings.Join(s.warnings.take(), "; "); !strings.Contains(w, "a release by Rollout web is in progress") {
		s.t.Errorf("Flux's re-apply was not re-asserted by the webhook; warnings: %q", w)
	}
	d := s.deployment()
	if !d.Spec.Paused || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType ||
		d.Annotations[v1alpha1.AnnotationControl] != before.control {
		s.t.Fatalf("after Flux's re-apply the Deployment is no longer held: paused %t, strategy %s, control %q (before: %q)",
			d.Spec.Paused, d.Spec.Strategy.Type, d.Annotations[v1alpha1.AnnotationControl], before.control)
	}
}

// assertStill compares the release now with before, and checks every
// Rollout write and pod event the watch saw in between.
func (s *upgradeStory) assertStill(before snapshot, seen *stillWatch, leading time.Time) {
	s.t.Helper()
	t := s.t
	reconciled, failed := s.reconciles()
	after := s.snapshot()
	if after.position != before.position {
		t.Errorf("the release moved across the upgrade:\n before %s\n after  %s", before.position, after.position)
	}
	if !slices.Equal(after.pods, before.pods) {
		t.Errorf("pods changed across the upgrade:\n before %v\n after  %v", before.pods, after.pods)
	}
	if after.replicaSets != before.replicaSets {
		t.Errorf("ReplicaSets changed across the upgrade: %s -> %s", before.replicaSets, after.replicaSets)
	}
	for _, p := range seen.rollouts {
		if p != before.position {
			t.Errorf("a status write moved the release during the upgrade: %s", p)
		}
	}
	if len(seen.podChanges) > 0 || seen.err != nil {
		t.Errorf("pods were created or deleted during the upgrade (watch error: %v): %v", seen.err, seen.podChanges)
	}
	if failed > 0 {
		t.Errorf("the new controller failed %d reconciles", failed)
	}
	t.Logf("the Rollout stayed at %s for %s (%s under the new controller, %d reconciles by it); %d pods unchanged (%d pod events, %d Rollout writes watched)",
		before.position.short(), after.at.Sub(before.at).Round(time.Millisecond), after.at.Sub(leading).Round(time.Millisecond),
		reconciled, len(after.pods), seen.podEvents, len(seen.rollouts))
	if t.Failed() {
		t.FailNow()
	}
}

// assertReleased waits until image runs on every pod, the Rollout is
// Healthy with canary as its stable revision, and the Deployment is handed
// back as Git declares it.
func (s *upgradeStory) assertReleased(image, canary string) {
	s.t.Helper()
	start := time.Now()
	s.until(120*time.Second, image+" on every pod, the Deployment released, the Rollout Healthy", func() (bool, string) {
		ro, pods, d := s.rollout(), s.pods(), s.deployment()
		_, held := d.Annotations[v1alpha1.AnnotationControl]
		return ro.Status.Phase == v1alpha1.PhaseHealthy && conditions.IsReady(ro) &&
				conditions.GetReason(ro, v1alpha1.ReadyCondition) == v1alpha1.ReasonSucceeded &&
				pods.count(image) == ready(appReplicas) && len(pods) == appReplicas &&
				!d.Spec.Paused && !held && d.Spec.Strategy.Type == appsv1.RollingUpdateDeploymentStrategyType,
			fmt.Sprintf("%s (%s), pods %v, paused %t, held %t, strategy %s", positionOf(ro),
				conditions.GetReason(ro, v1alpha1.ReadyCondition), pods, d.Spec.Paused, held, d.Spec.Strategy.Type)
	})
	if ro := s.rollout(); ro.Status.StableRevision != canary {
		s.t.Errorf("stable revision %s, want the released %s", ro.Status.StableRevision, canary)
	}
	s.t.Logf("released after %s: %d pods run %s, the Deployment is handed back", time.Since(start).Round(time.Millisecond), appReplicas, image)
}

// uninstall stops the controller and uninstalls the release: the
// controller goes, the Rollout stays (Helm keeps CRDs).
func (s *upgradeStory) uninstall() {
	s.t.Helper()
	if err := s.ctrl.Stop(); err != nil {
		s.t.Fatalf("stop the controller: %v", err)
	}
	s.helm("uninstall", release, "-n", releaseNS, "--wait", "--timeout=2m")
	var dep appsv1.Deployment
	if err := s.c.Get(context.Background(), client.ObjectKey{Namespace: releaseNS, Name: controller}, &dep); err == nil {
		s.t.Error("the controller Deployment is still there after helm uninstall")
	}
	s.rollout()
}

// The application, as Git declares it.
const (
	namespaceYAML = `
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---`
	serviceYAML = `
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
---`
)

// rolloutYAML is the application's Rollout, behind a document separator.
var rolloutYAML = "\n---" + chartrun.WebRollout(appNS)

// deploymentYAML is the application's Deployment at image.
func deploymentYAML(image string) string {
	return "\n" + chartrun.WebDeployment(appNS, image, appReplicas)
}

// previousController returns the controller binary of the previous release,
// built by `make tools` from test/chart/testdata/previous.
func previousController(t *testing.T) string {
	t.Helper()
	_, version := previousChart(t)
	bin := filepath.Join(repo.ToolsDir(), "previous", "rollgate-"+version)
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("the controller of chart %s is missing (%v): run 'make tools'", version, err)
	}
	return bin
}
