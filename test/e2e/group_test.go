package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/rig"
)

// groupMembers are the members of the lockstep story: a DaemonSet, a
// Deployment and a StatefulSet, with their pod counts (the DaemonSet runs
// one pod per kwok node). "agent" is first by name: the coordinator.
var groupMembers = []struct {
	name, kind string
	pods       int
}{{"agent", "DaemonSet", 3}, {"api", "Deployment", 4}, {"db", "StatefulSet", 3}}

// TestLockstepGroupReleasesAsOne: three Rollouts of different workload
// kinds name group shop (spec.group). New images reach all three: the
// group waits at one gate, the coordinator's (agent, first by name), the
// only member asking for an approval; the others wait for it, and their
// own approval does not open their gate. Approved once, every member
// takes every step, and a reader listing the three statuses every 50 ms
// never sees a member start a step before every member in release
// finished the one before. Then a member aborted at the next release's
// gate rolls the other two back as well.
func TestLockstepGroupReleasesAsOne(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	steps := []string{`{replicas: 1, pause: {}}`, `{replicas: "50%", pause: {duration: 1}}`, `{replicas: "100%"}`}
	for _, m := range groupMembers {
		w.ApplyYAML(groupWorkload(w.NS, m.kind, m.name, "shop:1"))
		w.ApplyYAML(rig.Rollout{Name: m.name, Namespace: w.NS, Kind: m.kind, Group: "shop", WithoutTraffic: true, Steps: steps}.YAML())
	}
	w.Eventually(90*time.Second, "three members healthy on shop:1", func(ctx context.Context) (bool, error) {
		return w.groupAt("shop:1"), nil
	})

	rec := rig.RecordGroup(w.C, w.NS, 50*time.Millisecond)
	for _, m := range groupMembers {
		w.ApplyYAML(groupWorkload(w.NS, m.kind, m.name, "shop:2"))
	}
	w.Eventually(90*time.Second, "the group at its gate: agent asks for the approval, api and db wait for it", func(ctx context.Context) (bool, error) {
		for _, m := range groupMembers {
			ro := w.Rollout(w.NS, m.name)
			if ro.Status.CurrentStepIndex != 1 || ro.Status.CurrentStepState != v1alpha1.StepPaused || w.Pods(w.NS, m.name)["shop:2"] != [2]int{1, 1} {
				return false, nil
			}
			if m.name == "agent" {
				if a := ro.Status.AwaitingApproval; a == nil || a.Step != 1 || !strings.Contains(ro.Status.Message, "the gate of group shop") {
					return false, nil
				}
				continue
			}
			if ro.Status.AwaitingApproval != nil {
				return false, fmt.Errorf("%s asks for an approval of its own: %+v", m.name, ro.Status.AwaitingApproval)
			}
			if conditions.GetReason(ro, v1alpha1.ProgressingCondition) != v1alpha1.ReasonWaitingForGroup ||
				!strings.Contains(ro.Status.Message, "approve step 1 of Rollout agent") {
				return false, nil
			}
		}
		return true, nil
	})

	// api's own approval does not open the group's gate.
	api := w.Rollout(w.NS, "api")
	w.Update(api, func() {
		api.Spec.Approvals = append(api.Spec.Approvals, v1alpha1.Approval{Revision: api.Status.CanaryRevision, Step: 1, ApprovedBy: "e2e"})
	})
	w.Holds(3*time.Second, "api approved on its own: still at the group's gate", func(ctx context.Context) error {
		if ro := w.Rollout(w.NS, "api"); ro.Status.CurrentStepIndex != 1 || ro.Status.CurrentStepState != v1alpha1.StepPaused {
			return fmt.Errorf("api at step %d %s", ro.Status.CurrentStepIndex, ro.Status.CurrentStepState)
		}
		return nil
	})

	start := time.Now()
	agent := w.Rollout(w.NS, "agent")
	w.Update(agent, func() {
		agent.Spec.Approvals = append(agent.Spec.Approvals, v1alpha1.Approval{Revision: agent.Status.CanaryRevision, Step: 1, ApprovedBy: "e2e"})
	})
	w.Eventually(120*time.Second, "the group released on shop:2", func(ctx context.Context) (bool, error) {
		return w.groupAt("shop:2"), nil
	})
	t.Logf("the group's approval to every member released: %s", time.Since(start).Round(100*time.Millisecond))
	rec.Check(t, 3)

	// A member aborted at the gate of the next release rolls back the group.
	for _, m := range groupMembers {
		w.ApplyYAML(groupWorkload(w.NS, m.kind, m.name, "shop:3"))
	}
	w.Eventually(90*time.Second, "the next release at the group's gate", func(ctx context.Context) (bool, error) {
		ro := w.Rollout(w.NS, "agent")
		return ro.Status.AwaitingApproval != nil && w.Pods(w.NS, "db")["shop:3"] == [2]int{1, 1}, nil
	})
	db := w.Rollout(w.NS, "db")
	w.Update(db, func() {
		db.Spec.Abort = &v1alpha1.RevisionRequest{Revision: db.Status.CanaryRevision, Reason: "bad schema"}
	})
	w.Eventually(90*time.Second, "every member rolled back to shop:2", func(ctx context.Context) (bool, error) {
		for _, m := range groupMembers {
			// A DaemonSet rolls back by taking its stable template back,
			// after which its Rollout is Healthy (reason RolledBack).
			ro := w.Rollout(w.NS, m.name)
			back := ro.Status.Phase == v1alpha1.PhaseFailed || conditions.GetReason(ro, v1alpha1.StalledCondition) == v1alpha1.ReasonRolledBack
			if !back || fmt.Sprint(w.Pods(w.NS, m.name)) != fmt.Sprint(map[string][2]int{"shop:2": {m.pods, m.pods}}) {
				return false, nil
			}
		}
		return true, nil
	})
	for _, m := range groupMembers {
		want := v1alpha1.ReasonGroupFailed
		if m.name == "db" {
			want = v1alpha1.ReasonAborted
		}
		if n := w.warningEvents(w.NS, m.name, want); n == 0 {
			t.Errorf("%s: no %s warning event", m.name, want)
		}
	}
	if msg := w.Rollout(w.NS, "api").Status.Message; !strings.Contains(msg, "member db of group shop failed (Aborted)") {
		t.Fatalf("api says %q, want the member that failed named", msg)
	}
}

