package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/strategy"
	"github.com/rollgate/rollgate/test/rig"
)

// TestFreezeMergedInGitHoldsTheRelease: a Repository declares a freezes
// file (spec.releaseRules.path). While the file is missing, a new image is
// held before its first pod, saying which field to fix. A freeze merged
// through a pull request holds it too, naming the freeze and who merged
// it; the merge that lifts it starts the release at once. A freeze merged
// again at the release's last gate does not hold what is left: the gate's
// approval completes the release.
func TestFreezeMergedInGitHoldsTheRelease(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.givenAppFromGit(echoRollout, "releaseRules: {path: release/rules.yaml}")

	w.ApplyYAML(echoApp("echo:2.0"))
	w.heldBeforeItsFirstPod("the freezes file is missing", "spec.releaseRules.path release/rules.yaml is not on branch main")

	freeze := fmt.Sprintf("freezes:\n- name: black-friday\n  reason: shop peak\n  rollouts: {namespaces: [%s]}\n", w.NS)
	if _, err := w.git.Commit("app", "freeze", "Declare the black-friday freeze", map[string]string{"release/rules.yaml": freeze}); err != nil {
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
	if _, err := w.git.Commit("app", "main", "Lift the black-friday freeze", map[string]string{"release/rules.yaml": "freezes: []\n"}); err != nil {
		t.Fatal(err)
	}
	var ro *v1alpha1.Rollout
	w.Eventually(60*time.Second, "step 1 waiting for approval once the freeze is lifted", func(ctx context.Context) (bool, error) {
		ro = w.Rollout(w.NS, "echoserver")
		return ro.Status.AwaitingApproval != nil && ro.Status.AwaitingApproval.Branch != "" &&
			w.Pods(w.NS, "echoserver")["echo:2.0"] == [2]int{1, 1}, nil
	})
	t.Logf("lifted in Git to step 1 at its gate: %s", time.Since(start).Round(100*time.Millisecond))

	// Frozen again at the last gate: the approval completes the release.
	if _, err := w.git.Commit("app", "main", "Freeze again", map[string]string{"release/rules.yaml": freeze}); err != nil {
		t.Fatal(err)
	}
	// The approval is read at a head that holds the freeze (the gate reads
	// both at the same commit), so the release meets the freeze.
	if _, err := w.git.Merge("app", "main", ro.Status.AwaitingApproval.Branch, "Merge approval of echoserver step 1"); err != nil {
		t.Fatal(err)
	}
	w.Eventually(90*time.Second, "released under the freeze: past its last gate", func(ctx context.Context) (bool, error) {
		ro = w.Rollout(w.NS, "echoserver")
		return ro.Status.Phase == v1alpha1.PhaseHealthy && ro.Status.StableRevision == ro.Status.CanaryRevision &&
			w.Pods(w.NS, "echoserver")["echo:2.0"] == [2]int{5, 5}, nil
	})

	// The next image waits for the freeze.
	w.ApplyYAML(echoApp("echo:3.0"))
	w.heldBeforeItsFirstPod("a new image under the freeze", "freeze black-friday (shop peak), merged in")
}

// heldBeforeItsFirstPod waits for the Rollout to say why (WaitingForFreeze)
// and then checks for 2 s that no pod of the new image exists.
func (w *world) heldBeforeItsFirstPod(what, why string) {
	w.T.Helper()
	w.Eventually(60*time.Second, what+": held, saying "+why, func(ctx context.Context) (bool, error) {
		ro := w.Rollout(w.NS, "echoserver")
		return strings.Contains(ro.Status.Message, why) && conditions.GetReason(ro, v1alpha1.ProgressingCondition) == v1alpha1.ReasonWaitingForFreeze, nil
	})
	before := w.Pods(w.NS, "echoserver")
	w.Holds(2*time.Second, what+": no pod moves", func(ctx context.Context) error {
		if now := w.Pods(w.NS, "echoserver"); fmt.Sprint(now) != fmt.Sprint(before) {
			return fmt.Errorf("pods by image %v, were %v", now, before)
		}
		return nil
	})
}

// TestBudgetReleasesOneAtATimeInTheOrderTheyCame: three Rollouts of one
// Repository whose release rules allow one release in flight. Their new
// images arrive one after the other while the first waits at its gate:
// the second and the third wait before their first pod, at positions 1
// and 2 of the queue (status.queue, the message). Once the first is
// approved they release in the order they came. A reader sampling every
// 50 ms never sees two releases in flight.
func TestBudgetReleasesOneAtATimeInTheOrderTheyCame(t *testing.T) {
	t.Parallel()
	budgetStory(t, "one-at-a-time")
}

// TestClusterBudgetReleasesOneAtATime: the same with the controller's
// --max-releases-in-flight=1 instead of release rules in Git.
func TestClusterBudgetReleasesOneAtATime(t *testing.T) {
	t.Parallel()
	budgetStory(t, "cluster")
}

// budgetStory runs the releases of three Rollouts under a budget of one:
// "cluster" is the controller's, another name a budget of the release
// rules.
func budgetStory(t *testing.T, budget string) {
	w := newWorld(t)
	names := []string{"alpha", "beta", "gamma"}
	files := map[string]string{"release/rules.yaml": "budgets:\n- name: one-at-a-time\n  maxInFlight: 1\n"}
	rules := "releaseRules: {path: release/rules.yaml}"
	if budget == "cluster" {
		files, rules = map[string]string{}, ""
		w.stopController()
		w.ctrlOpts.MaxReleasesInFlight = 1
		w.startController()
	}
	rollouts := map[string]string{}
	for _, n := range names {
		// alpha waits at a gate, so the others queue behind it for as long
		// as the story needs, whatever the machine's load.
		first := `{replicas: 1, pause: {duration: 2}}`
		if n == "alpha" {
			first = `{replicas: 1, pause: {}}`
		}
		rollouts[n] = rig.Rollout{Name: n, Namespace: "demo", GitPath: "apps/" + n + "/rollout.yaml", WithoutTraffic: true,
			Steps: []string{first, `{replicas: "100%"}`}}.YAML()
		files["apps/"+n+"/rollout.yaml"] = w.InNS(rollouts[n])
	}
	w.givenRepository(files, rules)
	for _, n := range names {
		w.ApplyYAML(rig.App("demo", n, "echo:1.0", 2))
		w.ApplyYAML(rollouts[n])
	}
	w.Eventually(60*time.Second, "three Rollouts healthy", func(ctx context.Context) (bool, error) {
		for _, n := range names {
			if ro := w.Rollout(w.NS, n); ro.Status.Phase != v1alpha1.PhaseHealthy {
				return false, nil
			}
		}
		return true, nil
	})

	// A reader of the three statuses, every 50 ms.
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var mu sync.Mutex
	var started []string
	most := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			flying := 0
			for _, n := range names {
				ro := &v1alpha1.Rollout{}
				if err := w.C.Get(ctx, client.ObjectKey{Namespace: w.NS, Name: n}, ro); err != nil {
					continue
				}
				if strategy.InFlight(&ro.Status) {
					flying++
					mu.Lock()
					if !slices.Contains(started, n) {
						started = append(started, n)
					}
					mu.Unlock()
				}
			}
			mu.Lock()
			most = max(most, flying)
			mu.Unlock()
			time.Sleep(50 * time.Millisecond)
		}
	}()

	queued := func(n string, position int32) {
		w.Eventually(30*time.Second, fmt.Sprintf("%s waiting at position %d", n, position), func(ctx context.Context) (bool, error) {
			ro := w.Rollout(w.NS, n)
			q := ro.Status.Queue
			return q != nil && q.Budget == budget && q.Position == position &&
				conditions.GetReason(ro, v1alpha1.ProgressingCondition) == v1alpha1.ReasonWaitingForBudget &&
				strings.Contains(ro.Status.Message, fmt.Sprintf("position %d in its queue", position)) &&
				w.Pods(w.NS, n)["echo:2.0"] == [2]int{}, nil
		})
	}
	w.ApplyYAML(rig.App("demo", "alpha", "echo:2.0", 2))
	var alpha *v1alpha1.Rollout
	w.Eventually(30*time.Second, "alpha at its gate", func(ctx context.Context) (bool, error) {
		alpha = w.Rollout(w.NS, "alpha")
		return strategy.InFlight(&alpha.Status) && alpha.Status.AwaitingApproval != nil, nil
	})
	w.ApplyYAML(rig.App("demo", "beta", "echo:2.0", 2))
	queued("beta", 1)
	w.ApplyYAML(rig.App("demo", "gamma", "echo:2.0", 2))
	queued("gamma", 2)
	if msg := w.Rollout(w.NS, "gamma").Status.Message; !strings.Contains(msg, "budget "+budget+" allows 1 release(s) in flight and 1 are (alpha)") {
		t.Fatalf("gamma says %q, want the budget and what is in flight", msg)
	}

	// alpha's gate approved: alpha completes, then beta, then gamma.
	w.Update(alpha, func() {
		alpha.Spec.Approvals = append(alpha.Spec.Approvals, v1alpha1.Approval{Revision: alpha.Status.CanaryRevision, Step: 1})
	})
	w.Eventually(120*time.Second, "the three released", func(ctx context.Context) (bool, error) {
		for _, n := range names {
			ro := w.Rollout(w.NS, n)
			if ro.Status.Phase != v1alpha1.PhaseHealthy || ro.Status.Queue != nil || w.Pods(w.NS, n)["echo:2.0"] != [2]int{2, 2} {
				return false, nil
			}
		}
		return true, nil
	})
	stop()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if most != 1 || strings.Join(started, ",") != "alpha,beta,gamma" {
		t.Fatalf("at most %d releases in flight at once, started in the order %v; want 1, alpha then beta then gamma", most, started)
	}
}
