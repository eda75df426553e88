package chart

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/chartrun"
)

// TestNamespacedChartReleases installs the chart with
// watchAllNamespaces=false in the application's namespace (shop) and runs
// its controller as the chart declares it (its args; its ServiceAccount's
// RBAC, which then holds in shop alone except for the webhook
// configurations; through test/chartrun). The Rollout in shop is released
// to the end through two manual gates; the same application in another
// namespace, under a Rollout too, is never touched by the controller and
// its new version rolls out as it would without rollgate; and the
// controller is refused no request: nothing it does needs more than the
// chart grants. The chart's notifier (notifications.enabled) runs the same
// way, with its own ServiceAccount: it tells a webhook receiver of both
// gates and of the release, and is refused no request either.
func TestNamespacedChartReleases(t *testing.T) {
	t.Parallel()
	s := newUpgradeStory(t)
	bin := buildCurrentController(t)
	notifierBin := buildCurrent(t, "rollgate-notifier")
	s.apply(namespaceYAML)
	s.helm("install", release, chartDir(), "-n", appNS, "--set", "replicaCount=1", "--set", "watchAllNamespaces=false",
		"--set", "notifications.enabled=true", "--wait", "--timeout=2m")
	ctrl := chartrun.StartT(t, chartrun.Options{Kubeconfig: s.cluster.Kubeconfig, Namespace: appNS, Deployment: controller, Binary: bin})
	s.ctrl = ctrl
	told := &receiver{}
	hook := httptest.NewServer(told)
	t.Cleanup(hook.Close)
	s.apply(fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata: {name: rollgate-notifications, namespace: %s}
data:
  service.webhook.receiver: |
    url: %s
  subscriptions: |
    - recipients: [receiver]
      triggers: [on-gate-waiting, on-released]
`, appNS, hook.URL))
	notifier := chartrun.StartT(t, chartrun.Options{Kubeconfig: s.cluster.Kubeconfig, Namespace: appNS,
		Deployment: controller + "-notifier", Container: chartrun.NotifierName, Binary: notifierBin})
	if args := strings.Join(notifier.Args(), " "); !strings.Contains(args, "--watch-all-namespaces=false") || !strings.Contains(args, "--notifications-configmap=rollgate-notifications") {
		t.Fatalf("notifier run without the chart's flags: %v", notifier.Args())
	}
	if args := strings.Join(ctrl.Args(), " "); !strings.Contains(args, "--watch-all-namespaces=false") || !strings.Contains(args, "--webhook-config-name="+controller+"-"+appNS) {
		t.Fatalf("controller run without the chart's namespaced flags: %v", ctrl.Args())
	}

	const outlet = "outlet"
	elsewhere := func(docs string) string { return strings.ReplaceAll(docs, "namespace: "+appNS, "namespace: "+outlet) }
	s.apply(strings.ReplaceAll(namespaceYAML, "name: "+appNS, "name: "+outlet))
	s.apply(serviceYAML + deploymentYAML(webV1) + rolloutYAML)
	s.apply(elsewhere(serviceYAML + deploymentYAML(webV1) + rolloutYAML))
	s.until(90*time.Second, "v1 on every pod and the Rollout in shop Healthy", func() (bool, string) {
		ro := s.rollout()
		return ro.Status.Phase == v1alpha1.PhaseHealthy && s.deployment().Labels[v1alpha1.LabelControlled] != "", fmt.Sprint(positionOf(ro))
	})

	// When v2 arrives in both namespaces, shop's goes through both gates
	// to the end, and outlet's rolls out at once.
	s.apply(deploymentYAML(webV2))
	s.apply(elsewhere(deploymentYAML(webV2)))
	s.atGate(1, 1)
	canary := s.rollout().Status.CanaryRevision
	s.approve(1)
	s.atGate(2, appReplicas/2)
	s.approve(2)
	s.assertReleased(webV2, canary)

	var d appsv1.Deployment
	var ro v1alpha1.Rollout
	ctx := context.Background()
	s.until(60*time.Second, "outlet's Deployment at v2 on every replica, untouched", func() (bool, string) {
		if err := s.c.Get(ctx, client.ObjectKey{Namespace: outlet, Name: "web"}, &d); err != nil {
			return false, err.Error()
		}
		st := d.Status
		return st.UpdatedReplicas == appReplicas && st.Replicas == appReplicas && d.Spec.Template.Spec.Containers[0].Image == webV2,
			fmt.Sprintf("updated %d of %d", st.UpdatedReplicas, st.Replicas)
	})
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: outlet, Name: "web"}, &ro); err != nil {
		t.Fatal(err)
	}
	if len(ro.Finalizers) > 0 || ro.Status.ObservedGeneration != 0 || d.Labels[v1alpha1.LabelControlled] != "" || d.Spec.Paused {
		t.Errorf("the namespaced controller of %s touched %s: Rollout finalizers %v, status %+v; Deployment labels %v, paused %t",
			appNS, outlet, ro.Finalizers, ro.Status, d.Labels, d.Spec.Paused)
	}
	s.until(30*time.Second, "both gates and the release told", func() (bool, string) {
		got := told.got()
		return len(got) >= 3, strings.Join(got, " | ")
	})
	want := []string{
		fmt.Sprintf("%s/web: step 1 of 3 of %s waits for approval.", appNS, canary),
		fmt.Sprintf("%s/web: step 2 of 3 of %s waits for approval.", appNS, canary),
		fmt.Sprintf("%s/web: %s is released.", appNS, canary),
	}
	if got := told.got(); !slices.Equal(got, want) {
		t.Errorf("the receiver was told:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	s.assertNoForbidden(ctrl, notifier)
}

// receiver keeps the body of every request it gets.
type receiver struct {
	mu     sync.Mutex
	bodies []string
}

func (r *receiver) ServeHTTP(_ http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bodies = append(r.bodies, string(body))
}

func (r *receiver) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.bodies)
}
