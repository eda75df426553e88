package demo

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/reconciler/workload"
	"github.com/rollgate/rollgate/test/prom"
)

// TestRollbackWithFlux is the automatic rollback end to end, with the real
// Flux applying Git: a developer bumps the image; batch 1's error rate,
// measured by a real Prometheus, fails the analysis; rollgate rolls the
// cluster back and proposes the revert in Git; while Git still declares the
// bad version, Flux re-applies it and no pod moves; a user merges the revert,
// and Git, Flux and the cluster agree on the stable version.
func TestRollbackWithFlux(t *testing.T) {
	// Not t.Parallel, unlike the other stories here: it bounds the time from
	// the first failing sample to Stalled, so go test runs it alone, before
	// the parallel ones.
	s := givenAnalysedAppWithFlux(t)

	canary := s.releaseFailsItsAnalysis()
	branch := s.revertProposedInGit(canary)
	s.reappliedBadVersionMovesNoPod(canary)
	s.mergeRevert(branch)
	s.gitFluxAndClusterAgree()
	s.statusInGitIsHealthy()

	t.Logf("timings:\n  %s", strings.Join(s.timings, "\n  "))
}

// rollbackStory is the demo's world running the analysed application.
type rollbackStory struct {
	*world
	t    *testing.T
	ctx  context.Context
	src  *prom.ErrorSource
	rate *errorRate
	// out holds everything the world printed.
	out *bytes.Buffer
	// v1 is the stable revision: the template hash of version 1.
	v1 string
	// failedAt is when the test saw the release Failed.
	failedAt time.Time
	timings  []string
}

// logWriter sends the world's story lines to the test log.
type logWriter struct{ t *testing.T }

func (l logWriter) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (s *rollbackStory) timing(format string, args ...any) {
	s.timings = append(s.timings, fmt.Sprintf(format, args...))
	s.t.Logf("timing: "+format, args...)
}

func (s *rollbackStory) must(err error) {
	s.t.Helper()
	if err != nil {
		s.t.Fatal(err)
	}
}

// givenAnalysedAppWithFlux starts the error source (0% errors), Prometheus
// scraping it, and the demo's platform with the analysed application in
// Git; Flux applies version 1 and the Rollout is Ready.
func givenAnalysedAppWithFlux(t *testing.T) *rollbackStory {
	s := &rollbackStory{t: t, src: prom.StartErrorSource(t), out: &bytes.Buffer{}}
	pr := prom.Start(t, prom.Options{Targets: []string{s.src.Addr}, ScrapeInterval: time.Second})
	var err error
	if s.rate, err = newErrorRate(pr.URL); err != nil {
		t.Fatal(err)
	}
	s.world, s.ctx = newTestWorld(t, io.MultiWriter(s.out, logWriter{t}), 8*time.Minute)
	ctx := s.ctx
	s.overlay = rollbackFiles(pr.URL)
	s.must(s.setup(ctx))
	s.v1 = s.last.ro.Status.StableRevision
	s.must(s.waitFor(ctx, 45*time.Second, "Prometheus to answer the analysis query", func(ctx context.Context) (bool, error) {
		return !math.IsNaN(s.rate.value(ctx)), nil
	}))
	return s
}

