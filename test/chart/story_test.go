package chart

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/chartrun"
	"github.com/rollgate/rollgate/test/kwok"
	"github.com/rollgate/rollgate/test/repo"
	"github.com/rollgate/rollgate/test/rig"
)

// upgradeStory is one kwok cluster, the chart release on it and the
// controller process running it. Its helpers fail the test.
type upgradeStory struct {
	t        *testing.T
	cluster  *kwok.Cluster
	c        client.Client
	warnings *warnings
	// ctrl is the running controller; old the previous chart's, stopped
	// by replaceController.
	ctrl, old *chartrun.Controller
	// prevVersion is the version of the previous chart release.
	prevVersion string
}

func newUpgradeStory(t *testing.T) *upgradeStory {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	cl := kwok.Start(t, kwok.Options{Nodes: 2, Scheme: scheme})
	// A client of its own, to read the warnings the webhook answers with.
	s := &upgradeStory{t: t, cluster: cl, warnings: &warnings{}}
	cfg := rest.CopyConfig(cl.RESTConfig)
	cfg.WarningHandlerWithContext = s.warnings
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	s.c = c
	return s
}

// warnings records the warnings of the API server's answers.
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeaderWithContext(_ context.Context, _ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

// take returns the warnings recorded since the last take.
func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}

func (s *upgradeStory) helm(args ...string) string {
	s.t.Helper()
	return helm(s.t, append(args, "--kubeconfig="+s.cluster.Kubeconfig)...)
}

// startController runs the chart's controller Deployment as it is now,
// with binary ("" means the current build).
func (s *upgradeStory) startController(binary string) *chartrun.Controller {
	s.t.Helper()
	c := chartrun.StartT(s.t, chartrun.Options{Kubeconfig: s.cluster.Kubeconfig, Namespace: releaseNS, Deployment: controller, Binary: binary})
	s.ctrl = c
	return c
}

// until waits until cond holds (see rig.Wait), failing with cond's last
// word after timeout, or at once when the controller died.
func (s *upgradeStory) until(timeout time.Duration, what string, cond func() (bool, string)) {
	s.t.Helper()
	took, err := rig.Wait(context.Background(), timeout, what, func(context.Context) (bool, string, error) {
		if s.ctrl != nil {
			if err := s.ctrl.Exited(); err != nil {
				return false, "", err
			}
		}
		ok, why := cond()
		return ok, why, nil
	})
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Logf("%s: after %s", what, took.Round(time.Millisecond))
}

// apply server-side applies every document of docs as Flux does.
func (s *upgradeStory) apply(docs string) {
	s.t.Helper()
	for _, u := range rig.Decode(s.t, docs) {
		if err := s.c.Patch(context.Background(), u, client.Apply, client.FieldOwner(fluxManager), client.ForceOwnership); err != nil {
			s.t.Fatalf("apply %s %s as %s: %v", u.GetKind(), u.GetName(), fluxManager, err)
		}
	}
}

// applyCRDs applies the current chart's CRDs as `kubectl apply
// --server-side --force-conflicts` does.
func (s *upgradeStory) applyCRDs() {
	s.t.Helper()
	files, _ := filepath.Glob(filepath.Join(chartDir(), "crds", "*.yaml"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			s.t.Fatal(err)
		}
		for _, u := range rig.Decode(s.t, string(data)) {
			if err := s.c.Patch(context.Background(), u, client.Apply, client.FieldOwner("kubectl"), client.ForceOwnership); err != nil {
				s.t.Fatalf("apply CRD %s: %v", u.GetName(), err)
			}
		}
	}
}

func (s *upgradeStory) rollout() *v1alpha1.Rollout {
	s.t.Helper()
	ro := &v1alpha1.Rollout{}
	if err := s.c.Get(context.Background(), client.ObjectKey{Namespace: appNS, Name: "web"}, ro); err != nil {
		s.t.Fatal(err)
	}
	return ro
}

