package demo

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/flux"
	"github.com/rollgate/rollgate/test/proc"
	"github.com/rollgate/rollgate/test/repo"
)

var helmReleaseGVK = schema.GroupVersionKind{Group: "helm.toolkit.fluxcd.io", Version: "v2", Kind: "HelmRelease"}

// TestHelmReleaseReleasesInBatches: a team ships its app as a Helm chart
// with the Rollout in it, and Flux's real helm-controller installs it from
// a HelmRelease with remediation retries and drift detection on, a timeout
// of 15 s, and nothing else for rollgate. CI bumps the image tag in the
// values file in Git. helm-controller upgrades the release and its wait
// ends (the Rollout is Current for kstatus once rollgate holds the new
// revision); rollgate releases one pod with 25% of the traffic and waits
// at the gate for three times the timeout: no rollback, no failure and no
// drift correction by Flux, the route and the stable Service on the step.
// The approval branch edits the values file; merging it releases the rest,
// and Flux renders the approval into the Rollout.
func TestHelmReleaseReleasesInBatches(t *testing.T) {
	t.Parallel()
	s := givenChartWithHelmRelease(t)

	gate := s.releaseToGate("2.0")
	s.gateHoldsPastTheTimeout(gate, 3*helmTimeout)
	s.approvalBranchEditsTheValues(gate)
	s.approveAndComplete(gate, "2.0")
	s.report()
}

// helmStory is the demo's world with the chart in Git, and helm-controller
// (nil when a pipeline runs helm itself).
type helmStory struct {
	*world
	t    *testing.T
	ctx  context.Context
	helm *flux.Helm
	// driftSamples counts the samples of the route and the Service taken
	// at the gate, off counts those off the step.
	driftSamples, off int
	// stepWritten is when rollgate finished writing step 1 (its
	// AwaitingApproval condition turned True), plus the time one drift
	// check of helm-controller takes. From then on rollgate writes nothing
	// until the approval, so any drift correction is Flux fighting the
	// release. Before it, helm-controller's drift check can read an
	// object just before rollgate's step write and dry-run it just after
	// (docs/helm.md): that race is reported, not failed.
	stepWritten time.Time
}

// raceWindow is how long after rollgate's last step write a drift check
// that read the object before that write can still report it: one read,
// one dry-run apply through the webhook and one apply, on a loaded
// machine. The drift checks every 5 s of the 45 s hold come after it.
const raceWindow = 3 * time.Second

func (s *helmStory) must(err error) {
	s.t.Helper()
	if err != nil {
		s.t.Fatal(err)
	}
}

// givenChartWithHelmRelease starts the platform (kwok, Git, source- and
// helm-controller, rollgate) and lets the HelmRelease install version 1.
func givenChartWithHelmRelease(t *testing.T) *helmStory {
	for _, need := range []string{filepath.Join(flux.HelmCRDs(), "crds"), filepath.Join(repo.ToolsDir(), "flux", flux.HelmController)} {
		if _, err := os.Stat(need); err != nil {
			t.Fatalf("helm-controller: %v (make tools-helmcontroller)", err)
		}
	}
	bin := buildRollgate(t)
	s := &helmStory{t: t}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	t.Cleanup(cancel)
	s.ctx = ctx
	var err error
	if s.world, err = newWorld(Options{Out: logWriter{t}, Rollgate: bin}); err != nil {
		t.Fatal(err)
	}
	s.overlay = chartFiles()
	t.Cleanup(func() {
		if s.helm != nil {
			if err := s.helm.Stop(); err != nil {
				t.Errorf("stopping helm-controller: %v", err)
			}
		}
		if err := s.close(); err != nil {
			t.Errorf("teardown: %v", err)
		}
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("state of the world:%s\n== helm-controller ==\n%s", s.failureReport(), s.helmLog())
		}
	})
	s.must(s.startCluster(ctx))
	s.must(flux.InstallCRDs(ctx, s.cluster.Kubeconfig, flux.HelmCRDs()))
	s.must(s.startGit())
	s.must(s.startFlux(ctx))
	s.helm, err = flux.StartHelm(ctx, flux.Options{Kubeconfig: s.cluster.Kubeconfig, Dir: s.tmp, Bin: s.tools.flux, Namespace: FluxNamespace})
	s.must(err)
	s.must(s.startRollgate(ctx))
	_, err = s.applyYAML(ctx, strings.Replace(repositoryYAML(s.repoURL), "  name: app-repo\n", "  name: app-repo\n  namespace: "+Namespace+"\n", 1))
	s.must(err)
	_, err = s.applyYAML(ctx, helmReleaseYAML(s.repoURL))
	s.must(err)
	s.p.step("HelmRelease %s/%s installs ./%s from Git (timeout %s, remediation retries 3, drift detection enabled)", Namespace, App, chartPath, helmTimeout)
	head, err := s.git.Head(RepoName, Branch)
	s.must(err)
	s.must(s.until(3*time.Minute, "the HelmRelease to install version 1", func(ctx context.Context) (bool, string, error) {
		ok, why, err := s.helmReleaseAt(ctx, head)
		if !ok || err != nil {
			return ok, why, err
		}
		ro, err := s.rollout(ctx)
		if err != nil {
			return false, "", err
		}
		images, err := s.images(ctx)
		return ro.Status.Phase == v1alpha1.PhaseHealthy && images == "echo:1.0 x4", fmt.Sprintf("Rollout %s, pods %s", ro.Status.Phase, images), err
	}))
	s.p.step("version 1 installed by helm-controller; the Rollout is Healthy")
	return s
}

