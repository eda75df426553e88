package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// TestFreezeMergedInGitHoldsTheRelease: a Repository declares a freezes
// file (spec.freezes.path). While the file is missing, a new image is
// held before its first pod, saying which field to fix. A freeze merged
// through a pull request holds it too, naming the freeze and who merged
// it; the merge that lifts it starts the release at once. A freeze merged
// again at the release's last gate does not hold what is left: the gate's
// approval completes the release.
func TestFreezeMergedInGitHoldsTheRelease(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.givenAppFromGit(echoRollout, "freezes: {path: release/freezes.yaml}")

	w.applyYAML(echoApp("echo:2.0"))
	w.heldBeforeItsFirstPod("the freezes file is missing", "spec.freezes.path release/freezes.yaml is not on branch main")

	freeze := fmt.Sprintf("freezes:\n- name: black-friday\n  reason: shop peak\n  rollouts: {namespaces: [%s]}\n", w.ns)
	if _, err := w.git.Commit("app", "freeze", "Declare the black-friday freeze", map[string]string{"release/freezes.yaml": freeze}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.git.Commit("app", "main", "an unrelated change", map[string]string{"README.md": "app\n"}); err != nil {
		t.Fatal(err)
	}
	merge, err := w.git.MergeAs("app", "main", "freeze", "Merge pull request #12 from freeze", "Jane Merger", "jane@example.com")
	if err != nil {
		t.Fatal(err)
	}
	w.heldBeforeItsFirstPod("the merged freeze",
		"freeze black-friday (shop peak), merged in "+merge[:7]+" by Jane Merger <jane@example.com>")

	start := time.Now()
	if _, err := w.git.Commit("app", "main", "Lift the black-friday freeze", map[string]string{"release/freezes.yaml": "freezes: []\n"}); err != nil {
		t.Fatal(err)
	}
	var ro *v1alpha1.Rollout
	w.eventually(60*time.Second, "step 1 waiting for approval once the freeze is lifted", func(ctx context.Context) (bool, error) {
		ro = w.rollout(w.ns, "echoserver")
		return ro.Status.AwaitingApproval != nil && ro.Status.AwaitingApproval.Branch != "" &&
			w.pods(w.ns, "echoserver")["echo:2.0"] == [2]int{1, 1}, nil
	})
	t.Logf("lifted in Git to step 1 at its gate: %s", time.Since(start).Round(100*time.Millisecond))

	// Frozen again at the last gate: the approval completes the release.
	if _, err := w.git.Commit("app", "main", "Freeze again", map[string]string{"release/freezes.yaml": freeze}); err != nil {
		t.Fatal(err)
	}
	// The approval is read at a head that holds the freeze (the gate reads
	// both at the same commit), so the release meets the freeze.
	if _, err := w.git.Merge("app", "main", ro.Status.AwaitingApproval.Branch, "Merge approval of echoserver step 1"); err != nil {
		t.Fatal(err)
	}
	w.eventually(90*time.Second, "released under the freeze: past its last gate", func(ctx context.Context) (bool, error) {
		ro = w.rollout(w.ns, "echoserver")
		return ro.Status.Phase == v1alpha1.PhaseHealthy && ro.Status.StableRevision == ro.Status.CanaryRevision &&
			w.pods(w.ns, "echoserver")["echo:2.0"] == [2]int{5, 5}, nil
	})

	// The next image waits for the freeze.
	w.applyYAML(echoApp("echo:3.0"))
	w.heldBeforeItsFirstPod("a new image under the freeze", "freeze black-friday (shop peak), merged in")
}

// heldBeforeItsFirstPod waits for the Rollout to say why (WaitingForFreeze)
// and then checks for 2 s that no pod of the new image exists.
func (w *world) heldBeforeItsFirstPod(what, why string) {
	w.t.Helper()
	w.eventually(60*time.Second, what+": held, saying "+why, func(ctx context.Context) (bool, error) {
		ro := w.rollout(w.ns, "echoserver")
		return strings.Contains(ro.Status.Message, why) && conditions.GetReason(ro, v1alpha1.ProgressingCondition) == v1alpha1.ReasonWaitingForFreeze, nil
	})
	before := w.pods(w.ns, "echoserver")
	w.holds(2*time.Second, what+": no pod moves", func(ctx context.Context) error {
		if now := w.pods(w.ns, "echoserver"); fmt.Sprint(now) != fmt.Sprint(before) {
			return fmt.Errorf("pods by image %v, were %v", now, before)
		}
		return nil
	})
}
