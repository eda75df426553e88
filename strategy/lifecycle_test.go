package strategy

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/strategy/verdict"
)

const (
	cTrue  = metav1.ConditionTrue
	cFalse = metav1.ConditionFalse
	// cAbsent: the condition is removed (Ready while a release is under
	// way, so that kstatus reads Current and kubectl wait still waits).
	cAbsent metav1.ConditionStatus = ""
)

func idleAt(rev string) *v1alpha1.RolloutStatus {
	return &v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseHealthy, StableRevision: rev, CanaryRevision: rev}
}

func TestFirstObservationIsIdle(t *testing.T) {
	p := decide(t, echoSpec(), &v1alpha1.RolloutStatus{}, atRevision(3, "v1"), t0)
	if p.Status.Phase != v1alpha1.PhaseHealthy || p.Status.StableRevision != "v1" || p.Workload != WorkloadKeep {
		t.Errorf("phase %s stable %q workload %s, want Healthy v1 Keep", p.Status.Phase, p.Status.StableRevision, p.Workload)
	}
	wantConditions(t, p, cTrue, cFalse, cFalse, v1alpha1.ReasonIdle)
	if p.Event.Reason != v1alpha1.ReasonIdle || p.Traffic.Mode != TrafficOriginal {
		t.Errorf("event %+v traffic %+v, want an Idle event and Original traffic", p.Event, p.Traffic)
	}
	// A workload frozen although its template is stable is handed back.
	obs := atRevision(3, "v1")
	obs.Held = true
	if p := decide(t, echoSpec(), idleAt("v1"), obs, t0); p.Workload != WorkloadRelease {
		t.Errorf("workload = %s, want Release", p.Workload)
	}
}

func TestNewReleaseStartsAtStepOne(t *testing.T) {
	for name, st := range map[string]*v1alpha1.RolloutStatus{
		"after an idle status":              idleAt("v1"),
		"with no status (webhook recorded)": {},
	} {
		t.Run(name, func(t *testing.T) {
			p := decide(t, echoSpec(), st, observed(10, 0), t0)
			s := p.Status
			if s.CanaryRevision != "v2" || s.StableRevision != "v1" || s.Attempt != 1 || s.StepCount != 3 ||
				whereOf(&s) != (where{v1alpha1.PhaseProgressing, 1, v1alpha1.StepUpgrade}) {
				t.Fatalf("status = %+v, want v2 over v1, attempt 1, step 1/3 StepUpgrade", s)
			}
			if !s.StepStartedAt.Time.Equal(t0) || !s.ReleaseStartedAt.Time.Equal(t0) {
				t.Errorf("clocks = %v %v, want %v", s.StepStartedAt, s.ReleaseStartedAt, t0)
			}
			if p.Workload != WorkloadScale || p.CanaryReplicas != 1 || p.Traffic.Mode != TrafficStable {
				t.Errorf("workload %s %d traffic %+v, want Scale 1 with all traffic on stable", p.Workload, p.CanaryReplicas, p.Traffic)
			}
			if p.RequeueAfter != defaultProgressDeadline {
				t.Errorf("RequeueAfter = %s, want the deadline", p.RequeueAfter)
			}
			wantConditions(t, p, cAbsent, cFalse, cFalse, v1alpha1.ReasonProgressing)
			if p.Conditions.Progressing.Status != cTrue || p.Event.Reason != v1alpha1.ReasonProgressing {
				t.Errorf("Progressing %s event %+v", p.Conditions.Progressing.Status, p.Event)
			}
		})
	}
}

func TestContinuousReleaseRestartsFromStepOne(t *testing.T) {
	obs := observed(10, 4)
	obs.UpdateRevision = "v3"
	obs.Pods["v3"] = PodCounts{}
	p := decide(t, echoSpec(), releasing(2, v1alpha1.StepPaused, -time.Minute), obs, t0)
	s := p.Status
	if s.CanaryRevision != "v3" || s.StableRevision != "v1" || s.Attempt != 1 || s.CurrentStepIndex != 1 ||
		s.CurrentStepState != v1alpha1.StepUpgrade {
		t.Fatalf("status = %+v, want v3 over the original stable v1 at step 1", s)
	}
	if p.CanaryReplicas != 1 || p.Traffic.Mode != TrafficStable {
		t.Errorf("canary replicas %d traffic %+v, want 1 and all traffic on stable", p.CanaryReplicas, p.Traffic)
	}
}

