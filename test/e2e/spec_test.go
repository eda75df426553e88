package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/rig"
)

// specRollout is a Rollout of echoserver (echoApp) without Git whose first
// step analyses with the AnalysisTemplate "success-rate", given args (a
// flow-map fragment: ", args: [...]").
func specRollout(args string) string {
	return rig.Rollout{Name: "echoserver", Namespace: "demo", Steps: []string{
		`{traffic: "20%", replicas: 1, analysis: {templates: [success-rate]` + args + `}, pause: {}}`,
		`{traffic: "100%", replicas: "100%"}`,
	}}.YAML()
}

// successRate needs an argument "service" that has no default.
const successRate = `
apiVersion: rollgate.dev/v1alpha1
kind: AnalysisTemplate
metadata: {name: success-rate, namespace: demo}
spec:
  args: [{name: service}]
  metrics:
  - name: success
    interval: 1s
    count: 1
    successCondition: "result[0] >= 0"
    provider:
      prometheus: {address: "http://127.0.0.1:1", query: "vector(1) + 0 * up{service=\"{{args.service}}\"}"}
`

// condition returns a condition of the Rollout, or a zero one.
func condition(ro *v1alpha1.Rollout, typ string) metav1.Condition {
	if c := conditions.Get(ro, typ); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// holdsStill asserts that for d no pod of image runs and the Rollout
// stays as check wants it.
func (w *world) holdsStill(d time.Duration, image string, check func(*v1alpha1.Rollout) error) {
	w.T.Helper()
	w.Holds(d, "nothing moves", func(ctx context.Context) error {
		if n := w.Pods(w.NS, "echoserver")[image]; n[1] > 0 {
			return fmt.Errorf("%d pods of %s were created while nothing may move", n[1], image)
		}
		return check(w.Rollout(w.NS, "echoserver"))
	})
}

// TestNothingMovesOnAHalfUnderstoodSpec: a Rollout whose HTTPRoute and
// AnalysisTemplate do not exist is not Ready while idle and names them;
// an image bump moves no pod and no route. Once they exist, a template
// argument without a value stalls it with the field named, still moving
// nothing; with the argument given, the release starts.
func TestNothingMovesOnAHalfUnderstoodSpec(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	app := w.Decode(echoApp("echo:v1"))
	for _, u := range app[:2] { // the Deployment and the Service; no HTTPRoute yet
		w.Apply(u, fluxManager)
	}
	w.ApplyYAML(specRollout(""))
	w.Eventually(30*time.Second, "the missing HTTPRoute and template reported", func(context.Context) (bool, error) {
		ro := w.Rollout(w.NS, "echoserver")
		ready := condition(ro, v1alpha1.ReadyCondition)
		return ready.Status == metav1.ConditionFalse && ready.Reason == v1alpha1.ReasonDependencyNotFound &&
			strings.Contains(ready.Message, "spec.strategy.canary.trafficRoutings[0].gateway.httpRouteName") &&
			strings.Contains(ready.Message, "spec.strategy.canary.steps[0].analysis.templates[0]"), nil
	})
	assertKstatus(t, w.Rollout(w.NS, "echoserver"))

	// An image bump while they are missing: nothing moves.
	w.ApplyYAML(echoApp("echo:v2")[:strings.Index(echoApp("echo:v2"), "---")])
	w.holdsStill(5*time.Second, "echo:v2", func(ro *v1alpha1.Rollout) error {
		if ro.Status.CurrentStepIndex != 0 || condition(ro, v1alpha1.ReadyCondition).Reason != v1alpha1.ReasonDependencyNotFound {
			return fmt.Errorf("the release started with objects missing: step %d, %+v", ro.Status.CurrentStepIndex, ro.Status.Conditions)
		}
		return nil
	})

	// The route and the template arrive; the template needs an argument
	// the Rollout does not give: Stalled, field named, still nothing moves.
	w.Apply(app[2], fluxManager)
	w.ApplyYAML(successRate)
	w.Eventually(30*time.Second, "the missing argument stalls the Rollout", func(context.Context) (bool, error) {
		ro := w.Rollout(w.NS, "echoserver")
		st := condition(ro, v1alpha1.StalledCondition)
		return st.Status == metav1.ConditionTrue && st.Reason == v1alpha1.ReasonInvalidSpec &&
			strings.Contains(st.Message, "spec.strategy.canary.steps[0].analysis.args"), nil
	})
	w.holdsStill(3*time.Second, "echo:v2", func(ro *v1alpha1.Rollout) error {
		if st := condition(ro, v1alpha1.StalledCondition); st.Status != metav1.ConditionTrue {
			return fmt.Errorf("Stalled was overwritten: %+v", ro.Status.Conditions)
		}
		return nil
	})
	assertKstatus(t, w.Rollout(w.NS, "echoserver"))
	warnings := w.warningEvents(w.NS, "echoserver", v1alpha1.ReasonInvalidSpec)
	if warnings != 1 {
		t.Errorf("%d InvalidSpec warning events, want 1 (events on transitions only)", warnings)
	}

	// The argument is given: the release starts.
	w.ApplyYAML(specRollout(", args: [{name: service, value: echoserver}]"))
	w.Eventually(60*time.Second, "the release starts at step 1", func(context.Context) (bool, error) {
		ro := w.Rollout(w.NS, "echoserver")
		return ro.Status.CurrentStepIndex == 1 && ro.Status.Phase == v1alpha1.PhaseProgressing && w.Pods(w.NS, "echoserver")["echo:v2"][1] == 1, nil
	})
}

// plainRollout is specRollout named name, without analysis.
func plainRollout(name string) string {
	r := rig.Rollout{Name: "echoserver", Namespace: "demo", Steps: []string{`{traffic: "20%", replicas: 1, pause: {}}`, `{traffic: "100%", replicas: "100%"}`}}.YAML()
	return strings.Replace(r, "name: echoserver, namespace: demo", "name: "+name+", namespace: demo", 1)
}

// warningEvents counts the Warning events with reason on a Rollout.
func (w *world) warningEvents(ns, name, reason string) int {
	w.T.Helper()
	var list corev1.EventList
	if err := w.C.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		w.T.Fatal(err)
	}
	n := 0
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == "Rollout" && e.InvolvedObject.Name == name && e.Type == "Warning" && e.Reason == reason {
			n += max(int(e.Count), 1)
		}
	}
	return n
}

