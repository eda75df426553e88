package flux

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/test/chartrun"
	"github.com/rollgate/rollgate/test/gitserver"
	"github.com/rollgate/rollgate/test/kwok"
	"github.com/rollgate/rollgate/test/repo"
	"github.com/rollgate/rollgate/test/rig"
)

// The recipe of docs/install.md: its Git URL, and the names it installs.
const (
	installNS      = "rollgate-system"
	installName    = "rollgate" // HelmRelease, release, Deployment and webhook configurations
	installRepo    = "rollgate"
	installAppNS   = "shop-flux"
	installNoFight = 2 * time.Minute
	// driftCheckEvery is how often the test asks helm-controller to
	// reconcile the HelmRelease (its drift detection runs at each
	// reconcile; the recipe's interval is 5m).
	driftCheckEvery = 10 * time.Second
)

var helmReleaseGVK = schema.GroupVersionKind{Group: "helm.toolkit.fluxcd.io", Version: "v2", Kind: "HelmRelease"}

// TestInstallRollgateWithFlux installs rollgate itself through Flux: the
// GitRepository and HelmRelease of docs/install.md, applied as written
// (only the Git URL changed), install charts/rollgate from Git with
// helm-controller's drift detection enabled; the chart's controller runs as
// the installed Deployment declares it (test/chartrun). A release waits at
// a manual gate for two minutes while helm-controller is made to reconcile
// (and so to check drift) every 10 s: no drift may be found or corrected,
// no Helm release made, and the webhooks keep the controller's CA bundle.
// Then a chart version bump is committed to Git mid-release: one upgrade,
// the new controller resumes the release where it stood, and two approvals
// complete it.
func TestInstallRollgateWithFlux(t *testing.T) {
	for _, need := range []string{filepath.Join(HelmCRDs(), "crds"), filepath.Join(defaultBin(), HelmController)} {
		if _, err := os.Stat(need); err != nil {
			t.Fatalf("helm-controller: %v (make tools-helmcontroller)", err)
		}
	}
	begin := time.Now()
	scheme := rig.NewScheme(t)
	cluster := kwok.Start(t, kwok.Options{Nodes: 3, Scheme: scheme})
	c := cluster.Client
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	for _, bin := range []string{"", HelmCRDs()} {
		if err := InstallCRDs(ctx, cluster.Kubeconfig, bin); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "flux-system"}}); err != nil {
		t.Fatal(err)
	}
	git, err := gitserver.New(gitserver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = git.Close() })
	files := chartrun.ChartFiles(t)
	url, err := git.CreateRepo(installRepo, files)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	fc, err := Start(ctx, Options{Kubeconfig: cluster.Kubeconfig, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fc.Stop() })
	helm, err := StartHelm(ctx, Options{Kubeconfig: cluster.Kubeconfig, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("helm-controller log: %s", filepath.Join(dir, HelmController+".log"))
		}
		_ = helm.Stop()
	})
	s := &fluxInstall{t: t, c: c, kubeconfig: cluster.Kubeconfig, git: git}
	t.Logf("kwok, Git, source- and helm-controller up in %s", time.Since(begin).Round(time.Millisecond))

	// Given the GitRepository and HelmRelease of docs/install.md.
	installed := time.Now()
	s.kubectl(chartrun.InstallRecipe(t, "kind: HelmRelease", url), "apply", "-f", "-")
	head, err := git.Head(installRepo, "main")
	if err != nil {
		t.Fatal(err)
	}
	s.waitReleased(3*time.Minute, head, "0.2.0")
	t.Logf("helm-controller installed the chart in %s", time.Since(installed).Round(time.Millisecond))
	ctrl := chartrun.StartT(t, chartrun.Options{Kubeconfig: cluster.Kubeconfig, Namespace: installNS, Deployment: installName})
	bundle := chartrun.WaitWebhooks(t, c, installName, ctrl, nil)

	// And a release of a Deployment waiting at the gate of step 1.
	r := &chartrun.Release{T: t, C: c, Kubeconfig: cluster.Kubeconfig, Namespace: installAppNS}
	r.GivenAtGate()
	pods, before := r.PodNames(), r.Rollout()

	// Then over two minutes at the gate helm-controller finds no drift.
	first := s.sample(installNoFight, bundle)
	first.assertNoFight(t, "at the gate", 0)

	// When a new chart version is committed to Git mid-release.
	upgradeBegin := time.Now()
	if head, err = git.Commit(installRepo, "main", "rollgate chart "+chartrun.BumpedVersion, chartrun.ChartBump(t, files)); err != nil {
		t.Fatal(err)
	}
	s.requestReconcile(SourceGroupGitRepository, "flux-system")
	s.waitReleased(3*time.Minute, head, chartrun.BumpedVersion)
	var d appsv1.Deployment
	if err := c.Get(ctx, client.ObjectKey{Namespace: installNS, Name: installName}, &d); err != nil {
		t.Fatal(err)
	}
	if args := d.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, chartrun.BumpedFlag) {
		t.Fatalf("the upgraded Deployment does not carry the new chart's value: %q", args)
	}
	if ca, _, found := chartrun.Webhooks(c, installName); !bytes.Equal(ca, bundle) {
		t.Fatalf("the upgrade changed the webhooks: %s (want the controller's CA bundle, %d bytes)", found, len(bundle))
	}
	// And the controller pod is replaced, as the Deployment's rollout would.
	if err := ctrl.Stop(); err != nil {
		t.Fatal(err)
	}
	ctrl = chartrun.StartT(t, chartrun.Options{Kubeconfig: cluster.Kubeconfig, Namespace: installNS, Deployment: installName})
	chartrun.WaitWebhooks(t, c, installName, ctrl, bundle)
	t.Logf("upgrade released and the controller replaced in %s", time.Since(upgradeBegin).Round(time.Millisecond))

	// Then the release stands where it stood and Flux still finds no drift.
	after := s.sample(30*time.Second, bundle)
	after.assertNoFight(t, "after the upgrade", first.releases+1)
	r.AssertStill(before, pods)

	// And two approvals complete it.
	r.ApproveAndComplete()
	t.Logf("the whole story took %s", time.Since(begin).Round(time.Millisecond))
}