func TestRollbackByTemplate(t *testing.T) {
	spec := echoSpec()
	obs := observed(10, 4)
	obs.UpdateRevision, obs.StableRevision = "v1", ""
	st := releasing(2, v1alpha1.StepPaused, -time.Minute)

	// 1: traffic to stable first; pods stay.
	p := decide(t, spec, st, obs, t0)
	if w := whereOf(&p.Status); w.State != v1alpha1.StepRollingBack || w.Phase != v1alpha1.PhaseProgressing {
		t.Fatalf("at %+v, want RollingBack/Progressing", w)
	}
	if p.Traffic.Mode != TrafficStable || p.Workload != WorkloadKeep || p.Event.Type != EventWarning {
		t.Fatalf("traffic %+v workload %s event %+v, want Stable, Keep, a warning", p.Traffic, p.Workload, p.Event)
	}
	// 2: routers confirm: the workload is released to its (stable) template.
	p = decide(t, spec, persist(p), obs, at(time.Second))
	if p.Workload != WorkloadRelease || p.Status.CanaryRevision != "v2" || !p.Event.IsZero() {
		t.Fatalf("workload %s canary %s event %+v, want Release while v2 pods remain", p.Workload, p.Status.CanaryRevision, p.Event)
	}
	// 3: all pods are back at v1: the release is over, routes restored next.
	back := atRevision(10, "v1")
	p = decide(t, spec, persist(p), back, at(time.Minute))
	if p.Status.CanaryRevision != "v1" || p.Traffic.Mode != TrafficOriginal || p.Status.Phase != v1alpha1.PhaseProgressing {
		t.Fatalf("canary %s traffic %+v phase %s, want v1, Original, still Progressing", p.Status.CanaryRevision, p.Traffic, p.Status.Phase)
	}
	// 4: routes restored: Healthy, RolledBack.
	p = decide(t, spec, persist(p), back, at(time.Minute+time.Second))
	if p.Status.Phase != v1alpha1.PhaseHealthy || p.Event.Reason != v1alpha1.ReasonRolledBack {
		t.Fatalf("phase %s event %+v, want Healthy with a RolledBack event", p.Status.Phase, p.Event)
	}
	wantConditions(t, p, cTrue, cFalse, cFalse, v1alpha1.ReasonRolledBack)
	// The step state tells how the release ended (kubectl get, rollgate
	// get and the Git status file all show it).
	if w := whereOf(&p.Status); w.State != v1alpha1.StepRolledBack || w.Index != 2 {
		t.Fatalf("at %+v, want step 2 RolledBack", w)
	}
	// 5: it stays that way.
	p = decide(t, spec, persist(p), back, at(time.Hour))
	if !p.Event.IsZero() || p.Conditions.Ready.Reason != v1alpha1.ReasonRolledBack || p.Status.CurrentStepState != v1alpha1.StepRolledBack {
		t.Errorf("event %+v reason %s state %s, want no event and RolledBack", p.Event, p.Conditions.Ready.Reason, p.Status.CurrentStepState)
	}
}

func TestRevertInGitEndsAFailedRelease(t *testing.T) {
	obs := atRevision(10, "v1")
	obs.Held = true
	p := decide(t, echoSpec(), failedStatus(v1alpha1.ReasonAborted), obs, t0)
	if p.Status.Phase != v1alpha1.PhaseProgressing || p.Workload != WorkloadRelease {
		t.Fatalf("phase %s workload %s, want Progressing and Release", p.Status.Phase, p.Workload)
	}
	wantConditions(t, p, cFalse, cTrue, cFalse, v1alpha1.ReasonRollingBack)
}

func TestPromote(t *testing.T) {
	spec := echoSpec()
	spec.Promote = &v1alpha1.RevisionRequest{Revision: "v2"}
	p := decide(t, spec, releasing(1, v1alpha1.StepPaused, -time.Hour), observed(10, 1), t0)
	if p.Status.CurrentStepState != v1alpha1.StepCompleted || p.Traffic.Mode != TrafficOriginal || p.Workload != WorkloadKeep {
		t.Fatalf("at %+v traffic %+v workload %s, want Completed, Original traffic first, Keep", whereOf(&p.Status), p.Traffic, p.Workload)
	}
	p = decide(t, spec, persist(p), observed(10, 1), at(time.Second))
	if p.Workload != WorkloadRelease || p.Status.Phase != v1alpha1.PhaseProgressing {
		t.Fatalf("workload %s phase %s, want Release while the workload finishes", p.Workload, p.Status.Phase)
	}
	// Old pods still shutting down may still answer requests: the release
	// is not over until they are gone.
	leaving := atRevision(10, "v2")
	leaving.Leaving = 2
	p = decide(t, spec, persist(p), leaving, at(30*time.Second))
	if p.Status.Phase != v1alpha1.PhaseProgressing || !strings.Contains(p.Status.Message, "the old ones shut down") {
		t.Fatalf("phase %s message %q, want Progressing while 2 old pods shut down", p.Status.Phase, p.Status.Message)
	}
	done := atRevision(10, "v2")
	p = decide(t, spec, persist(p), done, at(time.Minute))
	if p.Status.Phase != v1alpha1.PhaseHealthy || p.Status.StableRevision != "v2" {
		t.Fatalf("phase %s stable %s, want Healthy at v2", p.Status.Phase, p.Status.StableRevision)
	}
	wantConditions(t, p, cTrue, cFalse, cFalse, v1alpha1.ReasonSucceeded)

	spec.Promote.Revision = "v3"
	p = decide(t, spec, releasing(1, v1alpha1.StepPaused, -time.Hour), observed(10, 1), t0)
	if p.Status.CurrentStepState != v1alpha1.StepPaused {
		t.Errorf("a promote of another revision moved the release to %s", p.Status.CurrentStepState)
	}
}

