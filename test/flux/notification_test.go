package flux

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	eventv1beta1 "github.com/fluxcd/pkg/apis/event/v1beta1"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// TestNotificationDispatches: notification-controller starts, and an event
// posted to its receiver about a Kustomization reaches the generic
// Provider of the Alert selecting that Kustomization, with the metadata
// keys under the Kustomization's group stripped of it, the internal token
// removed and keys of other groups dropped. When it dies, Exited names it.
func TestNotificationDispatches(t *testing.T) {
	cluster, ctx := clusterWithCRDs(t)
	c := cluster.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "flux-system"}}); err != nil {
		t.Fatal(err)
	}

	received := make(chan eventv1beta1.Event, 10)
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var e eventv1beta1.Event
		if err := json.NewDecoder(r.Body).Decode(&e); err != nil {
			t.Errorf("the provider got a body that is no event: %v", err)
		}
		received <- e
	}))
	defer provider.Close()
	for _, doc := range strings.Split(`apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {name: webhook, namespace: flux-system}
spec: {type: generic, address: "`+provider.URL+`/"}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {name: apps, namespace: flux-system}
spec:
  providerRef: {name: webhook}
  eventSeverity: info
  eventSources: [{kind: Kustomization, name: apps}]`, "---") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatal(err)
		}
		if err := c.Create(ctx, u); err != nil {
			t.Fatalf("create %s: %v", u.GetKind(), err)
		}
	}

	n, err := StartNotification(ctx, Options{Kubeconfig: cluster.Kubeconfig, Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("StartNotification: %v", err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = n.Stop()
		}
	}()
	if !strings.HasPrefix(n.EventsURL, "http://127.0.0.1:") || !strings.HasSuffix(n.EventsURL, "/") {
		t.Fatalf("EventsURL %q, want http://127.0.0.1:<port>/", n.EventsURL)
	}

	sent := eventv1beta1.Event{
		InvolvedObject: corev1.ObjectReference{Kind: "Kustomization", APIVersion: "kustomize.toolkit.fluxcd.io/v1", Namespace: "flux-system", Name: "apps"},
		Severity:       eventv1beta1.EventSeverityInfo,
		Timestamp:      metav1.Now(),
		Message:        "step 1 of 2 waits for approval",
		Reason:         "WaitingForApproval",
		Metadata: map[string]string{
			"kustomize.toolkit.fluxcd.io/rollout": "shop/web",
			"kustomize.toolkit.fluxcd.io/token":   "shop/web",
			"event.toolkit.fluxcd.io/team":        "payments",
			"rollgate.dev/rollout":                "dropped",
		},
		ReportingController: "rollgate",
		ReportingInstance:   "test",
	}
	// The Alert reaches the controller's cache shortly after it starts:
	// post until the provider answers, each time with another token (an
	// event repeated within the rate-limit interval is refused with 429).
	var got eventv1beta1.Event
	deadline := time.After(30 * time.Second)
post:
	for i := 0; ; i++ {
		sent.Metadata["kustomize.toolkit.fluxcd.io/token"] = fmt.Sprintf("shop/web/%d", i)
		body, err := json.Marshal(sent)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Post(n.EventsURL, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatalf("post to %s: %v", n.EventsURL, err)
		}
		resp.Body.Close()
		select {
		case got = <-received:
			break post
		case <-time.After(time.Second):
		case <-deadline:
			t.Fatalf("the provider got nothing within 30s (last answer %s)", resp.Status)
		}
	}
	if got.InvolvedObject != sent.InvolvedObject || got.Reason != sent.Reason || got.Message != sent.Message {
		t.Errorf("dispatched %+v, want the event posted", got)
	}
	want := map[string]string{"rollout": "shop/web", "team": "payments"}
	if diff := cmp.Diff(want, got.Metadata); diff != "" {
		t.Errorf("metadata the provider got (-want +got):\n%s", diff)
	}

	// When notification-controller dies, Exited names it with its log.
	if err := syscall.Kill(n.procs[0].Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-n.procs[0].Done()
	if err := n.Exited(); err == nil || !strings.Contains(err.Error(), NotificationController+" exited unexpectedly") {
		t.Fatalf("Exited after notification-controller died: %v", err)
	}
	stopped = true
	if err := n.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := n.Exited(); err != nil {
		t.Fatalf("Exited after Stop: %v", err)
	}
}