// releaseToGate commits the new tag to the values file, as CI does, and
// waits until helm-controller's upgrade succeeded and the release waits at
// the gate with 1 pod of the new version. It returns the Rollout then.
func (s *helmStory) releaseToGate(tag string) *v1alpha1.Rollout {
	commit, err := s.git.Commit(RepoName, Branch, "echoserver "+tag, map[string]string{valuesFile: valuesYAML(tag)})
	s.must(err)
	s.p.step("CI: pushed %s: %s image.tag -> %s", short(commit), valuesFile, tag)
	var ro *v1alpha1.Rollout
	s.must(s.until(3*time.Minute, "the upgrade to succeed and the release to wait at the gate", func(ctx context.Context) (bool, string, error) {
		ok, why, err := s.helmReleaseAt(ctx, commit)
		if err != nil {
			return false, "", err
		}
		if ro, err = s.rollout(ctx); err != nil {
			return false, "", err
		}
		images, err := s.images(ctx)
		gate := ro.Status.AwaitingApproval
		return ok && gate != nil && gate.Branch != "" && images == "echo:1.0 x3, echo:2.0 x1",
			fmt.Sprintf("%s; Rollout %s step %d, gate %v, pods %s", why, ro.Status.Phase, ro.Status.CurrentStepIndex, gate != nil, images), err
	}))
	s.p.step("helm-controller: upgrade succeeded; rollgate: step 1 waits for approval on %s", ro.Status.AwaitingApproval.Branch)
	if c := conditions.Get(ro, v1alpha1.AwaitingApprovalCondition); c != nil {
		s.stepWritten = c.LastTransitionTime.Add(raceWindow)
	}
	if ready := conditions.Get(ro, v1alpha1.ReadyCondition); ready != nil || conditions.IsTrue(ro, v1alpha1.ReconcilingCondition) ||
		!conditions.IsTrue(ro, v1alpha1.AwaitingApprovalCondition) {
		s.t.Errorf("at the gate: want no Ready, Reconciling not True, AwaitingApproval=True: %+v", ro.Status.Conditions)
	}
	return ro
}

