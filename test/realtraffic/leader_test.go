package realtraffic

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// leaseName is the controller's leader election Lease (the chart's default,
// without shards).
const leaseName = "rollgate.dev"

// webhookCall is one write sent through the API server while the leader
// changes: it needs an answer from rollgate's admission webhooks, which
// fail closed.
type webhookCall struct {
	at  time.Time
	err error
	// leader is the holder of the Lease when the call returned.
	leader string
}

// leaderChange is what changeLeader saw.
type leaderChange struct {
	old, new string // pod names
	deleted  time.Time
	led      time.Time // when the Lease named another pod
	calls    []webhookCall
	// servedBeforeLeading is how many webhook requests the replica that
	// did not lead answered after the delete and before another pod led,
	// read from its own metrics (reported, not asserted: the API server
	// keeps its connection to the old pod while it drains).
	servedBeforeLeading float64
}

// changeLeader deletes the controller pod that holds the Lease while writes
// that need rollgate's webhooks go through the API server every 100 ms (a
// server-side dry run of an AnalysisTemplate, checked by the validating
// webhook, and of the application's Deployment at a new image, held by the
// workload webhook), and waits until another replica leads and 5 s more.
// It fails the story if the chart did not run two replicas, if the replica
// that does not lead does not hold a new image when asked directly, or if
// any write was refused.
//
// The API server keeps its connection to the webhook Service open, so
// every call may reach one pod: the replica that does not lead is asked
// directly (an AdmissionReview to its pod). After the delete the calls go
// on through the API server while the old pod drains
// (webhook.drainSeconds) and another takes the Lease.
func (w *world) changeLeader(ctx context.Context) leaderChange {
	w.T.Helper()
	pods := w.readyControllerPods(ctx)
	if len(pods) < 2 {
		w.T.Fatalf("the chart's default runs 2 controller replicas; %d ready: %v", len(pods), podNames(pods))
	}
	var ch leaderChange
	ch.old = w.leader(ctx)
	var oldPod, other *corev1.Pod
	for i := range pods {
		if pods[i].Name == ch.old {
			oldPod = &pods[i]
		} else if other == nil {
			other = &pods[i]
		}
	}
	if oldPod == nil || other == nil {
		w.T.Fatalf("the Lease names %q; ready controller pods: %v", ch.old, podNames(pods))
	}
	if held := w.admitDirect(ctx, *other, "localhost/verserver:v4"); !held {
		w.T.Fatalf("replica %s, not the leader, let a new image through unheld", other.Name)
	}
	w.T.Logf("replica %s, not the leader, holds a new image when asked directly", other.Name)

	var mu sync.Mutex
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			var err error
			if i%2 == 0 {
				err = w.C.Create(ctx, webhookProbe(w.NS), client.DryRunAll)
			} else {
				err = w.dryRunApply(ctx, workload("localhost/verserver:v4"))
			}
			c := webhookCall{at: time.Now(), err: err, leader: w.leader(ctx)}
			mu.Lock()
			ch.calls = append(ch.calls, c)
			mu.Unlock()
		}
	}()
	stopCalls := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-done
	}
	defer stopCalls()

	before := w.webhookRequests(ctx, *other)
	if err := w.C.Delete(ctx, oldPod); err != nil {
		w.T.Fatal(err)
	}
	ch.deleted = time.Now()
	w.Until(ctx, 2*time.Minute, "another replica holds the Lease", func() (bool, string) {
		// The counter is read before the Lease: a count read while the
		// Lease did not name the replica was served while it did not lead.
		served := w.webhookRequests(ctx, *other) - before
		l := w.leader(ctx)
		if l == "" || l == ch.old {
			ch.servedBeforeLeading = served
		}
		return l != "" && l != ch.old, "leader " + strconv.Quote(l)
	})
	ch.led = time.Now()
	ch.new = w.leader(ctx)
	time.Sleep(5 * time.Second)
	stopCalls()

	var failed []string
	inGap := 0
	for _, c := range ch.calls {
		if c.at.After(ch.deleted) && c.at.Before(ch.led) {
			inGap++
		}
		if c.err != nil {
			failed = append(failed, fmt.Sprintf("+%.2fs after the delete (leader %q): %v", c.at.Sub(ch.deleted).Seconds(), c.leader, c.err))
		}
	}
	w.T.Logf("leader %s -> %s %s after the delete; %d writes through the webhooks, %d of them before the new leader; %s answered %.0f webhook requests after the delete and before a new leader",
		ch.old, ch.new, ch.led.Sub(ch.deleted).Round(time.Millisecond), len(ch.calls), inGap, other.Name, ch.servedBeforeLeading)
	if len(failed) > 0 {
		w.T.Errorf("%d of %d writes needing the webhooks were refused during the leader change:\n  %s", len(failed), len(ch.calls), strings.Join(failed, "\n  "))
	}
	return ch
}