func TestAbortRollsBack(t *testing.T) {
	spec := echoSpec()
	spec.Abort = &v1alpha1.RevisionRequest{Revision: "v2", Reason: "latency too high"}
	obs := observed(10, 4)
	p := decide(t, spec, releasing(2, v1alpha1.StepPaused, -time.Minute), obs, t0)
	if p.Status.Phase != v1alpha1.PhaseFailed || p.Status.CurrentStepState != v1alpha1.StepRollingBack {
		t.Fatalf("at %+v, want Failed/RollingBack", whereOf(&p.Status))
	}
	if !strings.Contains(p.Status.Message, "latency too high") || p.Event.Reason != v1alpha1.ReasonAborted || p.Event.Type != EventWarning {
		t.Errorf("message %q event %+v", p.Status.Message, p.Event)
	}
	if p.Traffic.Mode != TrafficStable || p.Workload != WorkloadKeep {
		t.Errorf("traffic %+v workload %s, want Stable first and pods kept", p.Traffic, p.Workload)
	}
	wantConditions(t, p, cFalse, cTrue, cTrue, v1alpha1.ReasonAborted)

	// Traffic confirmed: the canary pods go.
	p = decide(t, spec, persist(p), obs, at(time.Second))
	if p.Workload != WorkloadRollback || p.CanaryReplicas != 0 || p.Conditions.Reconciling.Status != cTrue {
		t.Fatalf("workload %s %d reconciling %s, want Rollback 0 under way", p.Workload, p.CanaryReplicas, p.Conditions.Reconciling.Status)
	}
	// Canary pods gone: stalled, no longer reconciling, reason kept.
	p = decide(t, spec, persist(p), observed(10, 0), at(time.Minute))
	wantConditions(t, p, cFalse, cFalse, cTrue, v1alpha1.ReasonAborted)
	if p.Conditions.Stalled.Reason != v1alpha1.ReasonAborted || p.Traffic.Mode != TrafficStable {
		t.Errorf("stalled reason %s traffic %+v, want Aborted and traffic kept on stable", p.Conditions.Stalled.Reason, p.Traffic)
	}

	spec.Abort.Revision = "v3"
	if p := decide(t, spec, releasing(2, v1alpha1.StepPaused, -time.Minute), obs, t0); p.Status.Phase == v1alpha1.PhaseFailed {
		t.Errorf("an abort of another revision failed the release")
	}
}

func TestFailedReleaseDoesNotAdvance(t *testing.T) {
	spec := echoSpec()
	spec.Promote = &v1alpha1.RevisionRequest{Revision: "v2"}
	obs := observed(10, 0)
	obs.Approvals = []v1alpha1.Approval{approval("v2", 1), approval("v2", 2), approval("v2", 3)}
	obs.StepAnalysis = AnalysisResult{Phase: verdict.PhaseSuccessful}
	st := failedStatus(v1alpha1.ReasonAnalysisFailed)
	p := decide(t, spec, st, obs, at(time.Hour))
	if whereOf(&p.Status) != whereOf(st) || p.Workload != WorkloadRollback {
		t.Errorf("at %+v workload %s, want to stay failed and rolled back", whereOf(&p.Status), p.Workload)
	}
	if p.Conditions.Stalled.Reason != v1alpha1.ReasonAnalysisFailed || !p.Event.IsZero() {
		t.Errorf("stalled reason %s event %+v", p.Conditions.Stalled.Reason, p.Event)
	}
}

