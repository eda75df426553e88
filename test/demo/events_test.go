package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	eventv1beta1 "github.com/fluxcd/pkg/apis/event/v1beta1"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// TestReleaseEventsReachFluxAlert: a platform team forwards rollgate's
// events to Flux's notification-controller and has an Alert on the
// application's Kustomization, sent to a generic webhook Provider. A
// developer bumps the image in Git; Flux applies it; rollgate starts the
// release and stops at the approval gate. The webhook gets, through the
// real notification-controller, rollgate's events of the release as events
// of the Kustomization, with the Rollout, its revision and its step in the
// metadata; and the Rollout keeps its own Kubernetes Events.
func TestReleaseEventsReachFluxAlert(t *testing.T) {
	t.Parallel()
	s := givenAppWithFluxAlert(t)

	ro := s.releaseToGate()
	gate := s.webhookGotGateEvent(ro)
	s.rolloutKeepsItsEvents(gate)

	t.Logf("timings:\n  %s", strings.Join(s.timings, "\n  "))
}

// alertStory is the demo's world with notification-controller, an Alert
// and the webhook it notifies.
type alertStory struct {
	*world
	t       *testing.T
	ctx     context.Context
	webhook *webhook
	timings []string
}

// webhook is the generic Provider's address: it keeps every event
// notification-controller posts, with the time it came.
type webhook struct {
	*httptest.Server
	mu   sync.Mutex
	got  []received
	errs []error
}

type received struct {
	at    time.Time
	body  []byte
	event eventv1beta1.Event
}

func newWebhook(t *testing.T) *webhook {
	h := &webhook{}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var e eventv1beta1.Event
		if err == nil {
			err = json.Unmarshal(body, &e)
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if err != nil {
			h.errs = append(h.errs, fmt.Errorf("a post that is no event (%w): %s", err, body))
			return
		}
		h.got = append(h.got, received{at: time.Now(), body: body, event: e})
	}))
	t.Cleanup(h.Close)
	return h
}

// find returns the first event with reason, and every post's problem.
func (h *webhook) find(reason string) (*received, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range h.got {
		if h.got[i].event.Reason == reason {
			r := h.got[i]
			return &r, nil
		}
	}
	if len(h.errs) > 0 {
		return nil, h.errs[0]
	}
	return nil, nil
}

// all returns the events received, in order.
func (h *webhook) all() []eventv1beta1.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []eventv1beta1.Event
	for _, r := range h.got {
		out = append(out, r.event)
	}
	return out
}

// reasons lists the reasons of the events received, in order.
func (h *webhook) reasons() []string {
	var out []string
	for _, e := range h.all() {
		out = append(out, e.Reason)
	}
	return out
}

func (s *alertStory) timing(format string, args ...any) {
	s.timings = append(s.timings, fmt.Sprintf(format, args...))
	s.t.Logf("timing: "+format, args...)
}

func (s *alertStory) must(err error) {
	s.t.Helper()
	if err != nil {
		s.t.Fatal(err)
	}
}

// alertYAML is the platform team's Provider and Alert: every event of the
// application's Kustomization, info and error, posted to address.
func alertYAML(address string) string {
	return fmt.Sprintf(`apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata:
  name: releases-webhook
  namespace: %[1]s
spec:
  type: generic
  address: %[2]s
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata:
  name: %[3]s-releases
  namespace: %[1]s
spec:
  providerRef:
    name: releases-webhook
  eventSeverity: info
  eventSources:
  - kind: Kustomization
    name: %[3]s
`, FluxNamespace, address, App)
}

// givenAppWithFluxAlert starts the demo's platform with
// notification-controller, rollgate forwarding its events to it, and the
// demo application at version 1; then creates the Provider and the Alert.
func givenAppWithFluxAlert(t *testing.T) *alertStory {
	s := &alertStory{t: t, webhook: newWebhook(t)}
	s.world, s.ctx = newTestWorld(t, nil, 6*time.Minute)
	ctx := s.ctx
	var err error
	s.withNotification = true
	s.must(s.setup(ctx))
	_, err = s.applyYAML(ctx, alertYAML(s.webhook.URL+"/"))
	s.must(err)
	s.p.step("platform: Alert %s/%s-releases sends the events of Kustomization %s to the webhook %s", FluxNamespace, App, App, s.webhook.URL)
	return s
}

// releaseToGate commits v2 and waits until the release waits for approval
// at step 1; it returns the Rollout then.
func (s *alertStory) releaseToGate() *v1alpha1.Rollout {
	s.p.section(fmt.Sprintf("the release %s -> %s, up to its approval gate", OldImage, NewImage))
	commit, err := s.git.Commit(RepoName, Branch, "echoserver: release 2.0", map[string]string{deploymentFile: deploymentYAML(NewImage)})
	s.must(err)
	pushed := time.Now()
	s.p.step("developer: pushed %s to %s: %s image %s -> %s", short(commit), Branch, deploymentFile, OldImage, NewImage)
	s.header()
	o, err := s.watchUntil(s.ctx, 3*time.Minute, "step 1 to wait for approval", func(_ context.Context, o *observation) (bool, error) {
		return o.ro != nil && o.ro.Status.AwaitingApproval != nil && o.ro.Status.AwaitingApproval.Branch != "", nil
	})
	s.must(err)
	s.timing("pushed -> the release waits for approval at step 1: %.1fs", time.Since(pushed).Seconds())
	return o.ro
}

