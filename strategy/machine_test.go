package strategy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/strategy/verdict"
)

func TestUpgradeWaitsForReadyPodsAndTheAvailabilityFloor(t *testing.T) {
	notReady := func(o Observed, rev string, ready int32) Observed {
		c := o.Pods[rev]
		c.Ready = ready
		o.Pods[rev] = c
		return o
	}
	tests := []struct {
		name      string
		threshold *intstr.IntOrString
		obs       Observed
		want      v1alpha1.StepState
	}{
		{"all ready", nil, observed(10, 4), v1alpha1.StepTrafficRouting},
		{"new pods not created yet", nil, observed(10, 1), v1alpha1.StepUpgrade},
		{"new pods not ready", nil, notReady(observed(10, 4), "v2", 3), v1alpha1.StepUpgrade},
		{"unready new pods are never waved through", pct("50%"), notReady(observed(10, 4), "v2", 3), v1alpha1.StepUpgrade},
		{"stable pods below the floor", nil, notReady(observed(10, 4), "v1", 5), v1alpha1.StepUpgrade},
		{"failureThreshold lowers the floor", num(1), notReady(observed(10, 4), "v1", 5), v1alpha1.StepTrafficRouting},
		{"workload maxUnavailable is the default", nil, func() Observed {
			o := notReady(observed(10, 4), "v1", 5)
			o.MaxUnavailable = 2
			return o
		}(), v1alpha1.StepTrafficRouting},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := echoSpec()
			spec.Strategy.Canary.FailureThreshold = tt.threshold
			tt.obs.TrafficDone = false
			p := decide(t, spec, releasing(2, v1alpha1.StepUpgrade, -time.Minute), tt.obs, t0)
			if got := p.Status.CurrentStepState; got != tt.want {
				t.Errorf("state = %s, want %s (%s)", got, tt.want, p.Status.Message)
			}
			if p.Workload != WorkloadScale || p.CanaryReplicas != 4 {
				t.Errorf("workload = %s %d, want Scale 4", p.Workload, p.CanaryReplicas)
			}
		})
	}
}

func TestTrafficRoutingWaitsForTheRoutersAndTheGracePeriod(t *testing.T) {
	tests := []struct {
		name      string
		grace     int32
		done      bool
		changedAt time.Duration // zero: unknown
		now       time.Duration // the state started at t0
		want      v1alpha1.StepState
		requeue   time.Duration
	}{
		{"routers not done", 3, false, 0, time.Second, v1alpha1.StepTrafficRouting, routerPoll},
		{"grace from entering the state", 3, true, 0, time.Second, v1alpha1.StepTrafficRouting, 2 * time.Second},
		{"grace from the confirmed change", 30, true, 5 * time.Second, 10 * time.Second, v1alpha1.StepTrafficRouting, 25 * time.Second},
		{"grace over", 3, true, 0, 3 * time.Second, v1alpha1.StepPaused, 0},
		{"grace over after the confirmed change", 3, true, 5 * time.Second, 8 * time.Second, v1alpha1.StepPaused, 0},
		{"no grace", 0, true, 0, 0, v1alpha1.StepPaused, 0},
		// The state's start is stamped up to the next second.
		{"no grace, the state stamped within the second", 0, true, 0, -500 * time.Millisecond, v1alpha1.StepPaused, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := echoSpec()
			spec.Strategy.Canary.TrafficRoutings[0].GracePeriodSeconds = &tt.grace
			obs := observed(10, 1)
			obs.TrafficDone = tt.done
			if tt.changedAt != 0 {
				obs.TrafficChangedAt = at(tt.changedAt)
			}
			p := decide(t, spec, releasing(1, v1alpha1.StepTrafficRouting, 0), obs, at(tt.now))
			if got := p.Status.CurrentStepState; got != tt.want {
				t.Fatalf("state = %s, want %s (%s)", got, tt.want, p.Status.Message)
			}
			if p.RequeueAfter != tt.requeue {
				t.Errorf("RequeueAfter = %s, want %s", p.RequeueAfter, tt.requeue)
			}
			if !p.Traffic.Equal(Traffic{Mode: TrafficCanary, Weight: 5}) {
				t.Errorf("traffic = %+v, want 5%%", p.Traffic)
			}
		})
	}
}