// TestOneRolloutPerWorkload: a second Rollout naming a workload another
// Rollout releases is refused at admission; one that got in anyway (the
// validating webhook was not registered) stays Stalled naming the other
// and never touches the workload.
func TestOneRolloutPerWorkload(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.ApplyYAML(echoApp("echo:v1"))
	w.ApplyYAML(plainRollout("echoserver"))
	w.Eventually(30*time.Second, "the first Rollout is Ready", func(context.Context) (bool, error) {
		return conditions.IsReady(w.Rollout(w.NS, "echoserver")), nil
	})
	second := plainRollout("echoserver-too")
	u := w.Decode(second)[0]
	err := w.C.Patch(context.Background(), u, client.Apply, client.FieldOwner(fluxManager), client.ForceOwnership)
	if err == nil || !strings.Contains(err.Error(), "spec.workloadRef") || !strings.Contains(err.Error(), "Rollout echoserver") {
		t.Fatalf("want the second Rollout refused naming spec.workloadRef and Rollout echoserver, got %v", err)
	}

	// Without the validating webhook it gets in: Stalled, and hands off.
	var vwc admissionregistrationv1.ValidatingWebhookConfiguration
	if err := w.C.Get(context.Background(), client.ObjectKey{Name: w.ctrlOpts.WebhookConfigName}, &vwc); err != nil {
		t.Fatal(err)
	}
	if err := w.C.Delete(context.Background(), &vwc); err != nil {
		t.Fatal(err)
	}
	// The API server drops a deleted webhook configuration once its own
	// watch of them shows the deletion: until then the webhook still
	// refuses (CI of 9a27aea, at load 15), so the apply is tried again
	// until it gets in.
	deleted := time.Now()
	w.Eventually(30*time.Second, "the API server stops calling the deleted validating webhook", func(ctx context.Context) (bool, error) {
		err := w.C.Patch(ctx, w.Decode(second)[0], client.Apply, client.FieldOwner(fluxManager), client.ForceOwnership)
		return err == nil, nil
	})
	t.Logf("the second Rollout got in %v after the webhook configuration was deleted", time.Since(deleted).Round(10*time.Millisecond))
	w.Eventually(30*time.Second, "the second Rollout is Stalled naming the first", func(context.Context) (bool, error) {
		st := condition(w.Rollout(w.NS, "echoserver-too"), v1alpha1.StalledCondition)
		return st.Status == metav1.ConditionTrue && strings.Contains(st.Message, "Rollout echoserver already releases"), nil
	})
	w.ApplyYAML(echoApp("echo:v2"))
	w.Eventually(60*time.Second, "the first Rollout releases step 1", func(context.Context) (bool, error) {
		ro := w.Rollout(w.NS, "echoserver")
		return ro.Status.CurrentStepIndex == 1 && ro.Status.AwaitingApproval != nil, nil
	})
	if ro := w.Rollout(w.NS, "echoserver-too"); ro.Status.CanaryRevision != "" || ro.Status.CurrentStepIndex != 0 {
		t.Fatalf("the second Rollout took part in the release: %+v", ro.Status)
	}
	if n := w.Pods(w.NS, "echoserver")["echo:v2"]; n[1] != 1 {
		t.Fatalf("%d pods of echo:v2, want the first Rollout's 1", n[1])
	}
}

// TestApprovalOfAStepThatDoesNotExistWarns: an approval of step 9 of a
// 2-step Rollout is accepted (it is harmless) with a warning naming the
// field, which kubectl and the GitOps tool print.
func TestApprovalOfAStepThatDoesNotExistWarns(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.ApplyYAML(echoApp("echo:v1"))
	u := w.Decode(plainRollout("echoserver") + "  approvals: [{revision: abc, step: 9}]\n")[0]
	var warnings []string
	cfg := rest.CopyConfig(w.cluster.RESTConfig)
	cfg.WarningHandler = warningRecorder{&warnings}
	wc, err := client.New(cfg, client.Options{Scheme: w.C.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	if err := wc.Patch(context.Background(), u, client.Apply, client.FieldOwner(fluxManager), client.ForceOwnership); err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "spec.approvals[0].step: 9, but the Rollout has 2 steps") {
		t.Fatalf("warnings = %q, want one naming spec.approvals[0].step", warnings)
	}
}

// warningRecorder keeps the warnings the API server sends.
type warningRecorder struct{ out *[]string }

func (r warningRecorder) HandleWarningHeader(_ int, _ string, text string) {
	*r.out = append(*r.out, text)
}