func TestRetry(t *testing.T) {
	tests := []struct {
		name    string
		retry   *v1alpha1.RetryRequest
		abort   bool
		paused  bool
		restart bool
	}{
		{"next attempt", &v1alpha1.RetryRequest{Revision: "v2", Attempt: 2}, false, false, true},
		{"attempt already run", &v1alpha1.RetryRequest{Revision: "v2", Attempt: 1}, false, false, false},
		{"another revision", &v1alpha1.RetryRequest{Revision: "v3", Attempt: 2}, false, false, false},
		{"abort still names the revision", &v1alpha1.RetryRequest{Revision: "v2", Attempt: 2}, true, false, false},
		{"paused", &v1alpha1.RetryRequest{Revision: "v2", Attempt: 2}, false, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := echoSpec()
			spec.Retry = tt.retry
			spec.Strategy.Paused = tt.paused
			if tt.abort {
				spec.Abort = &v1alpha1.RevisionRequest{Revision: "v2"}
			}
			p := decide(t, spec, failedStatus(v1alpha1.ReasonAnalysisFailed), observed(10, 0), t0)
			restarted := p.Status.Phase == v1alpha1.PhaseProgressing
			if restarted != tt.restart {
				t.Fatalf("restarted = %v, want %v (at %+v)", restarted, tt.restart, whereOf(&p.Status))
			}
			if restarted && (p.Status.Attempt != 2 || p.Status.CurrentStepIndex != 1 || p.Status.CurrentStepState != v1alpha1.StepUpgrade ||
				p.Workload != WorkloadScale || p.CanaryReplicas != 1) {
				t.Errorf("status %+v workload %s %d, want attempt 2 at step 1 with 1 pod", whereOf(&p.Status), p.Workload, p.CanaryReplicas)
			}
		})
	}
}

// TestRetryWaitsAtEveryGateAgain: the approvals of the failed attempt stay
// in spec.approvals, yet the retried release stops at step 1's gate until
// an approval of attempt 2 arrives.
func TestRetryWaitsAtEveryGateAgain(t *testing.T) {
	spec := echoSpec()
	spec.Retry = &v1alpha1.RetryRequest{Revision: "v2", Attempt: 2}
	w := newWorld(t, spec)
	w.preApproved = true // no one approves: the test does
	w.canary = 0
	w.routes = Traffic{Mode: TrafficStable}
	w.approvals = []v1alpha1.Approval{approval("v2", 1), approval("v2", 2), {Revision: "v2", Step: 1, Attempt: 1}}
	st := failedStatus(v1alpha1.ReasonAborted)
	gate := where{v1alpha1.PhaseProgressing, 1, v1alpha1.StepPaused}
	for n := 0; n < 20 && whereOf(st) != gate; n++ {
		p := w.reconcile(st)
		w.carryOut(p)
		w.tick(p)
		st = persist(p)
	}
	if whereOf(st) != gate || st.Attempt != 2 {
		t.Fatalf("at %+v attempt %d, want attempt 2 waiting at step 1's gate", whereOf(st), st.Attempt)
	}
	if a := st.AwaitingApproval; a == nil || a.Revision != "v2" || a.Attempt != 2 || a.Step != 1 {
		t.Fatalf("awaitingApproval = %+v, want v2 attempt 2 step 1", a)
	}
	for range 5 {
		p := w.reconcile(st)
		w.carryOut(p)
		w.tick(p)
		if st = persist(p); whereOf(st) != gate {
			t.Fatalf("at %+v: the approvals of attempt 1 opened the gate of attempt 2", whereOf(st))
		}
	}

	w.approvals = append(w.approvals, v1alpha1.Approval{Revision: "v2", Step: 1, Attempt: 2, ApprovedBy: "bob"})
	p := w.reconcile(st)
	if w := whereOf(&p.Status); w.Index != 2 || p.Status.AwaitingApproval != nil {
		t.Fatalf("at %+v awaiting %+v, want step 2 once attempt 2 is approved", w, p.Status.AwaitingApproval)
	}
}

func TestPausedHoldsInPlace(t *testing.T) {
	spec := echoSpec()
	spec.Strategy.Paused = true
	// Far beyond the deadline, pods not ready: held, not failed.
	st := releasing(2, v1alpha1.StepUpgrade, -time.Hour)
	p := decide(t, spec, st, observed(10, 1), t0)
	if p.Status.Phase != v1alpha1.PhasePaused || p.Status.CurrentStepIndex != 2 || p.Status.CurrentStepState != v1alpha1.StepUpgrade {
		t.Fatalf("at %+v, want Paused at step 2 StepUpgrade", whereOf(&p.Status))
	}
	if p.Workload != WorkloadKeep || !p.Traffic.Equal(Traffic{Mode: TrafficCanary, Weight: 5}) || p.RequeueAfter != 0 {
		t.Errorf("workload %s traffic %+v requeue %s, want nothing to change", p.Workload, p.Traffic, p.RequeueAfter)
	}
	wantConditions(t, p, cAbsent, cFalse, cFalse, v1alpha1.ReasonPaused)

	// Resumed: the deadline counts from the resume.
	spec.Strategy.Paused = false
	p = decide(t, spec, persist(p), observed(10, 1), at(time.Minute))
	if p.Status.Phase != v1alpha1.PhaseProgressing || !p.Status.StepStartedAt.Time.Equal(at(time.Minute)) ||
		p.RequeueAfter != defaultProgressDeadline {
		t.Errorf("phase %s started %v requeue %s, want Progressing with the clock restarted", p.Status.Phase, p.Status.StepStartedAt, p.RequeueAfter)
	}

	// Gates stay closed while paused, even when approved.
	spec.Strategy.Paused = true
	obs := observed(10, 1)
	obs.Approvals = []v1alpha1.Approval{approval("v2", 1)}
	if p := decide(t, spec, releasing(1, v1alpha1.StepPaused, 0), obs, t0); p.Status.CurrentStepIndex != 1 {
		t.Errorf("a paused release advanced to step %d", p.Status.CurrentStepIndex)
	}
	// Abort is not held.
	spec.Abort = &v1alpha1.RevisionRequest{Revision: "v2"}
	if p := decide(t, spec, releasing(1, v1alpha1.StepPaused, 0), obs, t0); p.Status.Phase != v1alpha1.PhaseFailed {
		t.Errorf("phase %s, want an abort to act while paused", p.Status.Phase)
	}
}

