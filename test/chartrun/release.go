package chartrun

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/repo"
	"github.com/rollgate/rollgate/test/rig"
)

// ReleasePods is how many pods the Deployment of a Release runs.
const ReleasePods = 4

// Release is an application released through the controller of an
// installed chart, in a test: the Deployment "web" of ReleasePods pods in
// Namespace and its Rollout, whose steps are one pod, half the pods and all
// of them, the first two behind manual gates. Images are web:1 and web:2;
// the Deployment is applied with Flux's field manager, as a GitOps tool
// would.
type Release struct {
	T          *testing.T
	C          client.Client
	Kubeconfig string
	Namespace  string
}

// GivenAtGate creates the application at web:1 and its Rollout, waits
// until it is Healthy, then applies web:2 and waits for step 1's gate.
func (r *Release) GivenAtGate() {
	r.T.Helper()
	r.apply(fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata: {name: %s}\n---\n", r.Namespace) + r.deploymentYAML("web:1") + "---" + WebRollout(r.Namespace))
	r.Until(90*time.Second, "web:1 on every pod and the Rollout Healthy", func() (bool, string) {
		ro, d := r.Rollout(), r.Deployment()
		n := r.ready("web:1")
		covered := d.Labels[v1alpha1.LabelControlled] != ""
		return ro.Status.Phase == v1alpha1.PhaseHealthy && n == ReleasePods && covered,
			fmt.Sprintf("phase %s, %d ready, covered %t", ro.Status.Phase, n, covered)
	})
	r.apply(r.deploymentYAML("web:2"))
	r.AtGate(1, 1)
}

// AtGate waits until step waits for its approval with n pods of web:2,
// the Deployment held paused.
func (r *Release) AtGate(step, n int32) {
	r.T.Helper()
	r.Until(90*time.Second, fmt.Sprintf("step %d waiting for approval with %d new pods", step, n), func() (bool, string) {
		ro := r.Rollout()
		a := ro.Status.AwaitingApproval
		v2, v1 := r.ready("web:2"), r.ready("web:1")
		return a != nil && a.Step == step && ro.Status.CurrentStepIndex == step && ro.Status.CurrentStepState == v1alpha1.StepPaused &&
				v2 == int(n) && v1 == ReleasePods-int(n) && r.Deployment().Spec.Paused,
			fmt.Sprintf("step %d %s, awaiting %t, web:2 %d, web:1 %d", ro.Status.CurrentStepIndex, ro.Status.CurrentStepState, a != nil, v2, v1)
	})
}

// AssertStill fails the test when the release is not where before stood:
// same step, paused at its gate, same canary revision, and pods the same
// as pods (PodNames).
func (r *Release) AssertStill(before *v1alpha1.Rollout, pods []string) {
	r.T.Helper()
	ro := r.Rollout()
	if ro.Status.CurrentStepIndex != before.Status.CurrentStepIndex || ro.Status.CurrentStepState != v1alpha1.StepPaused ||
		ro.Status.AwaitingApproval == nil || ro.Status.CanaryRevision != before.Status.CanaryRevision {
		r.T.Fatalf("the release moved: step %d %s canary %s (before: step %d %s canary %s)", ro.Status.CurrentStepIndex,
			ro.Status.CurrentStepState, ro.Status.CanaryRevision, before.Status.CurrentStepIndex, before.Status.CurrentStepState, before.Status.CanaryRevision)
	}
	if now := r.PodNames(); strings.Join(now, " ") != strings.Join(pods, " ") {
		r.T.Fatalf("pods changed:\n before %v\n after  %v", pods, now)
	}
}

// ApproveAndComplete approves step 1, waits for step 2's gate, approves it
// and waits until web:2 runs on every pod and the Rollout is Healthy.
func (r *Release) ApproveAndComplete() {
	r.T.Helper()
	r.approve(1)
	r.AtGate(2, ReleasePods/2)
	r.approve(2)
	r.Until(2*time.Minute, "web:2 on every pod and the Rollout Healthy", func() (bool, string) {
		ro, d := r.Rollout(), r.Deployment()
		n := r.ready("web:2")
		return ro.Status.Phase == v1alpha1.PhaseHealthy && n == ReleasePods && !d.Spec.Paused,
			fmt.Sprintf("phase %s step %d, %d ready on web:2, paused %t", ro.Status.Phase, ro.Status.CurrentStepIndex, n, d.Spec.Paused)
	})
}

// Until waits until cond holds (see rig.Eventually) and fails the test
// with its last word after timeout.
func (r *Release) Until(timeout time.Duration, what string, cond func() (bool, string)) {
	r.T.Helper()
	rig.Until(r.T, context.Background(), timeout, what, cond)
}

// Rollout reads the Rollout.
func (r *Release) Rollout() *v1alpha1.Rollout {
	r.T.Helper()
	ro := &v1alpha1.Rollout{}
	if err := r.C.Get(context.Background(), client.ObjectKey{Namespace: r.Namespace, Name: "web"}, ro); err != nil {
		r.T.Fatal(err)
	}
	return ro
}

// Deployment reads the Deployment.
func (r *Release) Deployment() *appsv1.Deployment {
	r.T.Helper()
	d := &appsv1.Deployment{}
	if err := r.C.Get(context.Background(), client.ObjectKey{Namespace: r.Namespace, Name: "web"}, d); err != nil {
		r.T.Fatal(err)
	}
	return d
}

// PodNames are the pods not being deleted, as name=image, sorted.
func (r *Release) PodNames() []string {
	var names []string
	for _, p := range r.pods() {
		if p.DeletionTimestamp == nil {
			names = append(names, p.Name+"="+p.Spec.Containers[0].Image)
		}
	}
	sort.Strings(names)
	return names
}

func (r *Release) pods() []corev1.Pod {
	r.T.Helper()
	var list corev1.PodList
	if err := r.C.List(context.Background(), &list, client.InNamespace(r.Namespace), client.MatchingLabels{"app": "web"}); err != nil {
		r.T.Fatal(err)
	}
	return list.Items
}

// ready counts the ready pods running image; -1 while a pod is being
// deleted.
func (r *Release) ready(image string) int {
	n := 0
	for _, p := range r.pods() {
		if p.DeletionTimestamp != nil {
			return -1
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && p.Spec.Containers[0].Image == image {
				n++
			}
		}
	}
	return n
}

func (r *Release) approve(step int32) {
	r.T.Helper()
	cmd := exec.Command(repo.Tool(r.T, "rollgate"), "approve", r.Namespace+"/web", "--kubeconfig", r.Kubeconfig, "--by", "chartrun-release")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), fmt.Sprintf("approved step %d ", step)) {
		r.T.Fatalf("rollgate approve (step %d): %v\n%s", step, err, out)
	}
}