// groupAt reports whether every member runs image on all its pods, ready,
// and is Healthy with no release in progress.
func (w *world) groupAt(image string) bool {
	for _, m := range groupMembers {
		ro := w.Rollout(w.NS, m.name)
		if ro.Status.Phase != v1alpha1.PhaseHealthy || (ro.Status.CanaryRevision != "" && ro.Status.CanaryRevision != ro.Status.StableRevision) ||
			fmt.Sprint(w.Pods(w.NS, m.name)) != fmt.Sprint(map[string][2]int{image: {m.pods, m.pods}}) {
			return false
		}
	}
	return true
}

// groupWorkload is the YAML of a workload of kind running image, labelled
// app: name (a DaemonSet runs on every kwok node).
func groupWorkload(ns, kind, name, image string) string {
	pod := fmt.Sprintf(`
  selector: {matchLabels: {app: %[1]s}}
  template:
    metadata: {labels: {app: %[1]s}}
    spec:
      tolerations: [{operator: Exists}]
      containers:
      - {name: %[1]s, image: %[2]s}
`, name, image)
	head := fmt.Sprintf("apiVersion: apps/v1\nkind: %s\nmetadata: {name: %s, namespace: %s}\nspec:", kind, name, ns)
	switch kind {
	case "Deployment":
		return head + "\n  replicas: 4" + pod
	case "StatefulSet":
		return head + "\n  replicas: 3\n  serviceName: " + name + pod
	}
	return head + pod
}