func TestPausedBeforeARelease(t *testing.T) {
	spec := echoSpec()
	spec.Strategy.Paused = true
	p := decide(t, spec, idleAt("v1"), observed(10, 0), t0)
	if p.Status.Phase != v1alpha1.PhasePaused || p.Status.CanaryRevision != "v1" || p.Workload != WorkloadKeep {
		t.Errorf("phase %s canary %s workload %s, want the new revision to wait", p.Status.Phase, p.Status.CanaryRevision, p.Workload)
	}
	wantConditions(t, p, cAbsent, cFalse, cFalse, v1alpha1.ReasonPaused)
	p = decide(t, spec, idleAt("v1"), atRevision(10, "v1"), t0)
	wantConditions(t, p, cTrue, cFalse, cFalse, v1alpha1.ReasonPaused)
}

func TestDisabledAndDeletedHandControlBack(t *testing.T) {
	for _, deleting := range []bool{false, true} {
		spec := echoSpec()
		spec.Disabled = !deleting
		spec.OnDelete = v1alpha1.OnDeleteHandBack
		obs := observed(10, 4)
		obs.Deleting = deleting
		p := decide(t, spec, releasing(2, v1alpha1.StepPaused, -time.Minute), obs, t0)
		if p.Status.Phase != v1alpha1.PhaseDisabled || p.Status.CurrentStepIndex != 0 || p.Traffic.Mode != TrafficOriginal ||
			p.Workload != WorkloadKeep || p.Released {
			t.Fatalf("deleting=%v: phase %s step %d traffic %+v workload %s released %v; want traffic restored first",
				deleting, p.Status.Phase, p.Status.CurrentStepIndex, p.Traffic, p.Workload, p.Released)
		}
		wantConditions(t, p, cFalse, cTrue, cFalse, v1alpha1.ReasonDisabled)
		p = decide(t, spec, persist(p), obs, at(time.Second))
		if p.Workload != WorkloadRelease || p.Released {
			t.Fatalf("deleting=%v: workload %s released %v, want Release under way", deleting, p.Workload, p.Released)
		}
		obs.Held = false
		p = decide(t, spec, persist(p), obs, at(2*time.Second))
		if !p.Released || p.Status.StableRevision != "v2" {
			t.Fatalf("deleting=%v: released %v stable %s, want released at the declared v2", deleting, p.Released, p.Status.StableRevision)
		}
		wantConditions(t, p, cTrue, cFalse, cFalse, v1alpha1.ReasonDisabled)
	}
}

// TestDeletedMidReleaseLeavesTheWorkloadHeld: a Rollout deleted
// mid-release with spec.onDelete unset (Hold) restores the declared
// traffic, then leaves the workload held as it stands, never handing it
// back (which would roll the unapproved revision to every pod); once the
// workload carries the mark, the Rollout lets go of it.
func TestDeletedMidReleaseLeavesTheWorkloadHeld(t *testing.T) {
	spec := echoSpec()
	obs := observed(10, 1)
	obs.Deleting = true
	p := decide(t, spec, releasing(1, v1alpha1.StepPaused, -time.Minute), obs, t0)
	if p.Traffic.Mode != TrafficOriginal || p.Workload != WorkloadKeep || p.Released {
		t.Fatalf("traffic %+v workload %s released %v; want the declared traffic first, no pod moving", p.Traffic, p.Workload, p.Released)
	}
	for i := range 2 {
		p = decide(t, spec, persist(p), obs, at(time.Duration(i+1)*time.Second))
		if p.Workload != WorkloadLeaveHeld || p.Released {
			t.Fatalf("workload %s released %v; want the workload marked to stay held", p.Workload, p.Released)
		}
		if !strings.Contains(p.Status.Message, "stays held") {
			t.Errorf("message %q does not say the workload stays held", p.Status.Message)
		}
	}
	obs.HeldWithoutRollout = true
	p = decide(t, spec, persist(p), obs, at(3*time.Second))
	if p.Workload != WorkloadLeaveHeld || !p.Released {
		t.Fatalf("workload %s released %v; want the Rollout to let go with the workload left held", p.Workload, p.Released)
	}

	// Not mid-release (the workload runs its stable revision), a deleted
	// Rollout hands the workload back, Hold or not.
	idle := atRevision(10, "v1")
	idle.Deleting = true
	p = decide(t, spec, idleAt("v1"), idle, t0)
	for range 3 {
		if p.Workload == WorkloadLeaveHeld {
			t.Fatalf("an idle workload is left held; want it handed back")
		}
		if p.Released {
			break
		}
		p = decide(t, spec, persist(p), idle, at(time.Second))
	}
	if !p.Released {
		t.Fatalf("workload %s released %v: an idle Rollout's deletion does not finish", p.Workload, p.Released)
	}
}