// releaseFailsItsAnalysis commits v2, waits for batch 1 under analysis,
// raises the error rate and checks that rollgate fails and rolls back the
// release on its own, in time. It returns the failed revision.
func (s *rollbackStory) releaseFailsItsAnalysis() string {
	t := s.t
	s.p.section(fmt.Sprintf("the release %s -> %s, judged by its error rate", OldImage, NewImage))
	commit, err := s.git.Commit(RepoName, Branch, "echoserver: release 2.0", map[string]string{deploymentFile: teamDeployment(NewImage)})
	s.must(err)
	s.p.step("developer: pushed %s to %s: %s image %s -> %s", short(commit), Branch, deploymentFile, OldImage, NewImage)
	s.header()
	o, err := s.watchUntil(s.ctx, 3*time.Minute, "Flux to apply v2 and batch 1 (one v2 pod, 20% of traffic) to pass its analysis", func(_ context.Context, o *observation) (bool, error) {
		ro := o.ro
		if ro != nil && ro.Status.Phase == v1alpha1.PhaseFailed {
			return false, fmt.Errorf("the release failed before any error: %s", ro.Status.Message)
		}
		res := stepAnalysis(ro, 1)
		return strings.HasSuffix(o.fluxRevision, commit) && ro != nil && ro.Status.CanaryRevision != s.v1 && ro.Status.CurrentStepIndex == 1 &&
			ro.Status.CurrentStepState == v1alpha1.StepMetricsAnalysis && res != nil && res.Successful >= 1 &&
			o.pods[NewImage] == [2]int{1, 1} && o.canary == 20, nil
	})
	s.must(err)
	canary := o.ro.Status.CanaryRevision

	s.src.SetErrorPercent(30)
	raised := time.Now()
	s.p.step("the new pod starts failing: 30%% of requests answer 500")
	firstBad := s.firstFailingSample()
	s.p.step("Prometheus shows an error rate over %v", errorLimit)
	var failedAt time.Time
	o, err = s.watchUntil(s.ctx, time.Minute, "the release to fail its analysis", func(_ context.Context, o *observation) (bool, error) {
		if failedAt.IsZero() && o.ro != nil && o.ro.Status.Phase == v1alpha1.PhaseFailed {
			failedAt = time.Now()
		}
		return o.ro != nil && conditions.IsStalled(o.ro), nil
	})
	s.must(err)
	stalledAt := time.Now()
	s.failedAt = failedAt
	// The times are printed, not asserted (make bench measures speed):
	// what must hold is that the analysis failed the release at the first
	// measurement it could, failureLimit + 1 failed ones, no later.
	s.timing("error rate raised -> first failing sample visible in Prometheus: %.1fs", firstBad.Sub(raised).Seconds())
	s.timing("first failing sample -> release Failed (phase Failed, traffic to stable): %.1fs", failedAt.Sub(firstBad).Seconds())
	s.timing("first failing sample -> Stalled=True/AnalysisFailed, Ready=False: %.1fs (interval %v x (failureLimit %d + 1) = %v of measurements)",
		stalledAt.Sub(firstBad).Seconds(), analysisInterval, analysisFailureLimit, analysisInterval*(analysisFailureLimit+1))
	assertAnalysisFailed(t, o.ro)
	if msg, want := conditions.GetMessage(o.ro, v1alpha1.StalledCondition), fmt.Sprintf("%d failed, failureLimit %d)", analysisFailureLimit+1, analysisFailureLimit); !strings.Contains(msg, want) {
		t.Fatalf("the analysis did not fail the release at its first chance (want %q in the message): %s", want, msg)
	}

	_, err = s.watchUntil(s.ctx, time.Minute, "traffic back on stable and no v2 pod", func(ctx context.Context, o *observation) (bool, error) {
		bad, err := s.podsOf(ctx, NewImage)
		return o.stable == 100 && o.canary == 0 && bad == 0 && o.pods[OldImage] == [2]int{5, 5} &&
			conditions.IsFalse(o.ro, v1alpha1.ReconcilingCondition), err
	})
	s.must(err)
	s.timing("Stalled -> checked: all traffic on stable, no v2 pod, rollback settled: %.1fs", time.Since(stalledAt).Seconds())
	s.p.step("rolled back: 5/5 pods run %s, 100%% of traffic on them, no pod of %s", OldImage, NewImage)
	return canary
}

// firstFailingSample polls Prometheus every 100 ms with the analysis
// query and returns when it asked the query first answered over the
// limit.
func (s *rollbackStory) firstFailingSample() time.Time {
	s.t.Helper()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(30 * time.Second)
	for {
		asked := time.Now()
		if s.rate.value(s.ctx) >= errorLimit {
			return asked
		}
		select {
		case <-tick.C:
		case <-timeout:
			s.t.Fatalf("Prometheus did not show an error rate over %v within 30s", errorLimit)
		}
	}
}

// stepAnalysis is the error-rate result of a step in status.analysis.
func stepAnalysis(ro *v1alpha1.Rollout, step int32) *v1alpha1.MetricResult {
	if ro == nil {
		return nil
	}
	for i := range ro.Status.Analysis {
		if r := &ro.Status.Analysis[i]; r.Step == step && r.Metric == "error-rate" {
			return r
		}
	}
	return nil
}

