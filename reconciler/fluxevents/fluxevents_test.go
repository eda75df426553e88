package fluxevents

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	eventv1beta1 "github.com/fluxcd/pkg/apis/event/v1beta1"
	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// k8sEvent is an event the Kubernetes recorder got.
type k8sEvent struct {
	object      runtime.Object
	annotations map[string]string
	typ, reason string
	message     string
}

// k8sEvents records what the Kubernetes recorder is asked to record.
type k8sEvents struct{ got []k8sEvent }

func (k *k8sEvents) Event(o runtime.Object, typ, reason, msg string) {
	k.AnnotatedEventf(o, nil, typ, reason, "%s", msg)
}

func (k *k8sEvents) Eventf(o runtime.Object, typ, reason, format string, args ...any) {
	k.AnnotatedEventf(o, nil, typ, reason, format, args...)
}

func (k *k8sEvents) AnnotatedEventf(o runtime.Object, a map[string]string, typ, reason, format string, args ...any) {
	k.got = append(k.got, k8sEvent{object: o, annotations: a, typ: typ, reason: reason, message: fmt.Sprintf(format, args...)})
}

// eventReceiver stands for notification-controller's event receiver.
type eventReceiver struct {
	*httptest.Server
	mu  sync.Mutex
	got []eventv1beta1.Event
}

func newEventReceiver(t *testing.T) *eventReceiver {
	r := &eventReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var e eventv1beta1.Event
		if err := json.NewDecoder(req.Body).Decode(&e); err != nil {
			t.Errorf("the posted event does not decode: %v", err)
		}
		r.mu.Lock()
		r.got = append(r.got, e)
		r.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *eventReceiver) events() []eventv1beta1.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]eventv1beta1.Event(nil), r.got...)
}

// wait returns the events received once n have arrived (posting is
// asynchronous), or what arrived within 10 s.
func (r *eventReceiver) wait(n int) []eventv1beta1.Event {
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := r.events()
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func eventRollout(labels, annotations map[string]string) *v1alpha1.Rollout {
	return &v1alpha1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Labels: labels, Annotations: annotations},
		Status:     v1alpha1.RolloutStatus{StableRevision: "6b9f", CanaryRevision: "7c4d", CurrentStepIndex: 2},
	}
}

var appliedByFlux = map[string]string{
	"app": "web", "kustomize.toolkit.fluxcd.io/name": "apps", "kustomize.toolkit.fluxcd.io/namespace": "flux-system",
}

// union is a map of a's entries and b's.
func union(a, b map[string]string) map[string]string {
	m := maps.Clone(a)
	maps.Copy(m, b)
	return m
}