// admitDirect sends the workload webhook of pod an AdmissionReview of the
// application's Deployment updated to image, over TLS checked against the
// CA in the webhook configuration, and says whether the answer holds it
// (allowed, with a patch).
func (w *world) admitDirect(ctx context.Context, pod corev1.Pod, image string) bool {
	w.T.Helper()
	var dep appsv1.Deployment
	if err := w.C.Get(ctx, types.NamespacedName{Namespace: w.NS, Name: "echoserver"}, &dep); err != nil {
		w.T.Fatal(err)
	}
	dep.APIVersion, dep.Kind = "apps/v1", "Deployment"
	oldRaw, _ := json.Marshal(&dep)
	changed := dep.DeepCopy()
	changed.Spec.Template.Spec.Containers[0].Image = image
	newRaw, _ := json.Marshal(changed)
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       types.UID(fmt.Sprintf("realtraffic-%d", time.Now().UnixNano())),
			Kind:      metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
			Resource:  metav1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"},
			Name:      dep.Name,
			Namespace: dep.Namespace,
			Operation: admissionv1.Update,
			UserInfo:  authenticationv1.UserInfo{Username: "system:serviceaccount:flux-system:kustomize-controller"},
			Object:    runtime.RawExtension{Raw: newRaw},
			OldObject: runtime.RawExtension{Raw: oldRaw},
			Options:   runtime.RawExtension{Raw: []byte(`{"apiVersion":"meta.k8s.io/v1","kind":"UpdateOptions","fieldManager":"` + fluxManager + `"}`)},
		},
	}
	body, _ := json.Marshal(review)
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := w.C.Get(ctx, types.NamespacedName{Name: release}, &mwc); err != nil || len(mwc.Webhooks) == 0 {
		w.T.Fatalf("webhook configuration %s: %v", release, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(mwc.Webhooks[0].ClientConfig.CABundle) {
		w.T.Fatal("the webhook configuration's CA bundle holds no certificate")
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: pool, ServerName: fmt.Sprintf("%s-webhook.%s.svc", release, releaseNS),
	}}}
	url := fmt.Sprintf("https://%s:9443/mutate-apps-v1-workloads", pod.Status.PodIP)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		w.T.Fatalf("AdmissionReview to %s: %v", pod.Name, err)
	}
	defer resp.Body.Close()
	var answer admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil || answer.Response == nil {
		w.T.Fatalf("AdmissionReview answer of %s (%s): %v", pod.Name, resp.Status, err)
	}
	w.T.Logf("%s answered the AdmissionReview: allowed %v, %d bytes of patch, warnings %q", pod.Name, answer.Response.Allowed, len(answer.Response.Patch), answer.Response.Warnings)
	return answer.Response.Allowed && len(answer.Response.Patch) > 0
}

// readyControllerPods are the controller's pods that are Ready and not
// being deleted.
func (w *world) readyControllerPods(ctx context.Context) []corev1.Pod {
	var ready []corev1.Pod
	for _, p := range w.controllerPods(ctx) {
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				ready = append(ready, p)
			}
		}
	}
	return ready
}

// leader is the pod named by the leader Lease ("" when none leads).
func (w *world) leader(ctx context.Context) string {
	var l coordinationv1.Lease
	if err := w.C.Get(ctx, types.NamespacedName{Namespace: releaseNS, Name: leaseName}, &l); err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	// controller-runtime's identity is the host name, an underscore and a
	// UUID; the host name is the pod's name.
	name, _, _ := strings.Cut(*l.Spec.HolderIdentity, "_")
	return name
}

// webhookRequests is the number of admission requests the pod's webhook
// server answered, from its metrics endpoint (controller-runtime's
// controller_runtime_webhook_requests_total, every webhook and code).
func (w *world) webhookRequests(ctx context.Context, p corev1.Pod) float64 {
	w.T.Helper()
	url := fmt.Sprintf("http://%s:8080/metrics", p.Status.PodIP)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.T.Fatalf("metrics of %s: %v", p.Name, err)
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "controller_runtime_webhook_requests_total{") {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			w.T.Fatalf("metrics of %s: %q: %v", p.Name, line, err)
		}
		sum += v
	}
	return sum
}

// webhookProbe is an AnalysisTemplate in ns, checked by rollgate's
// validating webhook.
func webhookProbe(ns string) *unstructured.Unstructured {
	probe := &unstructured.Unstructured{}
	probe.SetAPIVersion(v1alpha1.GroupVersion.String())
	probe.SetKind("AnalysisTemplate")
	probe.SetNamespace(ns)
	probe.SetName("webhook-probe")
	_ = unstructured.SetNestedSlice(probe.Object, []any{map[string]any{
		"name": "probe", "successCondition": "result[0] == 0",
		"provider": map[string]any{"prometheus": map[string]any{"address": "http://127.0.0.1:9090", "query": "vector(0)"}},
	}}, "spec", "metrics")
	return probe
}

// dryRunApply applies docs as Flux would, as a server-side dry run: every
// admission webhook is called, nothing is stored.
func (w *world) dryRunApply(ctx context.Context, docs string) error {
	for _, u := range w.Decode(docs) {
		if err := w.C.Patch(ctx, u, client.Apply, client.FieldOwner(fluxManager), client.ForceOwnership, client.DryRunAll); err != nil {
			return fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	return nil
}

func podNames(pods []corev1.Pod) []string {
	var names []string
	for _, p := range pods {
		names = append(names, p.Name)
	}
	return names
}

// pushToFollower delivers a forge's push call for the story's Repository to
// the push endpoint of the controller replica that does not lead (on its
// pod IP, the chart's git.webhookPort 9292), and returns when it did. The
// replica must answer 202: it forwarded the call to the leader, which
// accepted it.
func (w *world) pushToFollower(ctx context.Context) time.Time {
	w.T.Helper()
	leader := w.leader(ctx)
	for _, p := range w.readyControllerPods(ctx) {
		if p.Name == leader {
			continue
		}
		url := fmt.Sprintf("http://%s:9292/hook/%s/app-repo", p.Status.PodIP, w.NS)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"ref":"refs/heads/main"}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			w.T.Fatalf("push to %s: %v", p.Name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			w.T.Fatalf("push to %s, which does not lead (%s does): %s, want 202 Accepted (forwarded to the leader)\ncontroller log:\n%s", p.Name, leader, resp.Status, w.controllerLog(20))
		}
		w.T.Logf("push delivered to %s, which does not lead (%s does): %s", p.Name, leader, resp.Status)
		return time.Now()
	}
	w.T.Fatalf("no ready controller replica besides the leader %s", leader)
	return time.Time{}
}