func TestTrafficDoneForAnotherTargetDoesNotCount(t *testing.T) {
	// The routers confirmed "all to stable" for StepUpgrade; entering
	// StepTrafficRouting asks for 5%, which nobody confirmed yet.
	p := decide(t, echoSpec(), releasing(1, v1alpha1.StepUpgrade, 0), observed(10, 1), at(time.Minute))
	if w := whereOf(&p.Status); w.State != v1alpha1.StepTrafficRouting {
		t.Fatalf("state = %s, want StepTrafficRouting", w.State)
	}
	if p.RequeueAfter != routerPoll {
		t.Errorf("RequeueAfter = %s, want %s", p.RequeueAfter, routerPoll)
	}
	if p.Status.Traffic != "" {
		t.Errorf("status.traffic = %q: an unconfirmed target must not be reported as applied", p.Status.Traffic)
	}
}

func TestUnchangedTrafficNeedsNoGracePeriod(t *testing.T) {
	spec := routedSpec(step("10%", num(1), nil), step("", num(2), gatePause()))
	spec.Strategy.Canary.TrafficRoutings[0].GracePeriodSeconds = ptr(int32(30))
	p := decide(t, spec, releasing(2, v1alpha1.StepUpgrade, 0), observed(10, 2), at(time.Second))
	if w := whereOf(&p.Status); w.State != v1alpha1.StepPaused || p.Status.AwaitingApproval == nil {
		t.Errorf("at %+v, want the gate of step 2 (%s)", w, p.Status.Message)
	}
}

func TestStepAnalysis(t *testing.T) {
	tests := []struct {
		name     string
		result   AnalysisResult
		want     where
		reason   string
		approved bool
	}{
		{"running", AnalysisResult{Phase: verdict.PhaseRunning}, where{v1alpha1.PhaseProgressing, 2, v1alpha1.StepMetricsAnalysis}, v1alpha1.ReasonProgressing, false},
		{"successful", AnalysisResult{Phase: verdict.PhaseSuccessful}, where{v1alpha1.PhaseProgressing, 2, v1alpha1.StepPaused}, v1alpha1.ReasonPausing, false},
		{"failed", AnalysisResult{Phase: verdict.PhaseFailed, Message: `success-rate = 0.91: failed "result[0] >= 0.99"`},
			where{v1alpha1.PhaseFailed, 2, v1alpha1.StepRollingBack}, v1alpha1.ReasonAnalysisFailed, false},
		{"error", AnalysisResult{Phase: verdict.PhaseError, Message: "prometheus: connection refused"},
			where{v1alpha1.PhaseFailed, 2, v1alpha1.StepRollingBack}, v1alpha1.ReasonAnalysisFailed, false},
		{"inconclusive", AnalysisResult{Phase: verdict.PhaseInconclusive, Message: "success-rate = NaN"},
			where{v1alpha1.PhaseProgressing, 2, v1alpha1.StepMetricsAnalysis}, v1alpha1.ReasonAnalysisInconclusive, false},
		{"inconclusive and approved", AnalysisResult{Phase: verdict.PhaseInconclusive},
			where{v1alpha1.PhaseProgressing, 2, v1alpha1.StepPaused}, v1alpha1.ReasonPausing, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obs := observed(10, 4)
			obs.StepAnalysis = tt.result
			if tt.approved {
				obs.Approvals = []v1alpha1.Approval{approval("v2", 2)}
			}
			p := decide(t, echoSpec(), releasing(2, v1alpha1.StepMetricsAnalysis, -time.Minute), obs, t0)
			if got := whereOf(&p.Status); got != tt.want {
				t.Fatalf("at %+v, want %+v (%s)", got, tt.want, p.Status.Message)
			}
			if p.Conditions.Ready.Reason != tt.reason {
				t.Errorf("reason = %s, want %s", p.Conditions.Ready.Reason, tt.reason)
			}
			if tt.result.Message != "" && !strings.Contains(p.Status.Message, tt.result.Message) {
				t.Errorf("message %q does not name the metric (%q)", p.Status.Message, tt.result.Message)
			}
		})
	}
}