// assertAnalysisFailed checks Phase Failed, Ready=False and Stalled=True
// with reason AnalysisFailed naming the metric.
func assertAnalysisFailed(t *testing.T, ro *v1alpha1.Rollout) {
	t.Helper()
	stalled := conditions.Get(ro, v1alpha1.StalledCondition)
	t.Logf("Stalled: %s: %s", stalled.Reason, stalled.Message)
	if ro.Status.Phase != v1alpha1.PhaseFailed || stalled.Reason != v1alpha1.ReasonAnalysisFailed ||
		!strings.Contains(stalled.Message, `metric "error-rate"`) {
		t.Fatalf("want phase Failed and Stalled=True reason %s naming metric \"error-rate\", got phase %s, %+v",
			v1alpha1.ReasonAnalysisFailed, ro.Status.Phase, stalled)
	}
	if ready := conditions.Get(ro, v1alpha1.ReadyCondition); ready == nil || ready.Status != metav1.ConditionFalse {
		t.Fatalf("a failed release must be Ready=False, got %+v", ready)
	}
}

// podsOf counts every pod of the namespace (terminating ones too) with a
// container running image.
func (s *rollbackStory) podsOf(ctx context.Context, image string) (int, error) {
	var list corev1.PodList
	if err := s.c.List(ctx, &list, client.InNamespace(Namespace)); err != nil {
		return 0, err
	}
	n := 0
	for _, p := range list.Items {
		for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
			if c.Image == image {
				n++
				break
			}
		}
	}
	return n, nil
}

// revertProposedInGit checks the revert branch: one commit on top of main
// changing only the image of the Deployment manifest back to v1, comments
// kept; main still declares v2. It returns the branch.
func (s *rollbackStory) revertProposedInGit(canary string) string {
	t := s.t
	branch := gitsync.RevertBranch(Namespace, App, canary)
	s.must(s.waitFor(s.ctx, 30*time.Second, "the revert branch "+branch, func(ctx context.Context) (bool, error) {
		o, err := s.observe(ctx)
		if err != nil || o.ro == nil || o.ro.Status.Git == nil || o.ro.Status.Git.RevertBranch != branch {
			return false, err
		}
		head, err := s.git.Head(RepoName, branch)
		return head != "", err
	}))
	s.timing("release Failed -> revert branch seen in Git and in status.git.revertBranch: at most %.1fs", time.Since(s.failedAt).Seconds())
	s.p.step("rollgate pushed the revert branch %s", branch)

	if files := s.gitOut("diff", "--name-only", Branch, branch); files != deploymentFile {
		t.Fatalf("the revert branch changes %q, want only %s", files, deploymentFile)
	}
	if ahead, behind := s.gitOut("rev-list", "--count", Branch+".."+branch), s.gitOut("rev-list", "--count", branch+".."+Branch); ahead != "1" || behind != "0" {
		t.Fatalf("the revert branch is %s commits ahead of and %s behind %s, want one commit on top of it", ahead, behind, Branch)
	}
	onMain, err := s.git.ReadFile(RepoName, Branch, deploymentFile)
	s.must(err)
	reverted, err := s.git.ReadFile(RepoName, branch, deploymentFile)
	s.must(err)
	if onMain != teamDeployment(NewImage) {
		t.Fatalf("%s on %s is not the developer's v2 any more:\n%s", deploymentFile, Branch, onMain)
	}
	if want := strings.Replace(onMain, "image: "+NewImage, "image: "+OldImage, 1); reverted != want {
		t.Fatalf("the revert must only set the image back to %s; got\n%s\nwant\n%s", OldImage, reverted, want)
	}
	for _, comment := range []string{headerComment, replicasComment} {
		if !strings.Contains(reverted, comment) {
			t.Fatalf("the revert lost the comment %q", comment)
		}
	}
	t.Logf("git diff %s %s:\n%s", Branch, branch, s.gitOut("diff", Branch, branch))
	return branch
}

