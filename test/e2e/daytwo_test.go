package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/workload"
	"github.com/rollgate/rollgate/test/rig"
)

// The day-two stories: a Rollout deleted in every state goes within
// seconds, and a deletion never rolls an unapproved version to every pod.

// echoRolloutAlone is echoRollout without spec.git: the deletion stories
// need no Git.
var echoRolloutAlone = strings.Replace(echoRollout, "  git: {repository: app-repo, path: apps/echoserver/rollout.yaml}\n", "", 1)

// atFirstGate applies v1 of the echoserver app and rolloutYAML, bumps the
// image to v2 and waits for step 1's gate: one pod of v2, four of v1.
func (w *world) atFirstGate(rolloutYAML string) {
	w.T.Helper()
	w.ApplyYAML(echoApp("echo:1.0"))
	w.ApplyYAML(rolloutYAML)
	w.Eventually(60*time.Second, "v1 running under the Rollout", func(ctx context.Context) (bool, error) {
		return w.Pods(w.NS, "echoserver")["echo:1.0"] == [2]int{5, 5} && w.Rollout(w.NS, "echoserver").Status.Phase == v1alpha1.PhaseHealthy &&
			w.Deployment(w.NS, "echoserver").Labels[v1alpha1.LabelControlled] != "", nil
	})
	w.ApplyYAML(echoApp("echo:2.0"))
	w.Eventually(60*time.Second, "step 1 at its gate", func(ctx context.Context) (bool, error) {
		ro := w.Rollout(w.NS, "echoserver")
		pods := w.Pods(w.NS, "echoserver")
		return ro.Status.AwaitingApproval != nil && pods["echo:2.0"] == [2]int{1, 1} && pods["echo:1.0"][1] == 4, nil
	})
}

// deleteRollout deletes the echoserver Rollout and waits until it is gone,
// printing how long that took.
func (w *world) deleteRollout(what string) {
	w.T.Helper()
	ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: w.NS, Name: "echoserver"}}
	start := time.Now()
	if err := w.C.Delete(context.Background(), ro); err != nil {
		w.T.Fatal(err)
	}
	w.Eventually(60*time.Second, what+": the Rollout is gone", func(ctx context.Context) (bool, error) {
		err := w.C.Get(ctx, client.ObjectKeyFromObject(ro), ro)
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	w.T.Logf("%s: the Rollout was gone %.1f s after its deletion", what, time.Since(start).Seconds())
}

// heldAsItStands checks, for d, that the workload stays held with one pod
// of v2 and four of v1, labelled and marked held without a Rollout.
func (w *world) heldAsItStands(d time.Duration, what string) {
	w.T.Helper()
	w.Holds(d, what, func(ctx context.Context) error {
		pods := w.Pods(w.NS, "echoserver")
		if pods["echo:2.0"][1] != 1 || pods["echo:1.0"][1] != 4 {
			return fmt.Errorf("pods by image %v, want the release as it stood: 1 of echo:2.0, 4 of echo:1.0", pods)
		}
		d := w.Deployment(w.NS, "echoserver")
		ctrl, err := workload.ParseControl(d)
		if err != nil || ctrl == nil || !ctrl.HeldWithoutRollout || !d.Spec.Paused || d.Labels[v1alpha1.LabelControlled] == "" {
			return fmt.Errorf("Deployment paused=%v labels=%v control=%+v (%v), want held without a Rollout", d.Spec.Paused, d.Labels, ctrl, err)
		}
		return nil
	})
}

// TestDeletedAtAGateLeavesTheWorkloadHeld: a Rollout deleted at a gate
// (an accidental prune of its file) goes within seconds, the declared
// traffic comes back, and the workload stays as it stood: one pod of the
// unapproved version, not five, through a GitOps re-apply too. Applied
// again, the Rollout takes the release over at its gate; deleted again,
// `rollgate handback` gives the workload back, and its own controller
// rolls the declared version out.
func TestDeletedAtAGateLeavesTheWorkloadHeld(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.atFirstGate(echoRolloutAlone)

	w.deleteRollout("deleted at step 1's gate")
	assertWeights(t, w, 100, 0)
	w.heldAsItStands(5*time.Second, "the workload held as it stood")
	w.ApplyYAML(echoApp("echo:2.0")) // the GitOps tool re-applies what Git declares
	w.heldAsItStands(3*time.Second, "the workload held through a re-apply")

	// Applied again from Git, the Rollout takes the release over.
	w.ApplyYAML(echoRolloutAlone)
	w.Eventually(60*time.Second, "the re-applied Rollout at step 1's gate, the mark cleared", func(ctx context.Context) (bool, error) {
		ro := w.Rollout(w.NS, "echoserver")
		ctrl, err := workload.ParseControl(w.Deployment(w.NS, "echoserver"))
		return ro.Status.AwaitingApproval != nil && ro.Status.AwaitingApproval.Step == 1 && err == nil && ctrl != nil && !ctrl.HeldWithoutRollout, err
	})
	if _, err := workload.HandBack(context.Background(), w.C, w.NS, "Deployment", "echoserver"); err == nil || !strings.Contains(err.Error(), "releases Deployment echoserver") {
		t.Fatalf("handback while a Rollout names the workload: %v; want it refused, naming the Rollout", err)
	}
	if p := w.Pods(w.NS, "echoserver"); p["echo:2.0"][1] != 1 {
		t.Fatalf("pods by image %v after the take-over, want still 1 of echo:2.0", p)
	}

	w.deleteRollout("deleted again")
	w.heldAsItStands(2*time.Second, "held again")
	msg, err := workload.HandBack(context.Background(), w.C, w.NS, "Deployment", "echoserver")
	if err != nil {
		t.Fatal(err)
	}
	t.Log(msg)
	w.Eventually(60*time.Second, "handed back: every pod on echo:2.0, the workload unpaused and unlabelled", func(ctx context.Context) (bool, error) {
		d := w.Deployment(w.NS, "echoserver")
		return w.Pods(w.NS, "echoserver")["echo:2.0"] == [2]int{5, 5} && !d.Spec.Paused && d.Labels[v1alpha1.LabelControlled] == "" &&
			d.Annotations[v1alpha1.AnnotationControl] == "", nil
	})
}

// TestDeletedWithOnDeleteHandBack: spec.onDelete HandBack is the explicit
// choice to give the workload back on deletion: the declared traffic comes
// back and the native controller rolls the declared version to every pod.
func TestDeletedWithOnDeleteHandBack(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.atFirstGate(strings.Replace(echoRolloutAlone, "spec:\n", "spec:\n  onDelete: HandBack\n", 1))
	w.deleteRollout("deleted at a gate with onDelete HandBack")
	assertWeights(t, w, 100, 0)
	w.Eventually(60*time.Second, "every pod on echo:2.0, the workload unlabelled", func(ctx context.Context) (bool, error) {
		d := w.Deployment(w.NS, "echoserver")
		return w.Pods(w.NS, "echoserver")["echo:2.0"] == [2]int{5, 5} && !d.Spec.Paused && d.Labels[v1alpha1.LabelControlled] == "", nil
	})
}

// TestDeletionFinishesWithoutItsWorkload: a Rollout whose workload does
// not exist (a typo in workloadRef.name), one whose Deployment went first
// at a gate (the usual order of a prune), one whose HTTPRoute went first,
// and one whose Git server is down are all gone within seconds of their
// deletion.
func TestDeletionFinishesWithoutItsWorkload(t *testing.T) {
	t.Parallel()
	w := newWorld(t)

	typo := strings.Replace(echoRolloutAlone, "name: echoserver}", "name: echoserverr}", 1)
	w.ApplyYAML(typo)
	w.Eventually(30*time.Second, "Stalled with WorkloadNotFound", func(ctx context.Context) (bool, error) {
		ro := w.Rollout(w.NS, "echoserver")
		c := findCondition(ro.Status.Conditions, v1alpha1.StalledCondition)
		return c != nil && c.Reason == v1alpha1.ReasonWorkloadNotFound, nil
	})
	w.deleteRollout("a typo in workloadRef.name")

	w.atFirstGate(echoRolloutAlone)
	if err := w.C.Delete(context.Background(), w.Deployment(w.NS, "echoserver")); err != nil {
		t.Fatal(err)
	}
	w.deleteRollout("its Deployment deleted first, at a gate")

	// The Rollout's Git server is down and its HTTPRoute is pruned first.
	w.ApplyYAML(fmt.Sprintf(`
apiVersion: rollgate.dev/v1alpha1
kind: Repository
metadata: {name: app-repo, namespace: demo}
spec: {url: "http://127.0.0.1:%d/app.git", interval: 1s}
`, rig.FreePort(t)))
	w.atFirstGate(echoRollout)
	if err := w.C.Delete(context.Background(), &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: w.NS, Name: "echoserver"}}); err != nil {
		t.Fatal(err)
	}
	w.deleteRollout("its HTTPRoute deleted first, the Git server down")
	w.heldAsItStands(2*time.Second, "the workload held")
}

