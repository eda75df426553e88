package rollout

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/record"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/strategy"
)

// TestRecordKeepsTheRevertOfTheFailedReleaseOnly: status.git.revertBranch
// names the revert of the release that failed; it stays through the
// rollback and after it, and is dropped when the next release starts, so
// that release gets its own revert if it fails too.
func TestRecordKeepsTheRevertOfTheFailedReleaseOnly(t *testing.T) {
	const v1, v2, v3 = "v1hash", "v2hash", "v3hash"
	reverted := v1alpha1.GitStatus{
		StatusBranch: "rollgate/status", StatusCommit: "c0ffee", ObservedCommit: "beef",
		RevertBranch: "rollgate/revert/demo/echoserver/" + v2, RevertPullRequestURL: "https://forge/pr/7",
	}
	status := func(phase v1alpha1.RolloutPhase, stable, canary string, attempt int32) v1alpha1.RolloutStatus {
		return v1alpha1.RolloutStatus{Phase: phase, StableRevision: stable, CanaryRevision: canary, Attempt: attempt}
	}
	failedV2 := status(v1alpha1.PhaseFailed, v1, v2, 0)
	for _, tc := range []struct {
		name       string
		prev, next v1alpha1.RolloutStatus
		keep       bool
	}{
		{"the failed release goes on rolling back", failedV2, failedV2, true},
		{"a retry of the failed revision", failedV2, status(v1alpha1.PhaseProgressing, v1, v2, 1), true},
		{"the revert reached the workload: rolling back", failedV2, status(v1alpha1.PhaseProgressing, v1, v2, 0), true},
		{"rolled back to stable", status(v1alpha1.PhaseProgressing, v1, v2, 0), status(v1alpha1.PhaseHealthy, v1, v1, 0), true},
		{"idle after the rollback", status(v1alpha1.PhaseHealthy, v1, v1, 0), status(v1alpha1.PhaseHealthy, v1, v1, 0), true},
		{"a new release after the rollback", status(v1alpha1.PhaseHealthy, v1, v1, 0), status(v1alpha1.PhaseProgressing, v1, v3, 0), false},
		{"a new revision replaces the failed one", failedV2, status(v1alpha1.PhaseProgressing, v1, v3, 0), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := reverted
			tc.prev.Git = &g
			ro := &v1alpha1.Rollout{Status: tc.prev}
			(&Reconciler{}).applyPlan(&scope{ro: ro, plan: &strategy.Plan{Status: tc.next}})

			got := ro.Status.Git
			if got == nil || got.StatusBranch != reverted.StatusBranch || got.StatusCommit != reverted.StatusCommit ||
				got.ObservedCommit != reverted.ObservedCommit {
				t.Fatalf("the status write-back record must stay: %+v", got)
			}
			kept := got.RevertBranch == reverted.RevertBranch && got.RevertPullRequestURL == reverted.RevertPullRequestURL
			dropped := got.RevertBranch == "" && got.RevertPullRequestURL == ""
			if tc.keep && !kept || !tc.keep && !dropped {
				t.Fatalf("revert record after %s -> %s (canary %s -> %s): %q %q, want kept=%v",
					tc.prev.Phase, tc.next.Phase, tc.prev.CanaryRevision, tc.next.CanaryRevision, got.RevertBranch, got.RevertPullRequestURL, tc.keep)
			}
			if *tc.prev.Git != reverted {
				t.Fatalf("the previous status was changed: %+v", *tc.prev.Git)
			}
		})
	}
}

// TestAStableRevisionChangeIsAMove: a release finishing with Promoted
// traffic changes only its stable revision before the declared routes come
// back; that status must be written before the routers act on it, like any
// other move, so that a restart does not narrow the Service again.
func TestAStableRevisionChangeIsAMove(t *testing.T) {
	promoted := v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseProgressing, StableRevision: "v1", CanaryRevision: "v2",
		CurrentStepIndex: 3, CurrentStepState: v1alpha1.StepCompleted, Traffic: "100%"}
	routesBack := promoted
	routesBack.StableRevision = "v2"
	for _, tc := range []struct {
		name       string
		prev, next v1alpha1.RolloutStatus
		moved      bool
	}{
		{"every pod at the new revision: it is stable now", promoted, routesBack, true},
		{"nothing changed", promoted, promoted, false},
	} {
		ro := &v1alpha1.Rollout{Status: tc.prev}
		if got := (&Reconciler{}).applyPlan(&scope{ro: ro, plan: &strategy.Plan{Status: tc.next}}); got != tc.moved {
			t.Errorf("%s: moved = %v, want %v", tc.name, got, tc.moved)
		}
	}
}