// gateHoldsPastTheTimeout samples, every 250 ms for d, the HelmRelease, its
// Helm history, the Rollout, the HTTPRoute and the stable Service: the
// release stays at the gate, Flux neither fails, rolls back nor corrects
// drift, and the route and Service stay on the step.
func (s *helmStory) gateHoldsPastTheTimeout(gate *v1alpha1.Rollout, d time.Duration) {
	s.p.step("holding the gate for %s (%d x the HelmRelease timeout)", d, int(d/helmTimeout))
	until := time.Now().Add(d)
	err := s.until(d+time.Minute, "the gate to hold", func(ctx context.Context) (bool, string, error) {
		ro, err := s.rollout(ctx)
		if err != nil {
			return false, "", err
		}
		if ro.Status.AwaitingApproval == nil || ro.Status.CanaryRevision != gate.Status.CanaryRevision || ro.Status.Phase != v1alpha1.PhaseProgressing {
			return false, "", fmt.Errorf("the release left the gate: phase %s step %d canary %s", ro.Status.Phase, ro.Status.CurrentStepIndex, ro.Status.CanaryRevision)
		}
		h, err := s.helmCounts(ctx)
		if err != nil {
			return false, "", err
		}
		if n := h.rollbacks + h.failed + h.hrFailures + h.correctionsAfter(s.stepWritten); n > 0 {
			return false, "", fmt.Errorf("Flux acted against the release at the gate: %s", h)
		}
		onStep, why, err := s.routeOnStep(ctx, ro.Status.StableRevision)
		if err != nil {
			return false, "", err
		}
		s.driftSamples++
		if !onStep {
			s.off++
			s.t.Errorf("off the step at the gate: %s", why)
		}
		return time.Now().After(until), "", nil
	})
	s.must(err)
	s.p.step("the gate held %s: %d samples of the route and the Service, %d off the step", d, s.driftSamples, s.off)
	if h, err := s.helmCounts(s.ctx); err == nil && h.driftCorrections > 0 {
		s.p.step("%d drift correction(s) as rollgate wrote step 1, none after: helm-controller's read-then-dry-run race (docs/helm.md), held by the webhook: %s", h.driftCorrections, h.drift)
	}
}

// approvalBranchEditsTheValues checks the approval branch: it changes only
// the marked line of the values file, and the Rollout's GitSynced is True
// while the gate waits.
func (s *helmStory) approvalBranchEditsTheValues(gate *v1alpha1.Rollout) {
	branch := gate.Status.AwaitingApproval.Branch
	got, err := s.git.ReadFile(RepoName, branch, valuesFile)
	s.must(err)
	entry := fmt.Sprintf("[{revision: %s, step: 1}]", gate.Status.CanaryRevision)
	want := strings.Replace(valuesYAML("2.0"), "approvals: []", "approvals: "+entry, 1)
	if got != want {
		s.t.Fatalf("%s on %s:\n%s\nwant:\n%s", valuesFile, branch, got, want)
	}
	s.must(s.until(time.Minute, "GitSynced=True at the gate", func(ctx context.Context) (bool, string, error) {
		ro, err := s.rollout(ctx)
		if err != nil {
			return false, "", err
		}
		c := conditions.Get(ro, v1alpha1.GitSyncedCondition)
		if c == nil {
			return false, "no GitSynced", nil
		}
		return c.Status == "True" && ro.Status.AwaitingApproval != nil, c.Reason + ": " + c.Message, nil
	}))
	s.p.step("approval branch %s adds %s to rollout.approvals in %s; GitSynced=True at the gate", branch, entry, valuesFile)
}

// approveAndComplete merges the approval branch and waits until the release
// is over, helm-controller has applied the merge (the chart renders the
// approval into the Rollout's spec.approvals), and nothing was rolled back.
func (s *helmStory) approveAndComplete(gate *v1alpha1.Rollout, tag string) {
	merge, err := s.git.Merge(RepoName, Branch, gate.Status.AwaitingApproval.Branch, "Approve step 1 of echoserver "+tag)
	s.must(err)
	s.p.step("reviewer: merged the approval branch into %s (%s)", Branch, short(merge))
	want := gate.Status.CanaryRevision
	s.must(s.until(3*time.Minute, "the release to complete and Flux to apply the merge", func(ctx context.Context) (bool, string, error) {
		ok, why, err := s.helmReleaseAt(ctx, merge)
		if err != nil {
			return false, "", err
		}
		ro, err := s.rollout(ctx)
		if err != nil {
			return false, "", err
		}
		images, err := s.images(ctx)
		rendered := len(ro.Spec.Approvals) == 1 && ro.Spec.Approvals[0].Revision == want && ro.Spec.Approvals[0].Step == 1
		return ok && rendered && ro.Status.Phase == v1alpha1.PhaseHealthy && ro.Status.StableRevision == want &&
				conditions.IsReady(ro) && images == "echo:"+tag+" x4",
			fmt.Sprintf("%s; Rollout %s stable %s approvals %v, pods %s", why, ro.Status.Phase, ro.Status.StableRevision, ro.Spec.Approvals, images), err
	}))
	s.p.step("released: 4 pods of echo:%s, the Rollout Ready, spec.approvals rendered from the values file", tag)
}

