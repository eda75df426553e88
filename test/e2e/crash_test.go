package e2e

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/rig"
)

// The steps of the crash story: a gate; two more pods (each an old pod
// taken down first, within the availability budget) and a pause long
// enough to crash in; and a last step short of every pod, so that
// finishing the release (the Deployment controller rolling out the rest)
// takes a moment too.
const crashSteps = `
      - replicas: 1
        pause: {}
      - replicas: "60%"
        pause: {duration: 5}
      - replicas: "80%"`

// stepRank orders the states of a step.
var stepRank = map[v1alpha1.StepState]int{
	v1alpha1.StepUpgrade: 1, v1alpha1.StepTrafficRouting: 2, v1alpha1.StepMetricsAnalysis: 3,
	v1alpha1.StepPaused: 4, v1alpha1.StepReady: 5, v1alpha1.StepCompleted: 6,
}

// TestCrashDuringRelease: the controller dies at seven instants of the
// release of a partition-style Deployment, and comes back each time. Its
// status is its only memory: no gate is skipped, no step runs twice, a
// pause keeps its clock, and the availability floor holds throughout.
func TestCrashDuringRelease(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	// The story runs on the world itself: it stops and starts its
	// controller. The Deployment cannot surge, so every batch takes an
	// old pod down first: the floor of 5 - 1 ready pods is tight.
	k := partitionKind
	k.surge = 0
	s := &kindStory{world: w, t: t, k: k, ns: w.NS, steps: crashSteps, extra: "\n      failureThreshold: 1",
		strategy: `{type: RollingUpdate, rollingUpdate: {maxSurge: 0, maxUnavailable: "25%"}}`}
	s.given()
	targets := []int32{1, 3, 4}

	var approved atomic.Bool
	newPods := int32(0) // only the sampler goroutine reads and writes it
	rec := s.record(recordOptions{
		move: func(prev, next *v1alpha1.RolloutStatus) string {
			if next.Phase == v1alpha1.PhaseFailed {
				return "the release failed: " + next.Message
			}
			if !approved.Load() && (next.CurrentStepIndex > 1 || stepRank[next.CurrentStepState] > stepRank[v1alpha1.StepPaused]) {
				return "the gate of step 1 was passed without an approval: " + releasePosition(next)
			}
			if prev.CanaryRevision != next.CanaryRevision || prev.CurrentStepIndex == 0 {
				return ""
			}
			if next.CurrentStepIndex < prev.CurrentStepIndex ||
				next.CurrentStepIndex == prev.CurrentStepIndex && stepRank[next.CurrentStepState] < stepRank[prev.CurrentStepState] {
				return fmt.Sprintf("the release went back from %s to %s", releasePosition(prev), releasePosition(next))
			}
			return ""
		},
		sample: func(pods podCensus) string {
			n := pods.count(webV2)[1]
			defer func() { newPods = max(newPods, n) }()
			if n < newPods {
				return fmt.Sprintf("new pods went down from %d to %d", newPods, n)
			}
			return ""
		},
		consistent: func(st *v1alpha1.RolloutStatus, pods podCensus) string {
			if st.Phase != v1alpha1.PhaseProgressing || st.CurrentStepIndex < 1 || st.CurrentStepState == v1alpha1.StepCompleted {
				return ""
			}
			if n, limit := pods.count(webV2)[1], targets[st.CurrentStepIndex-1]; n > limit {
				return fmt.Sprintf("step %d (%s) runs %d new pods, more than its %d", st.CurrentStepIndex, st.CurrentStepState, n, limit)
			}
			return ""
		},
	})

	var crashes []string
	crash := func(instant string) *v1alpha1.Rollout {
		t.Helper()
		ro := s.Rollout(s.ns, "web")
		pods := s.census("")
		s.stopController()
		t.Logf("crash %s: %s, pods %v", instant, releasePosition(&ro.Status), pods)
		crashes = append(crashes, instant)
		s.startController()
		return ro
	}
	// crashWhen crashes the controller as soon as at holds, unless the
	// release is already past it (missed on a slow machine: logged).
	crashWhen := func(instant string, at, past func(ro *v1alpha1.Rollout, pods podCensus) bool) *v1alpha1.Rollout {
		t.Helper()
		var hit bool
		s.untilEvery(20*time.Millisecond, 60*time.Second, "the release reaches the instant "+instant, func() (bool, string) {
			ro, pods := s.Rollout(s.ns, "web"), s.census("")
			hit = at(ro, pods)
			return hit || past(ro, pods), fmt.Sprintf("%s, pods %v", releasePosition(&ro.Status), pods)
		})
		if !hit {
			t.Logf("missed the instant %s: the release was past it", instant)
			return nil
		}
		return crash(instant)
	}
	at := func(step int32, state v1alpha1.StepState) func(*v1alpha1.Rollout, podCensus) bool {
		return func(ro *v1alpha1.Rollout, _ podCensus) bool {
			return ro.Status.CurrentStepIndex == step && ro.Status.CurrentStepState == state && ro.Status.Phase == v1alpha1.PhaseProgressing
		}
	}
	past := func(step int32, state v1alpha1.StepState) func(*v1alpha1.Rollout, podCensus) bool {
		return func(ro *v1alpha1.Rollout, _ podCensus) bool {
			st := ro.Status
			return st.Phase == v1alpha1.PhaseHealthy && st.CanaryRevision == st.StableRevision && st.CurrentStepIndex > 0 ||
				st.CurrentStepIndex > step || st.CurrentStepIndex == step && stepRank[st.CurrentStepState] > stepRank[state]
		}
	}

	// Right after Flux applies the new image: the webhook has held the
	// Deployment, the controller has not seen it yet.
	s.bump(webV2)
	crash("right after the image bump")

	// While step 1's pod comes up.
	crashWhen("during step 1's scale-up", func(ro *v1alpha1.Rollout, pods podCensus) bool {
		return at(1, v1alpha1.StepUpgrade)(ro, pods) && pods.count(webV2)[0] == 0
	}, past(1, v1alpha1.StepUpgrade))

	// At the gate: after the restart it still holds, with its one pod.
	s.atGate(webV2, webV1)
	ro := crash("at the gate")
	canary := ro.Status.CanaryRevision
	before := s.census("")
	// The restarted controller must not open the gate.
	rig.Holds(t, 2*time.Second, "the gate across a restart", func(ctx context.Context) error {
		if ro = s.Rollout(s.ns, "web"); ro.Status.CurrentStepIndex != 1 || ro.Status.AwaitingApproval == nil {
			return fmt.Errorf("after a restart at the gate: %s", releasePosition(&ro.Status))
		}
		if after := s.census(""); after.names() != before.names() {
			return fmt.Errorf("pods changed at the gate across a restart: %v -> %v", before, after)
		}
		return nil
	})

	// Right after the approval is applied.
	approved.Store(true)
	s.ApplyYAML(s.rolloutYAML(approvalItem(canary, 1)))
	crash("right after the approval")

	// During step 2's pause, whose clock the restart must not reset.
	if ro = crashWhen("during step 2's pause", at(2, v1alpha1.StepPaused), past(2, v1alpha1.StepPaused)); ro != nil {
		started := ro.Status.StepStartedAt
		if now := s.Rollout(s.ns, "web"); now.Status.CurrentStepIndex == 2 && now.Status.CurrentStepState == v1alpha1.StepPaused &&
			!now.Status.StepStartedAt.Equal(started) {
			t.Errorf("the pause of step 2 restarted across a crash: began %v, now %v", started, now.Status.StepStartedAt)
		}
	}

	// While step 3's pod comes up.
	crashWhen("during step 3's scale-up", func(ro *v1alpha1.Rollout, pods podCensus) bool {
		return at(3, v1alpha1.StepUpgrade)(ro, pods) && pods.count(webV2)[0] < targets[2]
	}, past(3, v1alpha1.StepUpgrade))

	// While the Deployment controller rolls out the remaining pods.
	crashWhen("during finalize", func(ro *v1alpha1.Rollout, pods podCensus) bool {
		return ro.Status.CurrentStepState == v1alpha1.StepCompleted && ro.Status.Phase == v1alpha1.PhaseProgressing
	}, func(ro *v1alpha1.Rollout, _ podCensus) bool {
		return ro.Status.Phase == v1alpha1.PhaseHealthy && conditions.IsReady(ro)
	})

	// Then the release ends as if nothing happened.
	ro = s.healthy(webV2, v1alpha1.ReasonSucceeded)
	if ro.Status.StableRevision != canary {
		t.Errorf("stable revision %s, want %s", ro.Status.StableRevision, canary)
	}
	writes := rec.stop()
	if len(crashes) < 5 {
		t.Errorf("the controller crashed at %d instants (%v), want at least 5", len(crashes), crashes)
	}
	prev := int32(0)
	for _, wr := range writes {
		if n := wr.pods.count(webV2)[1]; n < prev {
			t.Errorf("new pods went down from %d to %d at %s", prev, n, releasePosition(&wr.ro.Status))
		} else {
			prev = n
		}
	}
	step3 := rec.first(writes, "step 3 started", func(st *v1alpha1.RolloutStatus) bool { return st.CurrentStepIndex == 3 })
	if got := step3.pods.count(webV2); got != allReady(targets[1]) {
		t.Errorf("when step 2 ended: new pods %v, want %d ready", got, targets[1])
	}
	done := rec.first(writes, "steps completed", func(st *v1alpha1.RolloutStatus) bool {
		return st.CurrentStepState == v1alpha1.StepCompleted
	})
	if got := done.pods.count(webV2); got != allReady(targets[2]) {
		t.Errorf("when step 3 ended: new pods %v, want %d ready", got, targets[2])
	}
	t.Logf("crashed %s", fmt.Sprint(crashes))
}