// gitOut runs git in the bare repository on the server and returns its
// trimmed output.
func (s *rollbackStory) gitOut(args ...string) string {
	s.t.Helper()
	cmd := exec.Command("git", append([]string{"--git-dir", filepath.Join(s.git.Root, RepoName+".git")}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		s.t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// reappliedBadVersionMovesNoPod makes Flux re-apply main, which still
// declares v2, twice: a forced reconcile, then a harmless commit that does
// change the Deployment; neither moves a pod.
func (s *rollbackStory) reappliedBadVersionMovesNoPod(canary string) {
	s.p.section("Git still declares " + NewImage + ": Flux re-applies it")
	token := time.Now().Format(time.RFC3339Nano)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"reconcile.fluxcd.io/requestedAt":%q}}}`, token)
	ks := &unstructured.Unstructured{}
	ks.SetGroupVersionKind(kustomizationGVK)
	ks.SetNamespace(FluxNamespace)
	ks.SetName(App)
	s.must(s.c.Patch(s.ctx, ks, client.RawPatch(types.MergePatchType, []byte(patch))))
	s.p.step("platform: flux reconcile kustomization %s (reconcile.fluxcd.io/requestedAt=%s)", App, token)
	s.must(s.waitFor(s.ctx, time.Minute, "Flux to handle the reconcile request", func(ctx context.Context) (bool, error) {
		if err := s.c.Get(ctx, client.ObjectKeyFromObject(ks), ks); err != nil {
			return false, err
		}
		handled, _, _ := unstructured.NestedString(ks.Object, "status", "lastHandledReconcileAt")
		_, ready, err := s.fluxApplied(ctx)
		return handled == token && strings.HasPrefix(ready, "True"), err
	}))
	s.p.step("Flux reconciled %s again (Ready)", Branch)
	s.holdsStable(3*time.Second, canary)

	onMain, err := s.git.ReadFile(RepoName, Branch, deploymentFile)
	s.must(err)
	commit, err := s.git.Commit(RepoName, Branch, "echoserver: annotate the team", map[string]string{deploymentFile: annotated(onMain)})
	s.must(err)
	s.p.step("developer: pushed %s to %s: an annotation on the Deployment (the image is still %s)", short(commit), Branch, NewImage)
	s.header()
	_, err = s.watchUntil(s.ctx, 2*time.Minute, "Flux to apply "+short(commit), func(ctx context.Context, o *observation) (bool, error) {
		_, ready, err := s.fluxApplied(ctx)
		return strings.HasSuffix(o.fluxRevision, commit) && strings.HasPrefix(ready, "True"), err
	})
	s.must(err)
	s.must(s.waitFor(s.ctx, 10*time.Second, "the annotation on the Deployment", func(ctx context.Context) (bool, error) {
		var d appsv1.Deployment
		err := s.c.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: App}, &d)
		return d.Annotations["team"] == "web", err
	}))
	s.holdsStable(5*time.Second, canary)
	s.p.step("no pod moved: the Deployment stays held at %s", OldImage)
}

// holdsStable checks for d that the failed release stays failed and the
// cluster stays on v1: no v2 pod, the Deployment held, all traffic on
// stable.
func (s *rollbackStory) holdsStable(d time.Duration, canary string) {
	s.t.Helper()
	until := time.Now().Add(d)
	versions := map[string]bool{}
	_, err := s.watchUntil(s.ctx, d+30*time.Second, "the cluster to stay on "+OldImage, func(ctx context.Context, o *observation) (bool, error) {
		bad, err := s.podsOf(ctx, NewImage)
		if o.deployment != nil {
			versions[o.deployment.ResourceVersion] = true
		}
		_, ready, ferr := s.fluxApplied(ctx)
		switch {
		case ferr != nil:
			return false, ferr
		case strings.HasPrefix(ready, "False"):
			return false, fmt.Errorf("Flux fails to apply %s: %s", Branch, ready)
		case err != nil:
			return false, err
		case bad > 0:
			return false, fmt.Errorf("%d pod(s) of %s while Git declares it after a failed release", bad, NewImage)
		case o.ro == nil:
			return false, fmt.Errorf("the Rollout is gone")
		case o.ro.Status.Phase != v1alpha1.PhaseFailed || o.ro.Status.CanaryRevision != canary ||
			conditions.GetReason(o.ro, v1alpha1.StalledCondition) != v1alpha1.ReasonAnalysisFailed:
			return false, fmt.Errorf("the failed release changed: %+v", o.ro.Status)
		case o.deployment == nil || !o.deployment.Spec.Paused || o.deployment.Annotations[v1alpha1.AnnotationControl] == "":
			return false, fmt.Errorf("the Deployment is no longer held by rollgate")
		case o.pods[OldImage] != [2]int{5, 5} || o.stable != 100:
			return false, fmt.Errorf("the cluster left %s: pods %v, %d%% of traffic on stable", OldImage, o.pods, o.stable)
		}
		return time.Now().After(until), nil
	})
	s.must(err)
	// Nobody wrote the Deployment meanwhile: Flux's periodic apply sees no
	// drift and rollgate has nothing to put back.
	if len(versions) != 1 {
		s.t.Fatalf("the Deployment was written %d times in %v while held: Flux and rollgate fight", len(versions)-1, d)
	}
}

// mergeRevert merges the revert branch into main as a pull request is
// merged, and waits until Flux applied the merge and the Rollout is Ready.
func (s *rollbackStory) mergeRevert(branch string) {
	s.p.section("the revert, merged in Git")
	msg := fmt.Sprintf("Merge branch '%s'\n\nRevert %s/%s to %s: its analysis failed.", branch, Namespace, App, OldImage)
	merged, err := s.git.Merge(RepoName, Branch, branch, msg)
	s.must(err)
	mergedAt := time.Now()
	s.p.step("reviewer: merged %s into %s (%s)", branch, Branch, short(merged))
	var fluxAt time.Time
	s.header()
	_, err = s.watchUntil(s.ctx, 2*time.Minute, "Flux to apply the merge", func(ctx context.Context, o *observation) (bool, error) {
		_, ready, err := s.fluxApplied(ctx)
		fluxAt = time.Now()
		return strings.HasSuffix(o.fluxRevision, merged) && strings.HasPrefix(ready, "True"), err
	})
	s.must(err)
	_, err = s.watchUntil(s.ctx, 2*time.Minute, "the Rollout Healthy again", func(_ context.Context, o *observation) (bool, error) {
		return o.ro != nil && o.ro.Status.Phase == v1alpha1.PhaseHealthy && conditions.IsReady(o.ro), nil
	})
	s.must(err)
	healthyAt := time.Now()
	s.timing("revert merged -> Flux applied the merge (Ready=True): %.1fs", fluxAt.Sub(mergedAt).Seconds())
	s.timing("Flux applied -> Rollout Ready (Healthy): %.1fs", healthyAt.Sub(fluxAt).Seconds())
	s.timing("revert merged -> Rollout Ready: %.1fs", healthyAt.Sub(mergedAt).Seconds())
}

// gitFluxAndClusterAgree checks that main, Flux and the cluster all say v1,
// that rollgate handed the Deployment back, and that it stays so for 5 s.
func (s *rollbackStory) gitFluxAndClusterAgree() {
	t := s.t
	onMain, err := s.git.ReadFile(RepoName, Branch, deploymentFile)
	s.must(err)
	if !strings.Contains(onMain, "image: "+OldImage) || strings.Contains(onMain, NewImage) ||
		!strings.Contains(onMain, "annotations: {team: web}") || !strings.Contains(onMain, headerComment) {
		t.Fatalf("%s on %s after the merge: want %s, the annotation and the comments, got\n%s", deploymentFile, Branch, OldImage, onMain)
	}
	head, err := s.git.Head(RepoName, Branch)
	s.must(err)
	first := s.agreement(head)
	s.p.step("Git, Flux and the cluster agree: %s@%s, 5/5 pods run %s, Rollout Ready (%s) at stable revision %s",
		Branch, short(head), OldImage, conditions.GetReason(first.ro, v1alpha1.ReadyCondition), s.v1)
	readySince := conditions.Get(first.ro, v1alpha1.ReadyCondition).LastTransitionTime
	until := time.Now().Add(5 * time.Second)
	s.must(s.waitFor(s.ctx, time.Minute, "the agreement to hold for 5s", func(context.Context) (bool, error) {
		o := s.agreement(head)
		if o.ro.Status.CanaryRevision != first.ro.Status.CanaryRevision || o.deployment.Generation != first.deployment.Generation ||
			!conditions.Get(o.ro, v1alpha1.ReadyCondition).LastTransitionTime.Equal(&readySince) {
			return false, fmt.Errorf("something moved after the rollback: Rollout %+v, Deployment generation %d -> %d",
				o.ro.Status, first.deployment.Generation, o.deployment.Generation)
		}
		return time.Now().After(until), nil
	}))
	s.p.step("nothing moved for 5s")
}

// agreement checks, once, that Flux applied head, the Deployment declares
// v1 and is handed back, every pod runs v1, and the Rollout is Ready at
// the v1 revision; it fails the test otherwise.
func (s *rollbackStory) agreement(head string) *observation {
	t := s.t
	t.Helper()
	o, err := s.observe(s.ctx)
	s.must(err)
	// Flux's periodic reconcile makes Ready Unknown for a moment; a
	// failed apply would make it False.
	if _, ready, _ := s.fluxApplied(s.ctx); !strings.HasSuffix(o.fluxRevision, head) || strings.HasPrefix(ready, "False") {
		t.Fatalf("Flux: applied %s (Ready=%s), want %s and not failing", o.fluxRevision, ready, head)
	}
	d := o.deployment
	if img := d.Spec.Template.Spec.Containers[0].Image; img != OldImage || workload.Revision(&d.Spec.Template) != s.v1 {
		t.Fatalf("Deployment template: image %s, revision %s; want %s, %s", img, workload.Revision(&d.Spec.Template), OldImage, s.v1)
	}
	if d.Spec.Paused || d.Annotations[v1alpha1.AnnotationControl] != "" || d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType {
		t.Fatalf("the Deployment is still held: paused %v, strategy %s, %s=%q",
			d.Spec.Paused, d.Spec.Strategy.Type, v1alpha1.AnnotationControl, d.Annotations[v1alpha1.AnnotationControl])
	}
	bad, err := s.podsOf(s.ctx, NewImage)
	s.must(err)
	if want := *d.Spec.Replicas; bad != 0 || len(o.pods) != 1 || o.pods[OldImage] != [2]int{int(want), int(want)} {
		t.Fatalf("pods by image (ready, total): %v, %d of %s; want all %d on %s", o.pods, bad, NewImage, want, OldImage)
	}
	ro := o.ro
	for _, c := range ro.Status.Conditions {
		if c.ObservedGeneration != ro.Generation {
			t.Fatalf("Rollout condition %s has observedGeneration %d, generation %d", c.Type, c.ObservedGeneration, ro.Generation)
		}
	}
	if ro.Status.Phase != v1alpha1.PhaseHealthy || !conditions.IsReady(ro) || conditions.IsStalled(ro) || conditions.IsReconciling(ro) ||
		ro.Status.ObservedGeneration != ro.Generation || ro.Status.StableRevision != s.v1 {
		t.Fatalf("Rollout: phase %s, stable %s (want %s), generation %d observed %d, conditions %+v",
			ro.Status.Phase, ro.Status.StableRevision, s.v1, ro.Generation, ro.Status.ObservedGeneration, ro.Status.Conditions)
	}
	var route gatewayv1.HTTPRoute
	s.must(s.c.Get(s.ctx, client.ObjectKey{Namespace: Namespace, Name: App}, &route))
	if refs := route.Spec.Rules[0].BackendRefs; len(refs) != 1 || refs[0].Name != App {
		t.Fatalf("the HTTPRoute is not back to what Git declares: %+v", refs)
	}
	return o
}

// statusInGitIsHealthy reads the status back from Git with `rollgate
// status --repo`.
func (s *rollbackStory) statusInGitIsHealthy() {
	s.must(s.showGitStatus(s.ctx, s.v1))
	if phase := gitStatusPhase(s.out.String()); phase != string(v1alpha1.PhaseHealthy) {
		s.t.Fatalf("`rollgate status --repo` printed phase %q for %s/%s, want Healthy", phase, Namespace, App)
	}
}
