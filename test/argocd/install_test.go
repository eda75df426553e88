package argocd_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/test/chartrun"
)

const (
	installNS     = "rollgate-system" // the Application's destination, as the page writes it
	installName   = "rollgate"        // Application, release, Deployment and webhook configurations
	installAppNS  = "shop-argo"
	installRepo   = "rollgate-chart"
	noFightPeriod = 2 * time.Minute
)

// TestInstallRollgateWithArgoCD installs rollgate itself through Argo CD:
// the Application block of docs/install.md, applied as written (only the
// Git URL changed), syncs charts/rollgate from Git with automated sync,
// self-heal and server-side apply; the chart's controller runs as the
// synced Deployment declares it (test/chartrun). A release waits at a
// manual gate for two minutes while Argo CD is sampled: it must never see
// the Application OutOfSync nor sync again, and the webhooks must keep the
// controller's CA bundle. Then a chart version bump is committed to Git
// mid-release: Argo CD syncs it once, the new controller resumes the
// release where it stood, and two approvals complete it.
func TestInstallRollgateWithArgoCD(t *testing.T) {
	e := shared
	ctx := context.Background()
	begin := time.Now()

	// The chart's controller is the only rollgate: the shared env's
	// in-process one stops for the story (another webhook holding the
	// same workloads would hold them twice).
	e.withoutInProcessController(t)

	// Given the chart in Git and the Application of docs/install.md.
	files := chartrun.ChartFiles(t)
	url, err := e.git.CreateRepo(installRepo, files)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeInstall(t, e) })
	if _, err := e.kubectl(ctx, chartrun.InstallRecipe(t, "kind: Application", url), "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	a := &app{t: t, e: e, name: installName}
	a.eventually(3*time.Minute, "the Application synced and healthy", func(s appState) bool {
		return s.sync == "Synced" && s.health == "Healthy"
	})
	t.Logf("Argo CD installed the chart in %s", time.Since(begin).Round(time.Millisecond))
	ctrl := chartrun.StartT(t, chartrun.Options{Kubeconfig: e.cluster.Kubeconfig, Namespace: installNS, Deployment: installName})
	bundle := chartrun.WaitWebhooks(t, e.c, installName, ctrl, nil)

	// And a release of a Deployment waiting at the gate of step 1.
	r := &chartrun.Release{T: t, C: e.c, Kubeconfig: e.cluster.Kubeconfig, Namespace: installAppNS}
	r.GivenAtGate()
	pods := r.PodNames()
	before := r.Rollout()

	// Then over two minutes at the gate Argo CD sees nothing to correct.
	first := sampleInstall(t, e, a, noFightPeriod)
	first.assertNoFight(t, "at the gate", bundle, 0)

	// When a new chart version is committed to Git mid-release.
	upgradeBegin := time.Now()
	head, err := e.git.Commit(installRepo, "main", "rollgate chart "+chartrun.BumpedVersion, chartrun.ChartBump(t, files))
	if err != nil {
		t.Fatal(err)
	}
	a.refresh()
	a.eventually(2*time.Minute, "Argo CD synced the new chart version", func(st appState) bool {
		return st.sync == "Synced" && st.revision == head && st.operation == "Succeeded"
	})
	r.Until(time.Minute, "the Deployment declares the new chart", func() (bool, string) {
		var d appsv1.Deployment
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: installNS, Name: installName}, &d); err != nil {
			return false, err.Error()
		}
		args := strings.Join(d.Spec.Template.Spec.Containers[0].Args, " ")
		return d.Labels["helm.sh/chart"] == "rollgate-"+chartrun.BumpedVersion && strings.Contains(args, chartrun.BumpedFlag), d.Labels["helm.sh/chart"] + " " + args
	})
	if ca := webhookCA(e); !bytes.Equal(ca, bundle) {
		t.Fatalf("the sync of the new chart changed the webhooks' CA bundle (%d bytes, want the controller's %d)", len(ca), len(bundle))
	}
	// And the controller pod is replaced, as the Deployment's rollout would.
	if err := ctrl.Stop(); err != nil {
		t.Fatal(err)
	}
	ctrl = chartrun.StartT(t, chartrun.Options{Kubeconfig: e.cluster.Kubeconfig, Namespace: installNS, Deployment: installName})
	if !slices.Contains(ctrl.Args(), chartrun.BumpedFlag) {
		t.Fatalf("the new controller does not run with the new chart's flags: %q", ctrl.Args())
	}
	chartrun.WaitWebhooks(t, e.c, installName, ctrl, bundle)
	t.Logf("upgrade synced and the controller replaced in %s", time.Since(upgradeBegin).Round(time.Millisecond))

	// Then the release stands where it stood and Argo CD still sees
	// nothing to correct.
	after := sampleInstall(t, e, a, 20*time.Second)
	after.assertNoFight(t, "after the upgrade", bundle, first.history)
	r.AssertStill(before, pods)

	// And two approvals complete it.
	r.ApproveAndComplete()
	t.Logf("the whole story took %s", time.Since(begin).Round(time.Millisecond))
}