func (s *upgradeStory) deployment() *appsv1.Deployment {
	s.t.Helper()
	d := &appsv1.Deployment{}
	if err := s.c.Get(context.Background(), client.ObjectKey{Namespace: appNS, Name: "web"}, d); err != nil {
		s.t.Fatal(err)
	}
	return d
}

// atGate waits until step waits for approval with n new pods (webV2),
// ready, the rest old (webV1), and no pod still terminating.
func (s *upgradeStory) atGate(step int32, n int32) {
	s.t.Helper()
	s.atGateOf(step, n, webV2, webV1)
}

// atGateOf waits until step waits for approval with n pods of image
// canary, ready, the rest of image stable, and no pod still terminating.
func (s *upgradeStory) atGateOf(step int32, n int32, canary, stable string) {
	s.t.Helper()
	start := time.Now()
	var pods census
	s.until(90*time.Second, fmt.Sprintf("step %d waiting for approval with %d new pods", step, n), func() (bool, string) {
		ro := s.rollout()
		var terminating int
		pods, terminating, _ = s.podsAndTerminating()
		a := ro.Status.AwaitingApproval
		return a != nil && a.Step == step && a.Revision == ro.Status.CanaryRevision &&
				ro.Status.CurrentStepIndex == step && ro.Status.CurrentStepState == v1alpha1.StepPaused &&
				ro.Status.ObservedGeneration == ro.Generation && conditions.IsTrue(ro, v1alpha1.AwaitingApprovalCondition) &&
				pods.count(canary) == ready(n) && pods.count(stable) == ready(appReplicas-n) && len(pods) == appReplicas && terminating == 0,
			fmt.Sprintf("%s, pods %v, %d terminating", positionOf(ro), pods, terminating)
	})
	if d := s.deployment(); !d.Spec.Paused {
		s.t.Fatalf("at the gate of step %d the Deployment must be held paused", step)
	}
	s.t.Logf("step %d waiting for approval after %s: pods %v", step, time.Since(start).Round(time.Millisecond), pods)
}

// approve opens the gate of step with the CLI, in the cluster.
func (s *upgradeStory) approve(step int32) {
	s.t.Helper()
	cmd := exec.Command(repo.Tool(s.t, "rollgate"), "approve", appNS+"/web", "--kubeconfig", s.cluster.Kubeconfig, "--by", "upgrade-test")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), fmt.Sprintf("approved step %d ", step)) {
		s.t.Fatalf("rollgate approve (step %d): %v\n%s", step, err, out)
	}
}