// report prints the counts and fails on any action of Flux against the
// release.
func (s *helmStory) report() {
	h, err := s.helmCounts(s.ctx)
	s.must(err)
	fmt.Fprintf(s.p.out, "helm releases (history): %d\nrollbacks by Flux: %d\nfailed helm releases: %d\nHelmRelease failure counters: %d\ndrift corrections by Flux: %d\nroute/Service samples at the gate: %d\nsamples off the step: %d\n",
		h.releases, h.rollbacks, h.failed, h.hrFailures, h.driftCorrections, s.driftSamples, s.off)
	// Drift corrections count only at the gate (gateHoldsPastTheTimeout):
	// while rollgate moves through steps, helm-controller's drift check
	// can race a step write (docs/helm.md); the webhook holds its
	// correction at the step.
	if h.rollbacks+h.failed+h.hrFailures > 0 {
		s.t.Errorf("Flux acted against the release: %s", h)
	}
	// install, upgrade to 2.0, upgrade with the approval.
	if h.releases != 3 {
		s.t.Errorf("%d Helm releases (%s), want 3: install, upgrade, approval", h.releases, h.history)
	}
}

// until polls cond every 250 ms up to timeout, failing early when a child
// process (helm-controller included) died.
func (s *helmStory) until(timeout time.Duration, what string, cond func(ctx context.Context) (bool, string, error)) error {
	var last string
	err := s.waitFor(s.ctx, timeout, what, func(ctx context.Context) (bool, error) {
		if s.helm != nil {
			if err := s.helm.Exited(); err != nil {
				return false, err
			}
		}
		ok, why, err := cond(ctx)
		last = why
		return ok, err
	})
	if err != nil {
		return fmt.Errorf("%w (last: %s)", err, last)
	}
	return nil
}

func (s *helmStory) rollout(ctx context.Context) (*v1alpha1.Rollout, error) {
	ro := &v1alpha1.Rollout{}
	return ro, s.c.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: App}, ro)
}

// images counts the ready pods of the app by image: "echo:1.0 x3, echo:2.0 x1".
func (s *helmStory) images(ctx context.Context) (string, error) {
	var pods corev1.PodList
	if err := s.c.List(ctx, &pods, client.InNamespace(Namespace), client.MatchingLabels{"app": App}); err != nil {
		return "", err
	}
	n := map[string]int{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		n[p.Spec.Containers[0].Image]++
	}
	var out []string
	for img, c := range n {
		out = append(out, fmt.Sprintf("%s x%d", img, c))
	}
	sort.Strings(out)
	return strings.Join(out, ", "), nil
}

// helmReleaseAt reports whether the HelmRelease is Ready with the chart of
// commit installed (its chart version carries the commit's short hash).
func (s *helmStory) helmReleaseAt(ctx context.Context, commit string) (bool, string, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(helmReleaseGVK)
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: App}, u); err != nil {
		return false, "", client.IgnoreNotFound(err)
	}
	ready, chart := flux.HelmReleaseState(u)
	ok := strings.HasPrefix(ready, "True") && strings.Contains(chart, commit[:12]) && strings.HasSuffix(chart, " deployed")
	return ok, fmt.Sprintf("HelmRelease Ready=%s, last release %s", ready, chart), nil
}

// helmCounts is what Flux did to the release.
type helmCounts struct {
	releases, rollbacks, failed int
	// hrFailures sums the HelmRelease's failures, installFailures and
	// upgradeFailures.
	hrFailures       int
	driftCorrections int
	// corrected is when each DriftCorrected event was last recorded.
	corrected []time.Time
	// drift is the message of the last DriftCorrected event: the objects
	// helm-controller found changed.
	drift   string
	history string
}

func (h helmCounts) String() string {
	s := fmt.Sprintf("%d releases (%s), %d rollbacks, %d failed, HelmRelease failure counters %d, %d drift corrections",
		h.releases, h.history, h.rollbacks, h.failed, h.hrFailures, h.driftCorrections)
	if h.drift != "" {
		s += ": " + h.drift
	}
	return s
}

// correctionsAfter counts the DriftCorrected events last recorded after t
// (all of them when t is zero).
func (h helmCounts) correctionsAfter(t time.Time) int {
	n := 0
	for _, at := range h.corrected {
		if t.IsZero() || at.After(t) {
			n++
		}
	}
	return n
}