// webhookGotGateEvent waits for the gate's event at the webhook and checks
// it: about the Kustomization, from rollgate, naming the Rollout, its
// canary revision and step. It returns the event.
func (s *alertStory) webhookGotGateEvent(ro *v1alpha1.Rollout) eventv1beta1.Event {
	t := s.t
	seen := time.Now() // the test just saw the gate in the Rollout's status
	var gate *received
	s.must(s.waitFor(s.ctx, 30*time.Second, "the webhook to get the "+v1alpha1.ReasonWaitingForApproval+" event", func(context.Context) (bool, error) {
		var err error
		gate, err = s.webhook.find(v1alpha1.ReasonWaitingForApproval)
		return gate != nil, err
	}))
	// rollgate posts the event before it writes the status; the Alert's
	// dispatch is asynchronous: either may come first.
	s.timing("the webhook got the gate's event %+.2fs from when the test saw the gate in the Rollout's status", gate.at.Sub(seen).Seconds())
	var pretty bytes.Buffer
	s.must(json.Indent(&pretty, gate.body, "", "  "))
	t.Logf("the webhook got, from notification-controller:\n%s", pretty.String())
	s.p.step("webhook: got %d event(s) of Kustomization %s/%s: %s", len(s.webhook.reasons()), FluxNamespace, App, strings.Join(s.webhook.reasons(), ", "))

	e := gate.event
	want := corev1.ObjectReference{Kind: "Kustomization", APIVersion: kustomizationGVK.GroupVersion().String(), Namespace: FluxNamespace, Name: App}
	if diff := cmp.Diff(want, e.InvolvedObject); diff != "" {
		t.Errorf("the gate's event is not about the Kustomization (-want +got):\n%s", diff)
	}
	if e.ReportingController != "rollgate" || e.Severity != eventv1beta1.EventSeverityInfo || e.Message == "" {
		t.Errorf("the gate's event: reporting controller %q, severity %q, message %q; want rollgate, info, a message",
			e.ReportingController, e.Severity, e.Message)
	}
	wantMeta := map[string]string{
		"rollout":        Namespace + "/" + App,
		"canaryRevision": ro.Status.CanaryRevision,
		"step":           "1",
	}
	if diff := cmp.Diff(wantMeta, e.Metadata); diff != "" {
		t.Errorf("the gate's event metadata (-want +got):\n%s", diff)
	}
	// The release's first step, before the gate, came the same way.
	step, err := s.webhook.find(v1alpha1.ReasonProgressing)
	s.must(err)
	if step == nil || step.event.InvolvedObject != want || step.event.Metadata["rollout"] != Namespace+"/"+App {
		t.Errorf("want the %s event of step 1 about the Kustomization, naming the Rollout; got %+v", v1alpha1.ReasonProgressing, step)
	}
	return e
}

// rolloutKeepsItsEvents checks that every event the webhook got, the
// gate's included, is a Kubernetes Event of the Rollout (same reason and
// message), and that rollgate recorded no Kubernetes Event on the
// Kustomization.
func (s *alertStory) rolloutKeepsItsEvents(gate eventv1beta1.Event) {
	t := s.t
	var onRollout []string
	var missing []string
	err := s.waitFor(s.ctx, 30*time.Second, "the Rollout's Events", func(ctx context.Context) (bool, error) {
		var list corev1.EventList
		if err := s.c.List(ctx, &list, client.InNamespace(Namespace)); err != nil {
			return false, err
		}
		onRollout = onRollout[:0]
		recorded := map[string]bool{}
		for _, e := range list.Items {
			if e.InvolvedObject.Kind != "Rollout" || e.InvolvedObject.Name != App || e.Source.Component != "rollgate" {
				continue
			}
			onRollout = append(onRollout, e.Reason+": "+e.Message)
			recorded[e.Reason+": "+e.Message] = true
		}
		missing = missing[:0]
		for _, r := range s.webhook.all() {
			if key := r.Reason + ": " + r.Message; !recorded[key] {
				missing = append(missing, key)
			}
		}
		return recorded[gate.Reason+": "+gate.Message] && len(missing) == 0, nil
	})
	if err != nil {
		t.Fatalf("%v; events the webhook got that are no Event of the Rollout: %q; the Rollout's Events: %q", err, missing, onRollout)
	}
	sort.Strings(onRollout)
	s.p.step("kubectl describe rollout %s: %d Event(s): %s", App, len(onRollout), strings.Join(onRollout, " | "))

	// rollgate's Events on the Rollout exist by now: a Kubernetes Event
	// on the Kustomization, had one been recorded, would be too.
	var list corev1.EventList
	s.must(s.c.List(s.ctx, &list, client.InNamespace(FluxNamespace)))
	for _, e := range list.Items {
		if e.Source.Component == "rollgate" || e.ReportingController == "rollgate" {
			t.Errorf("rollgate recorded a Kubernetes Event on %s %s: %s: %s; only the forwarded copy is about the Kustomization",
				e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}
}