// TestNamespaceDeletedMidRelease: a namespace deleted with everything in
// it while a release waits at a gate (an Argo CD app or Flux Kustomization
// removed) is gone within a minute: no finalizer of rollgate's keeps it
// Terminating.
func TestNamespaceDeletedMidRelease(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.atFirstGate(echoRolloutAlone)
	start := time.Now()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.NS}}
	if err := w.C.Delete(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	// What kept the namespace at the last look, reported once if it
	// stays: the namespace's conditions and each Rollout's deletion,
	// finalizers and message.
	var left string
	_, err := rig.Wait(context.Background(), 90*time.Second, "the namespace gone", func(ctx context.Context) (bool, string, error) {
		err := w.C.Get(ctx, client.ObjectKeyFromObject(ns), ns)
		if err != nil {
			return apierrors.IsNotFound(err), "", client.IgnoreNotFound(err)
		}
		var b strings.Builder
		for _, c := range ns.Status.Conditions {
			if c.Status == corev1.ConditionTrue {
				fmt.Fprintf(&b, "\n  namespace: %s", c.Message)
			}
		}
		var ros v1alpha1.RolloutList
		if err := w.C.List(ctx, &ros, client.InNamespace(w.NS)); err == nil {
			for _, ro := range ros.Items {
				f, _ := json.Marshal(ro.Finalizers)
				fmt.Fprintf(&b, "\n  Rollout %s: deletionTimestamp %v, finalizers %s, phase %s: %s",
					ro.Name, ro.DeletionTimestamp, f, ro.Status.Phase, ro.Status.Message)
			}
		}
		left = b.String()
		return false, "", nil
	})
	if err != nil {
		t.Fatalf("the namespace is still there %.0f s after its deletion: %v; at the last look:%s", time.Since(start).Seconds(), err, left)
	}
	t.Logf("the namespace was gone %.1f s after its deletion", time.Since(start).Seconds())
}

// findCondition returns the condition of type t, or nil.
func findCondition(cs []metav1.Condition, t string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == t {
			return &cs[i]
		}
	}
	return nil
}