// SourceGroupGitRepository is the GitRepository kind, for requestReconcile.
var SourceGroupGitRepository = schema.GroupVersionKind{Group: "source.toolkit.fluxcd.io", Version: "v1", Kind: "GitRepository"}

type fluxInstall struct {
	t          *testing.T
	c          client.Client
	kubeconfig string
	git        *gitserver.Server
}

func (s *fluxInstall) kubectl(stdin string, args ...string) {
	s.t.Helper()
	cmd := exec.Command(repo.Tool(s.t, "kubectl"), append([]string{"--kubeconfig", s.kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	if out, err := cmd.CombinedOutput(); err != nil {
		s.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// helmRelease reads the HelmRelease.
func (s *fluxInstall) helmRelease() (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(helmReleaseGVK)
	return u, s.c.Get(context.Background(), client.ObjectKey{Namespace: installNS, Name: installName}, u)
}

// waitReleased waits until the HelmRelease is Ready with its last release
// deployed from chart version at Git commit head.
func (s *fluxInstall) waitReleased(timeout time.Duration, head, version string) {
	s.t.Helper()
	rig.Until(s.t, context.Background(), timeout, "the HelmRelease releasing chart "+version+" at "+head[:12], func() (bool, string) {
		u, err := s.helmRelease()
		if err != nil {
			return false, err.Error()
		}
		ready, chart := HelmReleaseState(u)
		return strings.HasPrefix(ready, "True") && strings.HasPrefix(chart, version+"+"+head[:12]) && strings.HasSuffix(chart, " deployed"),
			fmt.Sprintf("Ready=%s, last release %s", ready, chart)
	})
}

// requestReconcile asks a Flux controller to reconcile the object named
// installName (gvk in ns) now, as `flux reconcile` does, and returns the
// token it set.
func (s *fluxInstall) requestReconcile(gvk schema.GroupVersionKind, ns string) string {
	s.t.Helper()
	token := time.Now().Format(time.RFC3339Nano)
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	u.SetNamespace(ns)
	u.SetName(installName)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"reconcile.fluxcd.io/requestedAt":%q}}}`, token)
	if err := s.c.Patch(context.Background(), u, client.RawPatch("application/merge-patch+json", []byte(patch))); err != nil {
		s.t.Fatal(err)
	}
	return token
}

// fluxSamples is what sampling the HelmRelease, its Helm history, its
// events and the webhooks saw.
type fluxSamples struct {
	n, notReady int
	notReadyWhy string // the last Ready condition that was not True
	// releases is the number of Helm release versions at the end.
	releases int
	// checks counts the reconciles helm-controller handled (each one
	// checks drift); corrections the DriftCorrected/DriftDetected events.
	requested, checks, corrections int
	drift                          string
	badBundle                      int
	span                           time.Duration
}

// sample reads the HelmRelease, the Helm release Secrets, the events and
// the webhooks every 500 ms for d, and asks for a reconcile every
// driftCheckEvery.
func (s *fluxInstall) sample(d time.Duration, bundle []byte) *fluxSamples {
	s.t.Helper()
	out := &fluxSamples{}
	ctx := context.Background()
	start := time.Now()
	var lastRequest time.Time
	handled := map[string]bool{}
	for time.Since(start) < d {
		if time.Since(lastRequest) >= driftCheckEvery {
			s.requestReconcile(helmReleaseGVK, installNS)
			out.requested++
			lastRequest = time.Now()
		}
		if u, err := s.helmRelease(); err == nil {
			out.n++
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, c := range conds {
				if m, _ := c.(map[string]any); m["type"] == "Ready" && m["status"] != "True" {
					out.notReady++
					out.notReadyWhy = fmt.Sprintf("%v: %v", m["reason"], m["message"])
				}
			}
			if h, _, _ := unstructured.NestedString(u.Object, "status", "lastHandledReconcileAt"); h != "" {
				handled[h] = true
			}
		}
		var secrets corev1.SecretList
		if err := s.c.List(ctx, &secrets, client.InNamespace(installNS), client.MatchingLabels{"owner": "helm", "name": installName}); err == nil {
			out.releases = len(secrets.Items)
		}
		var events corev1.EventList
		if err := s.c.List(ctx, &events, client.InNamespace(installNS)); err == nil {
			out.corrections = 0
			for _, e := range events.Items {
				if e.InvolvedObject.Kind == "HelmRelease" && strings.HasPrefix(e.Reason, "Drift") {
					out.corrections += int(max(e.Count, 1))
					out.drift = e.Reason + ": " + e.Message
				}
			}
		}
		if ca, _, _ := chartrun.Webhooks(s.c, installName); !bytes.Equal(ca, bundle) {
			out.badBundle++
		}
		time.Sleep(500 * time.Millisecond)
	}
	out.checks = len(handled)
	out.span = time.Since(start)
	return out
}

// assertNoFight fails the test for any drift event, any Helm release made
// (beyond wantReleases, when not 0), a HelmRelease not Ready, too few drift
// checks to mean anything, and any CA bundle not the controller's.
func (f *fluxSamples) assertNoFight(t *testing.T, phase string, wantReleases int) {
	t.Helper()
	t.Logf("%s: %d samples over %s; %d reconciles requested, %d handled (each checks drift); %d drift events%s; %d Helm releases; %d samples not Ready; %d samples with another CA bundle",
		phase, f.n, f.span.Round(time.Second), f.requested, f.checks, f.corrections, map[bool]string{true: " (" + f.drift + ")", false: ""}[f.drift != ""],
		f.releases, f.notReady, f.badBundle)
	if f.n == 0 {
		t.Fatalf("%s: no samples", phase)
	}
	if f.checks < f.requested/2 {
		t.Errorf("%s: helm-controller handled %d of %d requested reconciles: too few drift checks to tell", phase, f.checks, f.requested)
	}
	if f.corrections > 0 {
		t.Errorf("%s: helm-controller found drift %d times: %s", phase, f.corrections, f.drift)
	}
	if wantReleases > 0 && f.releases != wantReleases {
		t.Errorf("%s: %d Helm release versions, want %d (one for the commit)", phase, f.releases, wantReleases)
	}
	if f.notReady > 0 {
		t.Errorf("%s: the HelmRelease was not Ready in %d samples, last: %s", phase, f.notReady, f.notReadyWhy)
	}
	if f.badBundle > 0 {
		t.Errorf("%s: %d samples saw a webhook without the controller's CA bundle", phase, f.badBundle)
	}
	if t.Failed() {
		t.FailNow()
	}
}