func TestInconclusiveAnalysisIsAGate(t *testing.T) {
	obs := observed(10, 4)
	obs.StepAnalysis = AnalysisResult{Phase: verdict.PhaseInconclusive, Message: "success-rate = NaN"}
	p := decide(t, echoSpec(), releasing(2, v1alpha1.StepMetricsAnalysis, 0), obs, t0)
	got := p.Status.AwaitingApproval
	if got == nil || got.Reason != "Inconclusive" || got.Revision != "v2" || got.Step != 2 {
		t.Fatalf("awaitingApproval = %+v, want Inconclusive for v2 step 2", got)
	}
	if p.Conditions.AwaitingApproval.Status != metav1.ConditionTrue || p.Conditions.Stalled.Status != metav1.ConditionFalse {
		t.Errorf("AwaitingApproval/Stalled = %s/%s, want True/False", p.Conditions.AwaitingApproval.Status, p.Conditions.Stalled.Status)
	}
}

func TestAnalysisResultOfAnotherStateIsIgnored(t *testing.T) {
	// The status enters StepMetricsAnalysis in this call: a Successful
	// result must be an old one (the reconciler has not started this
	// step's analysis yet).
	obs := observed(10, 4)
	obs.StepAnalysis = AnalysisResult{Phase: verdict.PhaseSuccessful}
	p := decide(t, echoSpec(), releasing(2, v1alpha1.StepTrafficRouting, 0), obs, at(time.Second))
	if w := whereOf(&p.Status); w.State != v1alpha1.StepMetricsAnalysis {
		t.Errorf("at %+v, want to wait in StepMetricsAnalysis", w)
	}
	// A failure reported outside StepMetricsAnalysis is not this step's.
	obs.StepAnalysis = AnalysisResult{Phase: verdict.PhaseFailed}
	p = decide(t, echoSpec(), releasing(1, v1alpha1.StepPaused, 0), obs, t0)
	if p.Status.Phase == v1alpha1.PhaseFailed {
		t.Errorf("a step analysis result failed the release outside StepMetricsAnalysis")
	}
}

func TestBackgroundAnalysis(t *testing.T) {
	obs := observed(10, 1)
	obs.BackgroundAnalysis = AnalysisResult{Phase: verdict.PhaseFailed, Message: "error-rate = 0.2"}
	p := decide(t, echoSpec(), releasing(1, v1alpha1.StepPaused, -time.Hour), obs, t0)
	if p.Status.Phase != v1alpha1.PhaseFailed || p.Conditions.Stalled.Reason != v1alpha1.ReasonAnalysisFailed {
		t.Errorf("phase %s reason %s, want Failed/verdict.PhaseFailed", p.Status.Phase, p.Conditions.Stalled.Reason)
	}
	if !strings.Contains(p.Status.Message, "error-rate = 0.2") {
		t.Errorf("message %q does not name the metric", p.Status.Message)
	}

	obs = observed(10, 4)
	obs.BackgroundAnalysis = AnalysisResult{Phase: verdict.PhaseInconclusive, Message: "error-rate = NaN"}
	p = decide(t, echoSpec(), releasing(2, v1alpha1.StepPaused, -11*time.Minute), obs, t0)
	if a := p.Status.AwaitingApproval; a == nil || a.Reason != "Inconclusive" || a.Step != 2 {
		t.Fatalf("awaitingApproval = %+v, want an Inconclusive gate at step 2", a)
	}
	obs.Approvals = []v1alpha1.Approval{approval("v2", 2)}
	p = decide(t, echoSpec(), releasing(2, v1alpha1.StepPaused, -11*time.Minute), obs, t0)
	if w := whereOf(&p.Status); w.Index != 3 {
		t.Errorf("at %+v, want step 3 once approved", w)
	}
}