// helmCounts reads the release history from Helm's own storage (the
// sh.helm.release.v1 Secrets), the HelmRelease's failure counters and its
// DriftCorrected events.
func (s *helmStory) helmCounts(ctx context.Context) (helmCounts, error) {
	var h helmCounts
	var secrets corev1.SecretList
	if err := s.c.List(ctx, &secrets, client.InNamespace(Namespace), client.MatchingLabels{"owner": "helm", "name": App}); err != nil {
		return h, err
	}
	var entries []string
	for _, sec := range secrets.Items {
		rel, err := decodeHelmRelease(sec.Data["release"])
		if err != nil {
			return h, fmt.Errorf("secret %s: %w", sec.Name, err)
		}
		h.releases++
		if strings.HasPrefix(rel.Info.Description, "Rollback") {
			h.rollbacks++
		}
		if rel.Info.Status == "failed" {
			h.failed++
		}
		entries = append(entries, fmt.Sprintf("v%d %s: %s", rel.Version, rel.Info.Status, rel.Info.Description))
	}
	sort.Strings(entries)
	h.history = strings.Join(entries, "; ")
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(helmReleaseGVK)
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: App}, u); err != nil {
		return h, err
	}
	for _, f := range []string{"failures", "installFailures", "upgradeFailures"} {
		n, _, _ := unstructured.NestedInt64(u.Object, "status", f)
		h.hrFailures += int(n)
	}
	var events corev1.EventList
	if err := s.c.List(ctx, &events, client.InNamespace(Namespace)); err != nil {
		return h, err
	}
	for _, e := range events.Items {
		if e.InvolvedObject.Kind == "HelmRelease" && strings.HasPrefix(e.Reason, "DriftCorrect") {
			h.driftCorrections += int(max(e.Count, 1))
			h.drift = e.Message
			last := e.LastTimestamp.Time
			if last.IsZero() {
				last = e.EventTime.Time
			}
			h.corrected = append(h.corrected, last)
		}
	}
	return h, nil
}

// helmRelease is the part of a Helm release record the story reads.
type helmRelease struct {
	Version int `json:"version"`
	Info    struct {
		Status      string `json:"status"`
		Description string `json:"description"`
	} `json:"info"`
}

// decodeHelmRelease decodes a release as Helm stores it in a Secret:
// base64 of the gzipped JSON.
func decodeHelmRelease(data []byte) (helmRelease, error) {
	var rel helmRelease
	raw, err := base64.StdEncoding.DecodeString(string(data))
	if err != nil {
		return rel, err
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return rel, err
	}
	js, err := io.ReadAll(zr)
	if err != nil {
		return rel, err
	}
	return rel, json.Unmarshal(js, &rel)
}

// routeOnStep reports whether the HTTPRoute sends 25% to the canary
// Service and the stable Service selects only the stable revision's pods.
func (s *helmStory) routeOnStep(ctx context.Context, stable string) (bool, string, error) {
	var route gatewayv1.HTTPRoute
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: App}, &route); err != nil {
		return false, "", err
	}
	weights := map[string]int32{}
	for _, r := range route.Spec.Rules {
		for _, b := range r.BackendRefs {
			if b.Weight != nil {
				weights[string(b.Name)] += *b.Weight
			}
		}
	}
	var svc corev1.Service
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: App}, &svc); err != nil {
		return false, "", err
	}
	canary, total := weights[App+"-canary"], weights[App]+weights[App+"-canary"]
	narrowed := svc.Spec.Selector[appsv1.DefaultDeploymentUniqueLabelKey] != "" // a Deployment released in place
	ok := total > 0 && canary*100 == 25*total && narrowed
	return ok, fmt.Sprintf("route weights %v, stable Service selector %v (stable revision %s)", weights, svc.Spec.Selector, stable), nil
}

// helmLog is the tail of helm-controller's log.
func (s *helmStory) helmLog() string {
	var d appsv1.Deployment
	_ = s.c.Get(s.ctx, client.ObjectKey{Namespace: Namespace, Name: App}, &d)
	return fmt.Sprintf("Deployment paused=%v generation %d observed %d\n%s", d.Spec.Paused, d.Generation, d.Status.ObservedGeneration,
		proc.Tail(filepath.Join(s.tmp, flux.HelmController+".log"), 30))
}