// TestReleaseCompletes: a release whose last step sends all traffic to the
// canary finishes with Promoted traffic (the stable Service narrowed to the
// new revision), releases the workload only once the routers confirmed it,
// and restores the declared routes after every pod runs the new revision:
// requests never go back to an old pod.
func TestReleaseCompletes(t *testing.T) {
	spec := echoSpec()
	promoted := Traffic{Mode: TrafficPromoted, Weight: 100}
	p := decide(t, spec, releasing(3, v1alpha1.StepTrafficRouting, 0), observed(10, 10), at(time.Second))
	if p.Status.CurrentStepState != v1alpha1.StepCompleted || !p.Traffic.Equal(promoted) || p.Workload != WorkloadKeep {
		t.Fatalf("at %+v traffic %+v workload %s, want Completed with Promoted traffic first", whereOf(&p.Status), p.Traffic, p.Workload)
	}
	p = decide(t, spec, persist(p), observed(10, 10), at(2*time.Second))
	if p.Workload != WorkloadRelease || p.Status.Phase != v1alpha1.PhaseProgressing || !p.Traffic.Equal(promoted) {
		t.Fatalf("workload %s phase %s traffic %+v, want Release with Promoted traffic", p.Workload, p.Status.Phase, p.Traffic)
	}
	if p.Status.CanaryWeight != 100 || p.Status.Traffic != "100%" {
		t.Errorf("status traffic %q weight %d once promoted, want 100%%", p.Status.Traffic, p.Status.CanaryWeight)
	}
	// Old pods still run: the traffic stays Promoted.
	p = decide(t, spec, persist(p), observed(10, 10), at(3*time.Second))
	if p.Workload != WorkloadRelease || !p.Traffic.Equal(promoted) || p.Status.StableRevision != "v1" {
		t.Fatalf("workload %s traffic %+v stable %s, want Release, Promoted, v1 still stable", p.Workload, p.Traffic, p.Status.StableRevision)
	}
	// Every pod runs v2: it becomes stable, the declared routes come back,
	// and only then is the release done.
	done := atRevision(10, "v2")
	p = decide(t, spec, persist(p), done, at(time.Minute))
	if p.Status.Phase != v1alpha1.PhaseProgressing || p.Status.StableRevision != "v2" || p.Traffic.Mode != TrafficOriginal ||
		p.Workload != WorkloadRelease {
		t.Fatalf("phase %s stable %s traffic %+v workload %s, want Progressing at v2 restoring the routes",
			p.Status.Phase, p.Status.StableRevision, p.Traffic, p.Workload)
	}
	routesBack := done
	routesBack.TrafficDone = false
	if p = decide(t, spec, persist(p), routesBack, at(time.Minute+time.Second)); p.Status.Phase != v1alpha1.PhaseProgressing {
		t.Fatalf("phase %s before the routers restored the routes, want Progressing", p.Status.Phase)
	}
	p = decide(t, spec, persist(p), done, at(time.Minute+2*time.Second))
	if p.Status.Phase != v1alpha1.PhaseHealthy || p.Status.StableRevision != "v2" || p.Event.Reason != v1alpha1.ReasonSucceeded {
		t.Fatalf("phase %s stable %s event %+v, want Healthy at v2 with a Succeeded event", p.Status.Phase, p.Status.StableRevision, p.Event)
	}
	p = decide(t, spec, persist(p), done, at(time.Hour))
	if !p.Event.IsZero() || p.Status.CurrentStepIndex != 3 || p.Status.CurrentStepState != v1alpha1.StepCompleted {
		t.Errorf("event %+v at %+v, want the record of the release kept and no event", p.Event, whereOf(&p.Status))
	}
	wantConditions(t, p, cTrue, cFalse, cFalse, v1alpha1.ReasonSucceeded)
}

