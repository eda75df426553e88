package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/test/rig"
)

// gatedRollout has a gate at each of its first two steps.
var gatedRollout = rig.Rollout{Name: "echoserver", Namespace: "demo", GitPath: "apps/echoserver/rollout.yaml", Steps: []string{
	`{traffic: "20%", replicas: 1, pause: {}}`,
	`{traffic: "40%", replicas: "40%", pause: {}}`,
	`{traffic: "100%", replicas: "100%"}`,
}}.YAML()

// TestRetryAsksForEveryApprovalAgain: the approvals merged for a failed
// attempt stay in Git, yet the retried release of the same revision waits
// at each gate until that attempt is approved on a branch of its own.
func TestRetryAsksForEveryApprovalAgain(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	const path = "apps/echoserver/rollout.yaml"
	w.givenAppFromGit(gatedRollout, "")

	// Given a release of v2 whose first gate was approved by merging its
	// branch, aborted at the second gate, whose branch was merged too late.
	w.ApplyYAML(echoApp("echo:2.0"))
	gate := func(attempt, step int32) *v1alpha1.ApprovalRequest {
		t.Helper()
		var a *v1alpha1.ApprovalRequest
		w.Eventually(90*time.Second, fmt.Sprintf("attempt %d waiting at step %d with its approval branch", attempt, step), func(ctx context.Context) (bool, error) {
			ro := w.Rollout(w.NS, "echoserver")
			a = ro.Status.AwaitingApproval
			return max(ro.Status.Attempt, 1) == attempt && ro.Status.CurrentStepIndex == step && a != nil && a.Branch != "", nil
		})
		return a
	}
	merge := func(branch string) {
		t.Helper()
		if _, err := w.git.Merge("app", "main", branch, "Merge "+branch); err != nil {
			t.Fatal(err)
		}
	}
	declared := func() string {
		t.Helper()
		s, err := w.git.ReadFile("app", "main", path)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	first := gate(1, 1)
	canary := first.Revision
	if want := gitsync.ApprovalBranch(w.NS, "echoserver", gitsync.Approval{Revision: canary, Step: 1}); first.Branch != want || first.Attempt != 0 {
		t.Fatalf("attempt 1 gate: branch %q attempt %d, want %q and no attempt", first.Branch, first.Attempt, want)
	}
	merge(first.Branch)
	late := gate(1, 2).Branch
	w.ApplyYAML(declared() + fmt.Sprintf("  abort: {revision: %s, reason: bad latency}\n", canary))
	w.Eventually(60*time.Second, "the release failed and rolled back", func(ctx context.Context) (bool, error) {
		return w.Rollout(w.NS, "echoserver").Status.Phase == v1alpha1.PhaseFailed && w.Pods(w.NS, "echoserver")["echo:2.0"][1] == 0, nil
	})
	merge(late)
	if s := declared(); !strings.Contains(s, fmt.Sprintf("{revision: %s, step: 1}", canary)) || !strings.Contains(s, fmt.Sprintf("{revision: %s, step: 2}", canary)) {
		t.Fatalf("main does not hold both approvals of attempt 1:\n%s", s)
	}

	// When the release is retried, with every approval of attempt 1 in Git
	// and in the cluster.
	w.ApplyYAML(declared() + fmt.Sprintf("  retry: {revision: %s, attempt: 2}\n", canary))

	// Then attempt 2 waits at step 1 on a new branch, and the approval of
	// attempt 1 does not open the gate, however long it waits.
	second := gate(2, 1)
	want := gitsync.ApprovalBranch(w.NS, "echoserver", gitsync.Approval{Revision: canary, Step: 1, Attempt: 2})
	if second.Branch != want || second.Attempt != 2 || second.Revision != canary {
		t.Fatalf("attempt 2 gate = %+v, want branch %q and attempt 2", second, want)
	}
	// Several fetch intervals: nothing may move without a new approval.
	w.Holds(3*time.Second, "the gate of attempt 2", func(ctx context.Context) error {
		if ro := w.Rollout(w.NS, "echoserver"); ro.Status.Attempt != 2 || ro.Status.CurrentStepIndex != 1 || ro.Status.AwaitingApproval == nil {
			return fmt.Errorf("the approvals of attempt 1 opened the gate of attempt 2: attempt %d step %d awaiting %+v",
				ro.Status.Attempt, ro.Status.CurrentStepIndex, ro.Status.AwaitingApproval)
		}
		if got := w.Pods(w.NS, "echoserver")["echo:2.0"]; got[1] != 1 {
			return fmt.Errorf("attempt 2 at its first gate: want 1 new pod, got %v", got)
		}
		return nil
	})

	// When the branch of attempt 2 is merged, the gate opens, and the next
	// gate of attempt 2 waits in turn, on a branch of its own, although
	// main approves step 2 of attempt 1.
	merge(second.Branch)
	if s := declared(); !strings.Contains(s, fmt.Sprintf("{revision: %s, step: 1, attempt: 2}", canary)) {
		t.Fatalf("main after the merge lacks the approval of attempt 2:\n%s", s)
	}
	third := gate(2, 2)
	if want := gitsync.ApprovalBranch(w.NS, "echoserver", gitsync.Approval{Revision: canary, Step: 2, Attempt: 2}); third.Branch != want {
		t.Fatalf("attempt 2 step 2 branch %q, want %q", third.Branch, want)
	}
}