func TestGateOpensOnlyForItsRevisionAndStep(t *testing.T) {
	tests := []struct {
		name      string
		approvals []v1alpha1.Approval
		opens     bool
	}{
		{"no approval", nil, false},
		{"another revision", []v1alpha1.Approval{approval("v3", 1)}, false},
		{"the stable revision", []v1alpha1.Approval{approval("v1", 1)}, false},
		{"another step", []v1alpha1.Approval{approval("v2", 2)}, false},
		{"several wrong ones", []v1alpha1.Approval{approval("v3", 1), approval("v2", 3), approval("v1", 1)}, false},
		{"the right one", []v1alpha1.Approval{approval("v2", 1)}, true},
		{"the right one among others", []v1alpha1.Approval{approval("v3", 1), approval("v2", 1)}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obs := observed(10, 1)
			obs.Approvals = tt.approvals
			p := decide(t, echoSpec(), releasing(1, v1alpha1.StepPaused, -time.Hour), obs, t0)
			if opened := p.Status.CurrentStepIndex == 2; opened != tt.opens {
				t.Fatalf("gate opened = %v, want %v (at %+v)", opened, tt.opens, whereOf(&p.Status))
			}
			if tt.opens {
				if p.Status.AwaitingApproval != nil || p.Workload != WorkloadScale || p.CanaryReplicas != 4 {
					t.Errorf("after the gate: awaiting %+v, workload %s %d; want none, Scale 4",
						p.Status.AwaitingApproval, p.Workload, p.CanaryReplicas)
				}
				return
			}
			a := p.Status.AwaitingApproval
			if a == nil || a.Revision != "v2" || a.Step != 1 || a.Reason != "Manual" {
				t.Errorf("awaitingApproval = %+v, want Manual for v2 step 1", a)
			}
			// A gate is Current for kstatus (no Ready, Reconciling=False);
			// AwaitingApproval says it waits.
			wantConditions(t, p, cAbsent, cFalse, cFalse, v1alpha1.ReasonWaitingForApproval)
			if p.Conditions.AwaitingApproval.Status != cTrue || p.Conditions.Progressing.Status != cFalse {
				t.Errorf("AwaitingApproval=%s Progressing=%s, want True and False", p.Conditions.AwaitingApproval.Status, p.Conditions.Progressing.Status)
			}
		})
	}
}

func TestGateOpensOnlyForItsAttempt(t *testing.T) {
	of := func(attempt int32) v1alpha1.Approval {
		a := approval("v2", 1)
		a.Attempt = attempt
		return a
	}
	tests := []struct {
		name     string
		attempt  int32 // status.attempt
		approval v1alpha1.Approval
		opens    bool
	}{
		{"first release, approval without attempt", 1, approval("v2", 1), true},
		{"status without attempt, approval without attempt", 0, approval("v2", 1), true},
		{"first release, approval of attempt 1", 1, of(1), true},
		{"status without attempt, approval of attempt 1", 0, of(1), true},
		{"first release, approval of attempt 2", 1, of(2), false},
		{"attempt 2, approval without attempt", 2, approval("v2", 1), false},
		{"attempt 2, approval of attempt 1", 2, of(1), false},
		{"attempt 2, approval of attempt 2", 2, of(2), true},
		{"attempt 3, approval of attempt 2", 3, of(2), false},
		{"attempt 2, approval of attempt 2 for another step", 2, v1alpha1.Approval{Revision: "v2", Step: 2, Attempt: 2}, false},
		{"attempt 2, approval of attempt 2 for another revision", 2, v1alpha1.Approval{Revision: "v3", Step: 1, Attempt: 2}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := releasing(1, v1alpha1.StepPaused, -time.Hour)
			st.Attempt = tt.attempt
			obs := observed(10, 1)
			obs.Approvals = []v1alpha1.Approval{tt.approval}
			p := decide(t, echoSpec(), st, obs, t0)
			if opened := p.Status.CurrentStepIndex == 2; opened != tt.opens {
				t.Fatalf("gate opened = %v, want %v (at %+v)", opened, tt.opens, whereOf(&p.Status))
			}
			if tt.opens {
				return
			}
			a := p.Status.AwaitingApproval
			want := int32(0) // attempt 1 is left out, as in spec.approvals
			if tt.attempt > 1 {
				want = tt.attempt
			}
			if a == nil || a.Revision != "v2" || a.Step != 1 || a.Attempt != want {
				t.Fatalf("awaitingApproval = %+v, want v2 step 1 attempt %d", a, want)
			}
			if tt.attempt > 1 && !strings.Contains(p.Status.Message, fmt.Sprintf("approve revision v2 attempt %d step 1", tt.attempt)) {
				t.Errorf("message %q does not name the attempt", p.Status.Message)
			}
		})
	}
}