// TestAConflictIsRetriedWithoutConditions: a write refused because the
// object changed since it was read is returned for a retry with backoff,
// but recorded as no failure, so the conditions do not flip to
// "retrying" and back (two status writes) for it; another error is.
func TestAConflictIsRetriedWithoutConditions(t *testing.T) {
	r := &Reconciler{}
	conflict := fmt.Errorf("Deployment web: scale ReplicaSet web-1 to 3: %w",
		apierrors.NewConflict(schema.GroupResource{Group: "apps", Resource: "replicasets"}, "web-1", errors.New("the object has been modified")))
	sc := newScope(&v1alpha1.Rollout{}, time.Now())
	if _, err := r.stallOrRetry(sc, conflict); err == nil || sc.failure != nil {
		t.Errorf("conflict: error %v, failure %+v; want the error back for a retry and no failure", err, sc.failure)
	}
	sc = newScope(&v1alpha1.Rollout{}, time.Now())
	if _, err := r.stallOrRetry(sc, errors.New("connection refused")); err == nil || sc.failure == nil {
		t.Errorf("another error: error %v, failure %+v; want both", err, sc.failure)
	}
}

// TestAPlannedTrafficMoveIsWrittenPending: the status persisted before the
// routers are asked for a step's traffic already says that traffic is
// pending, so a move that waits for them (a canary endpoint not ready
// yet) writes nothing more; their confirmation turns it True.
func TestAPlannedTrafficMoveIsWrittenPending(t *testing.T) {
	ro := &v1alpha1.Rollout{}
	step := strategy.Traffic{Mode: strategy.TrafficCanary, Weight: 20}
	sc := &scope{ro: ro, plan: &strategy.Plan{Traffic: step},
		traffic: trafficAnswer{asked: strategy.Traffic{Mode: strategy.TrafficStable}, sent: true, done: true}}
	markTraffic(sc)
	if c := conditions.Get(ro, v1alpha1.TrafficShiftedCondition); c == nil || c.Reason != v1alpha1.ReasonTrafficPending || c.Message != "moving traffic: 20% of traffic to the canary revision" {
		t.Fatalf("persisted before the routers are asked: TrafficShifted %+v, want pending 20%%", c)
	}
	sc.traffic = trafficAnswer{asked: step, sent: true} // the routers wait for the canary's endpoints
	before := *conditions.Get(ro, v1alpha1.TrafficShiftedCondition)
	markTraffic(sc)
	if c := conditions.Get(ro, v1alpha1.TrafficShiftedCondition); *c != before {
		t.Fatalf("the routers still moving: TrafficShifted changed from %+v to %+v (a second status write)", before, *c)
	}
	sc.traffic.done = true
	markTraffic(sc)
	if c := conditions.Get(ro, v1alpha1.TrafficShiftedCondition); c.Status != metav1True {
		t.Fatalf("the routers confirmed: TrafficShifted %+v, want True", *c)
	}
}

// TestAStateLeftInTheSameReconcileRecordsNoEvent: a Progressing event
// that the next plan of the same reconcile follows with its own is
// dropped (a step's traffic confirmed at once, then its gate); every
// other event is recorded, in order.
func TestAStateLeftInTheSameReconcileRecordsNoEvent(t *testing.T) {
	progressing := func(msg string) strategy.Event {
		return strategy.Event{Type: strategy.EventNormal, Reason: v1alpha1.ReasonProgressing, Message: msg}
	}
	gate := strategy.Event{Type: strategy.EventNormal, Reason: v1alpha1.ReasonWaitingForApproval, Message: "gate"}
	warning := strategy.Event{Type: strategy.EventWarning, Reason: v1alpha1.ReasonProgressing, Message: "warning"}
	for _, tc := range []struct {
		name   string
		queued []strategy.Event
		want   []string
	}{
		{"traffic confirmed, then the gate", []strategy.Event{progressing("routers"), gate}, []string{"Normal WaitingForApproval gate"}},
		{"two states left at once", []strategy.Event{progressing("pods"), progressing("routers"), progressing("finishing")},
			[]string{"Normal Progressing finishing"}},
		{"the gate, then a move", []strategy.Event{gate, progressing("step 2")}, []string{"Normal WaitingForApproval gate", "Normal Progressing step 2"}},
		{"a warning stays", []strategy.Event{warning, gate}, []string{"Warning Progressing warning", "Normal WaitingForApproval gate"}},
		{"no event", []strategy.Event{{}, progressing("pods"), {}}, []string{"Normal Progressing pods"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := record.NewFakeRecorder(10)
			sc := &scope{ro: &v1alpha1.Rollout{}}
			for _, e := range tc.queued {
				sc.queueEvent(e)
			}
			(&Reconciler{Recorder: rec}).recordEvents(sc)
			close(rec.Events)
			var got []string
			for e := range rec.Events {
				got = append(got, e)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("recorded %q, want %q", got, tc.want)
			}
		})
	}
}