// TestFluxEventsForward: the Kubernetes Event is always about the object
// it was recorded for; the copy posted to notification-controller is about
// the Kustomization that applied the Rollout, or the Rollout itself when no
// Kustomization did, with metadata under the involved object's group.
func TestFluxEventsForward(t *testing.T) {
	ksRef := corev1.ObjectReference{Kind: "Kustomization", APIVersion: "kustomize.toolkit.fluxcd.io/v1", Namespace: "flux-system", Name: "apps"}
	roRef := corev1.ObjectReference{Kind: "Rollout", APIVersion: "rollgate.dev/v1alpha1", Namespace: "shop", Name: "web"}
	// The metadata of the event of step 2 of revision 7c4d, under the
	// Kustomization's group or the Rollout's.
	ksMeta := map[string]string{
		"kustomize.toolkit.fluxcd.io/rollout": "shop/web", "kustomize.toolkit.fluxcd.io/canaryRevision": "7c4d",
		"kustomize.toolkit.fluxcd.io/step": "2", "kustomize.toolkit.fluxcd.io/token": "shop/web",
	}
	roMeta := map[string]string{
		"rollgate.dev/rollout": "shop/web", "rollgate.dev/canaryRevision": "7c4d", "rollgate.dev/step": "2", "rollgate.dev/token": "shop/web",
	}
	for _, tc := range []struct {
		name        string
		object      runtime.Object
		annotations map[string]string
		typ         string
		wantRef     corev1.ObjectReference
		wantMeta    map[string]string
		severity    string
	}{{
		name:     "a Rollout applied by a Kustomization is forwarded as the Kustomization",
		object:   eventRollout(appliedByFlux, nil),
		typ:      corev1.EventTypeNormal,
		wantRef:  ksRef,
		wantMeta: ksMeta,
		severity: eventv1beta1.EventSeverityInfo,
	}, {
		name:     "a warning is forwarded with severity error",
		object:   eventRollout(appliedByFlux, nil),
		typ:      corev1.EventTypeWarning,
		wantRef:  ksRef,
		wantMeta: ksMeta,
		severity: eventv1beta1.EventSeverityError,
	}, {
		name:     "a Rollout without the Kustomization labels is forwarded as itself",
		object:   eventRollout(map[string]string{"app": "web"}, nil),
		typ:      corev1.EventTypeNormal,
		wantRef:  roRef,
		wantMeta: roMeta,
		severity: eventv1beta1.EventSeverityInfo,
	}, {
		name:     "a Rollout with the name label alone is forwarded as itself",
		object:   eventRollout(map[string]string{"kustomize.toolkit.fluxcd.io/name": "apps"}, nil),
		typ:      corev1.EventTypeNormal,
		wantRef:  roRef,
		wantMeta: roMeta,
		severity: eventv1beta1.EventSeverityInfo,
	}, {
		name: "rollgate.dev/ metadata moves to the Kustomization's group; the Rollout's event.toolkit.fluxcd.io/ annotations follow",
		object: eventRollout(appliedByFlux, map[string]string{
			"event.toolkit.fluxcd.io/team": "payments", "rollgate.dev/ignored": "x",
		}),
		annotations: map[string]string{"rollgate.dev/gate": "approval", "event.toolkit.fluxcd.io/ticket": "OPS-1"},
		typ:         corev1.EventTypeNormal,
		wantRef:     ksRef,
		wantMeta: union(ksMeta, map[string]string{
			"kustomize.toolkit.fluxcd.io/gate": "approval", "event.toolkit.fluxcd.io/ticket": "OPS-1",
			"event.toolkit.fluxcd.io/team": "payments",
		}),
		severity: eventv1beta1.EventSeverityInfo,
	}, {
		name: "a Rollout out of a release has no step; a new one no revision",
		object: &v1alpha1.Rollout{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Labels: appliedByFlux},
		},
		typ:     corev1.EventTypeNormal,
		wantRef: ksRef,
		wantMeta: map[string]string{
			"kustomize.toolkit.fluxcd.io/rollout": "shop/web", "kustomize.toolkit.fluxcd.io/token": "shop/web",
		},
		severity: eventv1beta1.EventSeverityInfo,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			k8s, nc := &k8sEvents{}, newEventReceiver(t)
			rec := newTestFluxEvents(t, k8s, nc.URL)
			rec.AnnotatedEventf(tc.object, tc.annotations, tc.typ, "Progressing", "step %d of %d: %s", 2, 3, "5% of traffic")

			if len(k8s.got) != 1 || k8s.got[0].object != tc.object || k8s.got[0].typ != tc.typ ||
				k8s.got[0].reason != "Progressing" || k8s.got[0].message != "step 2 of 3: 5% of traffic" ||
				!maps.Equal(k8s.got[0].annotations, tc.annotations) {
				t.Fatalf("the Kubernetes Event must be the one recorded, on the Rollout; got %+v", k8s.got)
			}
			posted := nc.wait(1)
			if len(posted) != 1 {
				t.Fatalf("notification-controller got %d events, want 1", len(posted))
			}
			e := posted[0]
			if diff := cmp.Diff(tc.wantRef, e.InvolvedObject); diff != "" {
				t.Errorf("involved object (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantMeta, e.Metadata); diff != "" {
				t.Errorf("metadata (-want +got):\n%s", diff)
			}
			if e.Reason != "Progressing" || e.Message != "step 2 of 3: 5% of traffic" || e.Severity != tc.severity || e.ReportingController != "rollgate" {
				t.Errorf("reason %q, message %q, severity %q, reporting controller %q; want Progressing, the message, %s, rollgate",
					e.Reason, e.Message, e.Severity, e.ReportingController, tc.severity)
			}
			// notification-controller drops the metadata keys outside the
			// involved object's group and event.toolkit.fluxcd.io.
			group := e.InvolvedObject.GroupVersionKind().Group + "/"
			for k := range e.Metadata {
				if !strings.HasPrefix(k, group) && !strings.HasPrefix(k, eventv1beta1.Group+"/") {
					t.Errorf("metadata key %q would be dropped by notification-controller", k)
				}
			}
		})
	}
}