// TestReleaseCompletesBelowAllTraffic: a release promoted (or ending) at a
// step that does not send all traffic to the canary restores the declared
// routes first, then releases the workload, and is Healthy once every pod
// runs the new revision.
func TestReleaseCompletesBelowAllTraffic(t *testing.T) {
	spec := echoSpec()
	spec.Promote = &v1alpha1.RevisionRequest{Revision: "v2"}
	p := decide(t, spec, releasing(2, v1alpha1.StepPaused, -time.Minute), observed(10, 4), at(time.Second))
	if p.Status.CurrentStepState != v1alpha1.StepCompleted || p.Traffic.Mode != TrafficOriginal || p.Workload != WorkloadKeep {
		t.Fatalf("at %+v traffic %+v workload %s, want Completed restoring traffic first", whereOf(&p.Status), p.Traffic, p.Workload)
	}
	p = decide(t, spec, persist(p), observed(10, 4), at(2*time.Second))
	if p.Workload != WorkloadRelease || p.Status.Phase != v1alpha1.PhaseProgressing {
		t.Fatalf("workload %s phase %s, want Release", p.Workload, p.Status.Phase)
	}
	p = decide(t, spec, persist(p), atRevision(10, "v2"), at(time.Minute))
	if p.Status.Phase != v1alpha1.PhaseHealthy || p.Status.StableRevision != "v2" || p.Event.Reason != v1alpha1.ReasonSucceeded {
		t.Fatalf("phase %s stable %s event %+v, want Healthy at v2 with a Succeeded event", p.Status.Phase, p.Status.StableRevision, p.Event)
	}
}

func TestStepsChangedMidRelease(t *testing.T) {
	st := releasing(5, v1alpha1.StepPaused, -time.Minute)
	st.StepCount = 5
	p := decide(t, echoSpec(), st, observed(10, 6), t0)
	if w := whereOf(&p.Status); w.Index != 3 || w.State != v1alpha1.StepUpgrade || p.Status.StepCount != 3 {
		t.Errorf("at %+v of %d, want step 3/3 StepUpgrade", w, p.Status.StepCount)
	}
	longer := routedSpec(step("5%", num(1), gatePause()), step("10%", num(2), gatePause()), step("20%", num(3), nil),
		step("50%", num(5), nil), step("100%", pct("100%"), nil))
	p = decide(t, longer, releasing(2, v1alpha1.StepPaused, -time.Minute), observed(10, 2), t0)
	if w := whereOf(&p.Status); w.Index != 2 || w.State != v1alpha1.StepPaused || p.Status.StepCount != 5 {
		t.Errorf("at %+v of %d, want to stay at the gate of step 2/5", w, p.Status.StepCount)
	}
}

func TestScaleChangeMidRelease(t *testing.T) {
	tests := []struct {
		name           string
		replicas, have int32
		want           int32
	}{
		{"scaled up: 40% re-resolves", 20, 4, 8},
		{"scaled down: 40% re-resolves, the extra canary pods go", 5, 4, 2},
		{"scaled below the canary pods", 3, 4, 2},
		{"same size", 10, 4, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := decide(t, echoSpec(), releasing(2, v1alpha1.StepPaused, -time.Minute), observed(tt.replicas, tt.have), t0)
			if p.Workload != WorkloadScale || p.CanaryReplicas != tt.want {
				t.Errorf("workload %s %d, want Scale %d", p.Workload, p.CanaryReplicas, tt.want)
			}
		})
	}
}

func TestInvalidSpecAtRuntime(t *testing.T) {
	spec := routedSpec(step("5%", num(5), gatePause()), step("10%", pct("20%"), nil))
	st := releasing(1, v1alpha1.StepPaused, -time.Minute)
	p, err := Decide(spec, st, observed(10, 5), t0)
	var se *SpecError
	if !errors.Is(err, ErrInvalidSpec) || !errors.As(err, &se) || se.Field != "spec.strategy.canary.steps[1].replicas" {
		t.Fatalf("err = %v, want a SpecError on steps[1].replicas", err)
	}
	if p.Workload != WorkloadKeep || whereOf(&p.Status) != whereOf(st) || !p.Traffic.Equal(Traffic{Mode: TrafficCanary, Weight: 5}) {
		t.Errorf("plan %s at %+v traffic %+v, want everything held", p.Workload, whereOf(&p.Status), p.Traffic)
	}
	wantConditions(t, p, cFalse, cFalse, cTrue, v1alpha1.ReasonInvalidSpec)
	if p.Event.Type != EventWarning || !strings.Contains(p.Status.Message, "steps[1].replicas") {
		t.Errorf("event %+v message %q", p.Event, p.Status.Message)
	}
	if p2, _ := Decide(spec, persist(p), observed(10, 5), t0); !p2.Event.IsZero() {
		t.Errorf("repeated invalid spec event %+v", p2.Event)
	}
	spec.Abort = &v1alpha1.RevisionRequest{Revision: "v2"}
	if p, err := Decide(spec, st, observed(10, 5), t0); err != nil || p.Status.Phase != v1alpha1.PhaseFailed {
		t.Errorf("abort with an invalid spec: phase %s err %v, want Failed without error", p.Status.Phase, err)
	}
}