func (r *Release) apply(yaml string) {
	r.T.Helper()
	cmd := exec.Command(repo.Tool(r.T, "kubectl"), "--kubeconfig", r.Kubeconfig, "apply", "--server-side", "--field-manager", "kustomize-controller", "-f", "-")
	cmd.Stdin = strings.NewReader(yaml)
	if out, err := cmd.CombinedOutput(); err != nil {
		r.T.Fatalf("kubectl apply: %v\n%s", err, out)
	}
}

func (r *Release) deploymentYAML(image string) string {
	return WebDeployment(r.Namespace, image, ReleasePods)
}

// WebRollout is the Rollout of Deployment web in namespace ns: one pod
// behind a manual gate, half the pods behind another, then every pod; no
// traffic routing.
func WebRollout(ns string) string {
	return rig.Rollout{Name: "web", Namespace: ns, WithoutTraffic: true, Steps: []string{
		"{replicas: 1, pause: {}}",
		`{replicas: "50%", pause: {}}`,
		`{replicas: "100%"}`,
	}}.YAML()
}

// WebDeployment is Deployment web in namespace ns as Git declares it:
// replicas pods of image, labelled app: web, that tolerate every taint,
// replaced one more at a time and none less.
func WebDeployment(ns, image string, replicas int) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: %s}
spec:
  replicas: %d
  strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 1, maxUnavailable: 0}}
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      tolerations: [{operator: Exists}]
      containers:
      - name: web
        image: %s
`, ns, replicas, image)
}

// WaitWebhooks waits until both webhook configurations named name carry
// ctrl's URL and one CA bundle in every webhook (want, when not nil), and
// returns that bundle.
func WaitWebhooks(t testing.TB, c client.Client, name string, ctrl *Controller, want []byte) []byte {
	t.Helper()
	var ca []byte
	rig.Until(t, context.Background(), 90*time.Second, fmt.Sprintf("the webhooks %s registered at %s with one CA bundle", name, ctrl.WebhookURL()), func() (bool, string) {
		var urls []string
		var last string
		ca, urls, last = Webhooks(c, name)
		ok := ca != nil && (want == nil || bytes.Equal(ca, want))
		for _, u := range urls {
			ok = ok && strings.HasPrefix(u, ctrl.WebhookURL()+"/")
		}
		return ok, last
	})
	return ca
}

// Webhooks reads both webhook configurations named name: the CA bundle
// every webhook carries (nil when they differ, one is empty or there are
// none), their URLs, and what it found, for messages.
func Webhooks(c client.Client, name string) (bundle []byte, urls []string, found string) {
	ctx := context.Background()
	var m admissionregistrationv1.MutatingWebhookConfiguration
	var v admissionregistrationv1.ValidatingWebhookConfiguration
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &m); err != nil {
		return nil, nil, err.Error()
	}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &v); err != nil {
		return nil, nil, err.Error()
	}
	var configs []admissionregistrationv1.WebhookClientConfig
	for _, h := range m.Webhooks {
		configs = append(configs, h.ClientConfig)
	}
	for _, h := range v.Webhooks {
		configs = append(configs, h.ClientConfig)
	}
	found = fmt.Sprintf("%d mutating, %d validating webhooks", len(m.Webhooks), len(v.Webhooks))
	if len(m.Webhooks) == 0 || len(v.Webhooks) == 0 {
		return nil, nil, found
	}
	bundle = configs[0].CABundle
	for _, cc := range configs {
		if cc.URL != nil {
			urls = append(urls, *cc.URL)
		} else {
			urls = append(urls, "(service)")
		}
		if len(cc.CABundle) == 0 || !bytes.Equal(cc.CABundle, bundle) {
			bundle = nil
		}
	}
	return bundle, urls, fmt.Sprintf("%s, CA bundle %d bytes, URLs %v", found, len(bundle), urls)
}