// TestFluxEventsWithoutAddress: with no notification-controller address
// only the Kubernetes Event is recorded, Event and Eventf included.
func TestFluxEventsWithoutAddress(t *testing.T) {
	k8s := &k8sEvents{}
	rec := newTestFluxEvents(t, k8s, "")
	ro := eventRollout(appliedByFlux, nil)
	rec.Event(ro, corev1.EventTypeNormal, "Succeeded", "release complete")
	rec.Eventf(ro, corev1.EventTypeWarning, "RolledBack", "rolled back to %s", "6b9f")
	want := []string{"Normal Succeeded release complete", "Warning RolledBack rolled back to 6b9f"}
	var got []string
	for _, e := range k8s.got {
		if e.object != ro {
			t.Errorf("event %q is not about the Rollout", e.message)
		}
		got = append(got, e.typ+" "+e.reason+" "+e.message)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("Kubernetes Events (-want +got):\n%s", diff)
	}
	if rec.flux != nil {
		t.Fatal("a recorder without an address must post nothing")
	}
}

// TestFluxEventsBadAddress: an address that is no URL is an error.
func TestFluxEventsBadAddress(t *testing.T) {
	_, err := New(Options{Kubernetes: &k8sEvents{}, Scheme: runtime.NewScheme(), Address: "http://[::1", Controller: "rollgate"})
	if err == nil {
		t.Fatal("want an error for an address that is no URL")
	}
}

func newTestFluxEvents(t *testing.T, k8s *k8sEvents, addr string) *Recorder {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	rec, err := New(Options{Kubernetes: k8s, Scheme: scheme, Address: addr, Controller: "rollgate", Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestFluxEventsZeroLogger: a recorder given no logger still posts (the
// Flux recorder needs a logger sink).
func TestFluxEventsZeroLogger(t *testing.T) {
	nc := newEventReceiver(t)
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	rec, err := New(Options{Kubernetes: &k8sEvents{}, Scheme: scheme, Address: nc.URL, Controller: "rollgate"})
	if err != nil {
		t.Fatal(err)
	}
	rec.Event(eventRollout(appliedByFlux, nil), corev1.EventTypeNormal, "Succeeded", "release complete")
	if n := len(nc.wait(1)); n != 1 {
		t.Fatalf("notification-controller got %d events, want 1", n)
	}
}

// TestFluxEventsNeverWaitForNotificationController: while the receiver
// hangs, recording events returns at once (the Kubernetes Events are
// recorded) and the copies are posted, in order, once it answers.
func TestFluxEventsNeverWaitForNotificationController(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var reasons []string
	nc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		<-release
		var e eventv1beta1.Event
		_ = json.NewDecoder(req.Body).Decode(&e)
		mu.Lock()
		reasons = append(reasons, e.Reason)
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	defer nc.Close()
	k8s := &k8sEvents{}
	rec := newTestFluxEvents(t, k8s, nc.URL)

	recorded := make(chan struct{})
	go func() {
		for _, reason := range []string{"Progressing", "WaitingForApproval", "Succeeded"} {
			rec.Event(eventRollout(appliedByFlux, nil), corev1.EventTypeNormal, reason, reason)
		}
		close(recorded)
	}()
	select {
	case <-recorded:
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("recording events waited for notification-controller")
	}
	if len(k8s.got) != 3 {
		t.Fatalf("Kubernetes Events recorded: %d, want 3", len(k8s.got))
	}
	close(release)
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		got := append([]string(nil), reasons...)
		mu.Unlock()
		if len(got) == 3 {
			if got[0] != "Progressing" || got[1] != "WaitingForApproval" || got[2] != "Succeeded" {
				t.Fatalf("posted out of order: %v", got)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("posted %v, want the three events", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
