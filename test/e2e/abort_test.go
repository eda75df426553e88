package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
)

// TestAbortRollsBackAndRevertsInGit: a release aborted from Git returns
// traffic and pods to the stable revision and proposes the revert in Git,
// so the GitOps tool does not re-apply the failed version.
func TestAbortRollsBackAndRevertsInGit(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.givenRepository(map[string]string{
		"apps/echoserver/rollout.yaml":    w.InNS(echoRollout),
		"apps/echoserver/deployment.yaml": "# the app, as the team keeps it\n" + strings.TrimPrefix(w.InNS(echoApp("echo:1.0")), "\n"),
	}, "")
	w.ApplyYAML(echoApp("echo:1.0"))
	w.ApplyYAML(echoRollout)
	w.Eventually(60*time.Second, "v1 running", func(ctx context.Context) (bool, error) {
		return w.Pods(w.NS, "echoserver")["echo:1.0"] == [2]int{5, 5} && conditions.IsReady(w.Rollout(w.NS, "echoserver")), nil
	})

	// A developer bumps the image in Git; Flux applies it.
	bumped := "# the app, as the team keeps it\n" + strings.TrimPrefix(w.InNS(echoApp("echo:2.0")), "\n")
	if _, err := w.git.Commit("app", "main", "Bump echoserver to 2.0", map[string]string{"apps/echoserver/deployment.yaml": bumped}); err != nil {
		t.Fatal(err)
	}
	w.ApplyYAML(echoApp("echo:2.0"))
	var ro *v1alpha1.Rollout
	w.Eventually(90*time.Second, "step 1 waiting for approval", func(ctx context.Context) (bool, error) {
		ro = w.Rollout(w.NS, "echoserver")
		return ro.Status.AwaitingApproval != nil, nil
	})
	canary := ro.Status.CanaryRevision

	// When the release is aborted (spec.abort, applied from Git).
	w.ApplyYAML(echoRollout + fmt.Sprintf("  abort: {revision: %s, reason: bad latency}\n", canary))

	// Then no new pod is left, all traffic is on stable, the Rollout says
	// why it stopped, and Git holds the revert.
	w.Eventually(60*time.Second, "rolled back", func(ctx context.Context) (bool, error) {
		ro = w.Rollout(w.NS, "echoserver")
		return ro.Status.Phase == v1alpha1.PhaseFailed && w.Pods(w.NS, "echoserver")["echo:2.0"][1] == 0 &&
			w.Pods(w.NS, "echoserver")["echo:1.0"] == [2]int{5, 5}, nil
	})
	defer func() { t.Logf("final conditions: %+v", w.Rollout(w.NS, "echoserver").Status.Conditions) }()
	w.Eventually(30*time.Second, "Stalled=True with reason Aborted", func(ctx context.Context) (bool, error) {
		ro = w.Rollout(w.NS, "echoserver")
		return conditions.IsStalled(ro) && conditions.GetReason(ro, v1alpha1.StalledCondition) == v1alpha1.ReasonAborted &&
			!conditions.IsReady(ro), nil
	})
	assertKstatus(t, ro)
	assertWeights(t, w, 100, 0)
	branch := gitsync.RevertBranch(w.NS, "echoserver", canary)
	w.Eventually(30*time.Second, "revert branch in Git", func(ctx context.Context) (bool, error) {
		s, err := w.git.ReadFile("app", branch, "apps/echoserver/deployment.yaml")
		return err == nil && strings.Contains(s, "image: echo:1.0") && strings.HasPrefix(s, "# the app, as the team keeps it"), nil
	})
	if ro = w.Rollout(w.NS, "echoserver"); ro.Status.Git == nil || ro.Status.Git.RevertBranch != branch {
		t.Fatalf("status.git.revertBranch = %+v, want %s", ro.Status.Git, branch)
	}

	// While Git still declares v2, a re-apply by the GitOps tool moves no pod.
	w.ApplyYAML(echoApp("echo:2.0"))
	w.Holds(2*time.Second, "no pod of the failed version", func(ctx context.Context) error {
		if got := w.Pods(w.NS, "echoserver"); got["echo:2.0"][1] != 0 {
			return fmt.Errorf("a re-apply of the failed version started new pods: %v", got)
		}
		return nil
	})

	// When the revert is merged and applied, the workload is released at v1.
	if _, err := w.git.Merge("app", "main", branch, "Merge revert"); err != nil {
		t.Fatal(err)
	}
	w.ApplyYAML(echoApp("echo:1.0"))
	w.Eventually(60*time.Second, "healthy on v1", func(ctx context.Context) (bool, error) {
		ro = w.Rollout(w.NS, "echoserver")
		d := w.Deployment(w.NS, "echoserver")
		return ro.Status.Phase == v1alpha1.PhaseHealthy && !d.Spec.Paused && w.Pods(w.NS, "echoserver")["echo:1.0"] == [2]int{5, 5}, nil
	})

	// Then the release has settled, and says how it ended, in the status
	// and in Git: RolledBack, not a RollingBack that never ends.
	w.Eventually(30*time.Second, "the release ends RolledBack, in the status and in Git", func(ctx context.Context) (bool, error) {
		ro = w.Rollout(w.NS, "echoserver")
		file, err := w.git.ReadFile("app", "rollgate/status", w.NS+"/echoserver.yaml")
		if err != nil {
			return false, nil
		}
		return ro.Status.CurrentStepState == v1alpha1.StepRolledBack && conditions.IsReady(ro) &&
			conditions.GetReason(ro, v1alpha1.ReadyCondition) == v1alpha1.ReasonRolledBack &&
			strings.Contains(file, "state: RolledBack"), nil
	})
}