func TestGateKeepsWhatGitsyncRecorded(t *testing.T) {
	st := releasing(1, v1alpha1.StepPaused, -time.Hour)
	st.AwaitingApproval = &v1alpha1.ApprovalRequest{Revision: "v2", Step: 1, Since: *mtime(-time.Hour), Reason: "Manual",
		Branch: "rollgate/approve/demo/echoserver/v2-step-1", PullRequestURL: "https://forge/pr/7"}
	p := decide(t, echoSpec(), st, observed(10, 1), t0)
	if got := p.Status.AwaitingApproval; got == nil || *got != *st.AwaitingApproval {
		t.Errorf("awaitingApproval = %+v, want it unchanged %+v", got, st.AwaitingApproval)
	}
	if !p.Event.IsZero() {
		t.Errorf("event %+v while nothing changed", p.Event)
	}

	// The branch of another attempt's gate is not this gate's branch.
	st.Attempt = 2
	p = decide(t, echoSpec(), st, observed(10, 1), t0)
	if got := p.Status.AwaitingApproval; got == nil || got.Attempt != 2 || got.Branch != "" || got.PullRequestURL != "" {
		t.Errorf("awaitingApproval = %+v, want attempt 2 without the branch of attempt 1", got)
	}
}

func TestLastStepGateIsAGate(t *testing.T) {
	spec := routedSpec(step("5%", num(1), nil), step("100%", pct("100%"), gatePause()))
	p := decide(t, spec, releasing(2, v1alpha1.StepPaused, -time.Hour), observed(10, 10), t0)
	if w := whereOf(&p.Status); w.State != v1alpha1.StepPaused || p.Status.AwaitingApproval == nil {
		t.Fatalf("at %+v, want the last step to wait for approval", w)
	}
	obs := observed(10, 10)
	obs.Approvals = []v1alpha1.Approval{approval("v2", 2)}
	p = decide(t, spec, releasing(2, v1alpha1.StepPaused, -time.Hour), obs, t0)
	if w := whereOf(&p.Status); w.State != v1alpha1.StepCompleted {
		t.Errorf("at %+v, want Completed once approved", w)
	}
}

func TestTimedPause(t *testing.T) {
	tests := []struct {
		name    string
		pause   intstr.IntOrString
		since   time.Duration
		now     time.Duration
		requeue time.Duration // zero: the pause is over
	}{
		{"duration string", intstr.FromString("10m"), 0, 4 * time.Minute, 6 * time.Minute},
		{"sub-second now", intstr.FromString("10m"), 0, 4*time.Minute + 500*time.Millisecond, 5*time.Minute + 59*time.Second + 500*time.Millisecond},
		{"int seconds", intstr.FromInt32(30), 0, 10 * time.Second, 20 * time.Second},
		{"90s", intstr.FromString("90s"), -time.Minute, 0, 30 * time.Second},
		{"just over", intstr.FromString("10m"), 0, 10 * time.Minute, 0},
		{"long over", intstr.FromInt32(30), 0, time.Hour, 0},
		{"zero", intstr.FromInt32(0), 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := routedSpec(step("5%", num(1), timedPause(tt.pause)), step("50%", pct("50%"), nil))
			p := decide(t, spec, releasing(1, v1alpha1.StepPaused, tt.since), observed(10, 1), at(tt.now))
			if tt.requeue == 0 {
				if p.Status.CurrentStepIndex != 2 {
					t.Errorf("at %+v, want step 2 after the pause", whereOf(&p.Status))
				}
				return
			}
			if w := whereOf(&p.Status); w.Index != 1 || w.State != v1alpha1.StepPaused {
				t.Fatalf("at %+v, want to pause at step 1", w)
			}
			if p.RequeueAfter != tt.requeue {
				t.Errorf("RequeueAfter = %s, want %s", p.RequeueAfter, tt.requeue)
			}
			if p.Conditions.Progressing.Reason != v1alpha1.ReasonPausing || p.Status.AwaitingApproval != nil {
				t.Errorf("reason %s awaiting %+v, want Pausing and no gate", p.Conditions.Progressing.Reason, p.Status.AwaitingApproval)
			}
		})
	}
}