// leaseHolder is the holder of the controller's leader election Lease.
func (s *upgradeStory) leaseHolder() string {
	var l coordinationv1.Lease
	if err := s.c.Get(context.Background(), client.ObjectKey{Namespace: releaseNS, Name: "rollgate.dev"}, &l); err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// webhookRegistration is the URL and CA bundle of the mutating webhook.
func (s *upgradeStory) webhookRegistration() (string, []byte) {
	var m admissionregistrationv1.MutatingWebhookConfiguration
	if err := s.c.Get(context.Background(), client.ObjectKey{Name: controller}, &m); err != nil || len(m.Webhooks) == 0 {
		return "", nil
	}
	cc := m.Webhooks[0].ClientConfig
	if cc.URL == nil {
		return "service " + fmt.Sprint(cc.Service), cc.CABundle
	}
	return *cc.URL, cc.CABundle
}

// assertWebhooksKept checks that both webhook configurations still hold
// the registration the running controller wrote: its URL and the CA
// bundle seen at the gate.
func (s *upgradeStory) assertWebhooksKept(bundle []byte, url string) {
	s.t.Helper()
	var m admissionregistrationv1.MutatingWebhookConfiguration
	var v admissionregistrationv1.ValidatingWebhookConfiguration
	for _, obj := range []client.Object{&m, &v} {
		if err := s.c.Get(context.Background(), client.ObjectKey{Name: controller}, obj); err != nil {
			s.t.Fatal(err)
		}
	}
	if len(m.Webhooks) == 0 || len(v.Webhooks) == 0 {
		s.t.Fatalf("webhooks after the upgrade: %d mutating, %d validating; want some of each", len(m.Webhooks), len(v.Webhooks))
	}
	configs := map[string]admissionregistrationv1.WebhookClientConfig{}
	for _, w := range m.Webhooks {
		configs["mutating "+w.Name] = w.ClientConfig
	}
	for _, w := range v.Webhooks {
		configs["validating "+w.Name] = w.ClientConfig
	}
	for kind, cc := range configs {
		if len(cc.CABundle) == 0 || !bytes.Equal(cc.CABundle, bundle) {
			s.t.Errorf("helm upgrade changed the %s webhook's CA bundle (%d bytes, had %d)", kind, len(cc.CABundle), len(bundle))
		}
		if cc.URL == nil || !strings.HasPrefix(*cc.URL, url+"/") {
			s.t.Errorf("helm upgrade changed the %s webhook's client config to URL %v, Service %v; want the controller's URL %s/...", kind, ptr.Deref(cc.URL, "none"), cc.Service, url)
		}
	}
}

// assertChartLabels checks the chart version on the controller Deployment.
func (s *upgradeStory) assertChartLabels(version string) {
	s.t.Helper()
	var d appsv1.Deployment
	if err := s.c.Get(context.Background(), client.ObjectKey{Namespace: releaseNS, Name: controller}, &d); err != nil {
		s.t.Fatal(err)
	}
	if got := d.Labels["helm.sh/chart"]; got != "rollgate-"+version {
		s.t.Fatalf("controller Deployment labelled helm.sh/chart=%s, want rollgate-%s", got, version)
	}
}

// assertChartFlags checks that the controller runs with the chart's flags,
// only its listen addresses, webhook URL and kubeconfig made local.
func (s *upgradeStory) assertChartFlags(c *chartrun.Controller) {
	s.t.Helper()
	args := c.Args()
	for _, want := range []string{"--namespace=" + releaseNS, "--leader-elect=true",
		"--webhook-service=" + controller + "-webhook", "--webhook-secret=" + controller + "-webhook-cert",
		"--webhook-config-name=" + controller, "--git-default-interval=5s", "--git-status-branch=rollgate/status",
		"--lua-configmap=rollgate-lua", "--log-level=info", "--webhook-bind-host=127.0.0.1", "--webhook-url=" + c.WebhookURL()} {
		if !slices.Contains(args, want) {
			s.t.Errorf("controller args lack %s: %q", want, args)
		}
	}
	for _, a := range args {
		if strings.HasSuffix(a, "=:8080") || strings.HasSuffix(a, "=:8081") || a == "--webhook-port=9443" || a == "--kubeconfig="+s.cluster.Kubeconfig {
			s.t.Errorf("controller arg %s should have been made local: %q", a, args)
		}
	}
}

// assertNoForbidden fails on any request the chart's RBAC refused the
// controllers.
func (s *upgradeStory) assertNoForbidden(cs ...*chartrun.Controller) {
	s.t.Helper()
	for _, c := range cs {
		data, err := os.ReadFile(c.LogPath())
		if err != nil {
			s.t.Fatal(err)
		}
		var refused []string
		for _, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, "forbidden") {
				refused = append(refused, line)
			}
		}
		if len(refused) > 0 {
			s.t.Errorf("the chart's RBAC refused the controller %d requests, the first:\n%s", len(refused), strings.Join(refused[:min(3, len(refused))], "\n"))
		}
	}
}

// reconciles scrapes the controller's metrics: Rollout reconciles that
// succeeded (or requeued) and that failed.
func (s *upgradeStory) reconciles() (ok, failed int) {
	s.t.Helper()
	body, err := httpGet(s.ctrl.MetricsURL())
	if err != nil {
		s.t.Fatalf("scrape the controller's metrics: %v", err)
	}
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, "controller_runtime_reconcile_total{") || !strings.Contains(line, `controller="rollout"`) {
			continue
		}
		var n float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &n); err != nil {
			s.t.Fatalf("metrics line %q: %v", line, err)
		}
		if strings.Contains(line, `result="error"`) {
			failed += int(n)
		} else {
			ok += int(n)
		}
	}
	return ok, failed
}