// removeInstall deletes the Application (its resources stay: no
// finalizer) and the webhook configurations, which would refuse the other
// tests' workload updates once their controller is gone.
func removeInstall(t *testing.T, e *env) {
	ctx := context.Background()
	if t.Failed() {
		out, _ := e.argo.CLI(ctx, "app", "get", installName, "--show-operation")
		t.Logf("argocd app get %s:\n%s", installName, out)
	}
	_, _ = e.kubectl(ctx, "", "-n", "argocd", "delete", "application", installName, "--wait=false")
	for _, obj := range []client.Object{&admissionregistrationv1.MutatingWebhookConfiguration{}, &admissionregistrationv1.ValidatingWebhookConfiguration{}} {
		obj.SetName(installName)
		_ = e.c.Delete(ctx, obj)
	}
}

// webhookCA is the CA bundle every webhook of the installed chart carries
// (nil when they differ or one has none).
func webhookCA(e *env) []byte {
	ca, _, _ := chartrun.Webhooks(e.c, installName)
	return ca
}

// installSamples is what sampling the Application and the webhooks saw.
type installSamples struct {
	n, outOfSync int
	// operations are the distinct sync operations (by start time) seen in
	// status.operationState; history is the length of status.history at
	// the end.
	operations map[string]bool
	history    int
	// bundles counts samples whose CA bundles were not all the expected one.
	badBundle int
	states    map[string]int
	span      time.Duration
}

// sampleInstall reads the Application and the webhook configurations every
// 500 ms for d.
func sampleInstall(t *testing.T, e *env, a *app, d time.Duration) *installSamples {
	t.Helper()
	out := &installSamples{operations: map[string]bool{}, states: map[string]int{}}
	start := time.Now()
	bundle := webhookCA(e)
	for time.Since(start) < d {
		if err := e.argo.Exited(); err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(applicationGVK)
		if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: "argocd", Name: a.name}, u); err == nil {
			sync, _, _ := unstructured.NestedString(u.Object, "status", "sync", "status")
			health, _, _ := unstructured.NestedString(u.Object, "status", "health", "status")
			op, _, _ := unstructured.NestedString(u.Object, "status", "operationState", "startedAt")
			hist, _, _ := unstructured.NestedSlice(u.Object, "status", "history")
			out.n++
			out.states[sync+"/"+health]++
			if sync != "Synced" {
				out.outOfSync++
				if out.outOfSync == 1 {
					diff, _ := e.argo.CLI(context.Background(), "app", "diff", a.name)
					t.Logf("the Application is %s: argocd app diff:\n%s", sync, diff)
				}
			}
			out.operations[op] = true
			out.history = len(hist)
		}
		if ca := webhookCA(e); !bytes.Equal(ca, bundle) {
			out.badBundle++
		}
		time.Sleep(500 * time.Millisecond)
	}
	out.span = time.Since(start)
	return out
}

// assertNoFight fails the test for any OutOfSync sample, any sync
// operation beyond the one in place when sampling began, any CA bundle not
// the controller's, and a sync history grown past wantHistory (0: as it
// was at the first sample).
func (s *installSamples) assertNoFight(t *testing.T, phase string, bundle []byte, wantHistory int) {
	t.Helper()
	var states []string
	for k, n := range s.states {
		states = append(states, fmt.Sprintf("%s: %d", k, n))
	}
	sort.Strings(states)
	t.Logf("%s: %d samples over %s (%s); %d OutOfSync, %d sync operation(s) seen, history %d, %d samples with another CA bundle (%d bytes expected)",
		phase, s.n, s.span.Round(time.Second), strings.Join(states, ", "), s.outOfSync, len(s.operations), s.history, s.badBundle, len(bundle))
	if s.n == 0 {
		t.Fatalf("%s: no samples", phase)
	}
	if s.outOfSync > 0 {
		t.Errorf("%s: Argo CD saw the Application differ from Git in %d of %d samples", phase, s.outOfSync, s.n)
	}
	if len(s.operations) != 1 {
		t.Errorf("%s: Argo CD ran %d sync operations while nothing changed in Git", phase, len(s.operations)-1)
	}
	if wantHistory > 0 && s.history != wantHistory+1 {
		t.Errorf("%s: the sync history has %d entries, want %d (one sync for the commit)", phase, s.history, wantHistory+1)
	}
	if s.badBundle > 0 {
		t.Errorf("%s: %d samples saw a webhook without the controller's CA bundle", phase, s.badBundle)
	}
	if t.Failed() {
		t.FailNow()
	}
}

// withoutInProcessController stops the shared env's in-process controller
// and removes its webhook configurations until the test ends, then starts
// it again. The test must not be parallel: no other test runs meanwhile.
func (e *env) withoutInProcessController(t *testing.T) {
	t.Helper()
	e.stopController()
	e.stopController = nil
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		stop, err := e.startController(ctx)
		if err != nil {
			t.Errorf("start the in-process controller again: %v", err)
			return
		}
		e.stopController = stop
	})
	for _, obj := range []client.Object{&admissionregistrationv1.MutatingWebhookConfiguration{}, &admissionregistrationv1.ValidatingWebhookConfiguration{}} {
		obj.SetName(inProcessNS)
		if err := client.IgnoreNotFound(e.c.Delete(context.Background(), obj)); err != nil {
			t.Fatal(err)
		}
	}
}