func TestProgressDeadline(t *testing.T) {
	slowRouters := observed(10, 4)
	slowRouters.TrafficDone = false
	waiting := observed(10, 1)
	waiting.TrafficDone = false
	tests := []struct {
		name     string
		deadline *int32
		status   *v1alpha1.RolloutStatus
		obs      Observed
		fails    bool
		requeue  time.Duration
	}{
		{"pods within the deadline", nil, releasing(2, v1alpha1.StepUpgrade, -599*time.Second), waiting, false, time.Second},
		{"pods beyond the deadline", nil, releasing(2, v1alpha1.StepUpgrade, -600*time.Second), waiting, true, 0},
		{"custom deadline", ptr(int32(60)), releasing(2, v1alpha1.StepUpgrade, -61*time.Second), waiting, true, 0},
		{"routers beyond the deadline", nil, releasing(2, v1alpha1.StepTrafficRouting, -time.Hour), slowRouters, true, 0},
		{"routers within the deadline", nil, releasing(2, v1alpha1.StepTrafficRouting, -599*time.Second), slowRouters, false, time.Second},
		{"analysis never times out", nil, releasing(2, v1alpha1.StepMetricsAnalysis, -10*time.Hour), observed(10, 4), false, 0},
		{"a gate never times out", nil, releasing(1, v1alpha1.StepPaused, -10*time.Hour), observed(10, 1), false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := echoSpec()
			spec.ProgressDeadlineSeconds = tt.deadline
			p := decide(t, spec, tt.status, tt.obs, t0)
			if failed := p.Status.Phase == v1alpha1.PhaseFailed; failed != tt.fails {
				t.Fatalf("failed = %v, want %v (%s)", failed, tt.fails, p.Status.Message)
			}
			if tt.fails {
				wantConditions(t, p, metav1.ConditionFalse, metav1.ConditionTrue, metav1.ConditionTrue, v1alpha1.ReasonProgressDeadlineExceeded)
				if !strings.Contains(p.Status.Message, "spec.progressDeadlineSeconds") || !p.Traffic.Equal(Traffic{Mode: TrafficStable}) {
					t.Errorf("message %q traffic %+v, want the field named and traffic to stable", p.Status.Message, p.Traffic)
				}
				return
			}
			if p.RequeueAfter != tt.requeue {
				t.Errorf("RequeueAfter = %s, want %s", p.RequeueAfter, tt.requeue)
			}
		})
	}
}

func TestStepsWithoutTrafficRouting(t *testing.T) {
	spec := plainSpec(step("", num(1), timedPause(intstr.FromInt32(30))), step("", pct("100%"), nil))
	p := decide(t, spec, releasing(1, v1alpha1.StepUpgrade, 0), observed(10, 1), at(time.Second))
	if w := whereOf(&p.Status); w.State != v1alpha1.StepPaused || p.RequeueAfter != 30*time.Second {
		t.Errorf("at %+v requeue %s, want a 30s pause at step 1", w, p.RequeueAfter)
	}
	if p.Traffic.Mode != TrafficOriginal {
		t.Errorf("traffic = %+v, want Original without trafficRoutings", p.Traffic)
	}
}