func TestDecideDoesNotModifyItsArguments(t *testing.T) {
	spec := echoSpec()
	st := releasing(1, v1alpha1.StepPaused, -time.Minute)
	st.AwaitingApproval = &v1alpha1.ApprovalRequest{Revision: "v2", Step: 1, Reason: "Manual"}
	obs := observed(10, 1)
	obs.Approvals = []v1alpha1.Approval{approval("v2", 1)}
	specCopy, stCopy := spec.DeepCopy(), st.DeepCopy()
	p := decide(t, spec, st, obs, t0)
	if !reflect.DeepEqual(spec, specCopy) || !reflect.DeepEqual(st, stCopy) {
		t.Errorf("Decide modified its arguments")
	}
	p.Status.Message = "changed"
	if st.Message == "changed" {
		t.Errorf("the plan's status aliases the input")
	}
}

// While a step's pods come up, or the last old pods go, only the count
// fields change: a message that moved with every pod would rewrite every
// condition at every pod event (an API write each, at thousands of
// Rollouts).
func TestProgressMovesCountsNotMessages(t *testing.T) {
	spec := echoSpec()
	at2 := releasing(2, v1alpha1.StepUpgrade, -time.Second) // step 2: 40% of 10 = 4 new pods
	var first Plan
	for i, canary := range []int32{1, 2, 3} {
		obs := observed(10, canary)
		c := obs.Pods["v2"]
		c.Ready = canary - 1 // one of them not ready yet
		obs.Pods["v2"] = c
		p := decide(t, spec, at2, obs, at(0))
		if p.Status.CurrentStepState != v1alpha1.StepUpgrade || p.Status.CanaryReadyReplicas != canary-1 {
			t.Fatalf("%d new pods: state %s, %d ready reported, want StepUpgrade and %d", canary, p.Status.CurrentStepState, p.Status.CanaryReadyReplicas, canary-1)
		}
		if i == 0 {
			first = p
			if !strings.Contains(p.Status.Message, "waiting for 4 new pods of v2") {
				t.Errorf("message %q, want it to say what the step waits for", p.Status.Message)
			}
			continue
		}
		if p.Status.Message != first.Status.Message || p.Conditions != first.Conditions {
			t.Errorf("%d new pods: message %q and conditions %+v, want those of 1 new pod: %q", canary, p.Status.Message, p.Conditions, first.Status.Message)
		}
	}

	// Finishing: the old pods shutting down, 3 then 1.
	spec.Promote = &v1alpha1.RevisionRequest{Revision: "v2"}
	done := releasing(3, v1alpha1.StepCompleted, -time.Second)
	var msg string
	for _, left := range []int32{3, 1} {
		obs := atRevision(10, "v2")
		obs.Leaving = left
		p := decide(t, spec, done, obs, at(0))
		if p.Status.Phase != v1alpha1.PhaseProgressing {
			t.Fatalf("%d old pods leaving: phase %s, want Progressing", left, p.Status.Phase)
		}
		if msg != "" && p.Status.Message != msg {
			t.Errorf("%d old pods leaving: message %q, want %q as with 3", left, p.Status.Message, msg)
		}
		msg = p.Status.Message
	}
}

// TestPromoteUnderAnApprovalPolicy: when approvals need proof from Git,
// spec.promote skips no gate: at a gate with no approval it waits, saying
// which steps lack one; with every remaining gate approved it promotes.
func TestPromoteUnderAnApprovalPolicy(t *testing.T) {
	spec := echoSpec()
	spec.Promote = &v1alpha1.RevisionRequest{Revision: "v2"}
	obs := observed(10, 1)
	obs.ApprovalsNeedProof = true
	p := decide(t, spec, releasing(1, v1alpha1.StepPaused, -time.Hour), obs, t0)
	if p.Status.CurrentStepState == v1alpha1.StepCompleted || !strings.Contains(p.Status.Message, "spec.promote waits") {
		t.Fatalf("at %+v message %q; want the gate held and the wait named", whereOf(&p.Status), p.Status.Message)
	}
	obs.Approvals = []v1alpha1.Approval{{Revision: "v2", Step: 1}}
	p = decide(t, spec, releasing(1, v1alpha1.StepPaused, -time.Hour), obs, t0)
	if p.Status.CurrentStepState != v1alpha1.StepCompleted {
		t.Fatalf("at %+v message %q; want the promotion once every remaining gate is approved", whereOf(&p.Status), p.Status.Message)
	}
}
