package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/luascripts"
	"github.com/rollgate/rollgate/reconciler/metrics"
)

// newMetrics returns Metrics on a fresh registry.
func newMetrics(t *testing.T) (*metrics.Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

// sample is one series as gathered.
type sample struct {
	labels map[string]string
	// value of a gauge or counter; count and sum of a histogram.
	value float64
	count uint64
	sum   float64
}

// series returns the series of family name whose labels include want.
func series(t *testing.T, g prometheus.Gatherer, name string, want map[string]string) []sample {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []sample
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			s := sample{labels: map[string]string{}, count: m.GetHistogram().GetSampleCount(), sum: m.GetHistogram().GetSampleSum()}
			for _, l := range m.GetLabel() {
				s.labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if s.labels[k] != v {
					continue next
				}
			}
			s.value = m.GetGauge().GetValue() + m.GetCounter().GetValue()
			out = append(out, s)
		}
	}
	return out
}

// value is the value of the one gauge or counter series of name with
// labels; it fails the test when there is not exactly one.
func value(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	s := series(t, g, name, labels)
	if len(s) != 1 {
		t.Fatalf("%s%v: %d series, want 1", name, labels, len(s))
	}
	return s[0].value
}

// observations returns the count and sum of the histogram series of name
// with labels (0, 0 when there is none).
func observations(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) (uint64, float64) {
	t.Helper()
	var n uint64
	var sum float64
	for _, s := range series(t, g, name, labels) {
		n += s.count
		sum += s.sum
	}
	return n, sum
}

func rollout(ns, name string, s v1alpha1.RolloutStatus) *v1alpha1.Rollout {
	return &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Status: s}
}

func at(t time.Time) *metav1.Time {
	m := metav1.NewTime(t)
	return &m
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestNilMetricsRecordsNothing(t *testing.T) {
	var m *metrics.Metrics
	m.SetRollout(rollout("a", "web", v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseHealthy}))
	m.Transition(metrics.Transition{Old: &v1alpha1.RolloutStatus{}, New: &v1alpha1.RolloutStatus{}})
	m.Measured("a", "web", nil, []v1alpha1.MetricResult{{Template: "t", Metric: "m", Successful: 1}})
	m.Forget("a", "web")
	if m.GitObserver("a", "repo") != nil || m.LuaObserver() != nil {
		t.Fatal("a nil *Metrics must hand out nil observers, so gitsync and traffic skip them")
	}
}

func TestNewRefusesARegistryThatHasTheMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := metrics.New(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := metrics.New(reg); err == nil {
		t.Fatal("registering the metrics twice in one registry succeeded; want an error")
	}
}

func TestSetRolloutGauges(t *testing.T) {
	m, reg := newMetrics(t)
	web := map[string]string{"namespace": "shop", "name": "web"}
	m.SetRollout(rollout("shop", "web", v1alpha1.RolloutStatus{
		Phase: v1alpha1.PhaseProgressing, CurrentStepIndex: 2, StepCount: 3, CanaryWeight: 20,
		AwaitingApproval: &v1alpha1.ApprovalRequest{Revision: "r2", Step: 2, Since: metav1.NewTime(t0)},
	}))
	for _, p := range []string{"Initial", "Healthy", "Progressing", "Paused", "Failed", "Disabled"} {
		want := 0.0
		if p == "Progressing" {
			want = 1
		}
		if got := value(t, reg, "rollgate_rollout_phase", map[string]string{"namespace": "shop", "name": "web", "phase": p}); got != want {
			t.Errorf("rollgate_rollout_phase{phase=%q} = %v, want %v", p, got, want)
		}
	}
	for name, want := range map[string]float64{
		"rollgate_rollout_step":                                      2,
		"rollgate_rollout_steps":                                     3,
		"rollgate_rollout_canary_weight":                             20,
		"rollgate_rollout_awaiting_approval_since_timestamp_seconds": float64(t0.Unix()),
	} {
		if got := value(t, reg, name, web); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}

	// The gate is approved and the release is done.
	m.SetRollout(rollout("shop", "web", v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseHealthy, CurrentStepIndex: 3, StepCount: 3}))
	if got := value(t, reg, "rollgate_rollout_phase", map[string]string{"namespace": "shop", "name": "web", "phase": "Healthy"}); got != 1 {
		t.Errorf("rollgate_rollout_phase{phase=Healthy} = %v, want 1", got)
	}
	if s := series(t, reg, "rollgate_rollout_awaiting_approval_since_timestamp_seconds", web); len(s) != 0 {
		t.Errorf("awaiting-approval series still there with no gate waiting: %v", s)
	}

	// A Rollout the controller never looked at has no phase yet: Initial.
	m.SetRollout(rollout("shop", "new", v1alpha1.RolloutStatus{}))
	if got := value(t, reg, "rollgate_rollout_phase", map[string]string{"namespace": "shop", "name": "new", "phase": "Initial"}); got != 1 {
		t.Errorf("empty phase: rollgate_rollout_phase{phase=Initial} = %v, want 1", got)
	}
}

func TestForgetRemovesEverySeriesOfTheRollout(t *testing.T) {
	m, reg := newMetrics(t)
	for _, name := range []string{"web", "api"} {
		feedRelease(m, "shop", name)
		m.Measured("shop", name, nil, []v1alpha1.MetricResult{{Template: "t", Metric: "errors", Successful: 1}})
	}
	m.Forget("shop", "web")
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	perRollout := 0
	for _, f := range families {
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "name" {
					perRollout++
					if l.GetValue() == "web" {
						t.Errorf("%s still has a series of the forgotten Rollout: %v", f.GetName(), s.GetLabel())
					}
				}
			}
		}
	}
	if perRollout == 0 {
		t.Fatal("no series left for the other Rollout: Forget removed too much")
	}
	if n, _ := observations(t, reg, "rollgate_approval_wait_seconds", nil); n != 2 {
		t.Errorf("approval waits = %d, want 2: they carry no Rollout label and stay", n)
	}
}

// feedRelease reports a whole release of 2 steps, the first a gate
// approved in Git after 5 minutes, as the reconciler does: each transition
// once, and the gauges after it.
func feedRelease(m *metrics.Metrics, ns, name string) {
	steps := releaseSteps()
	for i := 1; i < len(steps); i++ {
		m.Transition(metrics.Transition{Namespace: ns, Name: name, Old: &steps[i-1].status, New: &steps[i].status,
			Seen: steps[i].seen, Spec: steps[i].spec, Now: steps[i].at})
		m.SetRollout(rollout(ns, name, steps[i].status))
	}
}

type moment struct {
	at         time.Time
	status     v1alpha1.RolloutStatus
	spec, seen []v1alpha1.Approval
}

// releaseSteps is the status of a release of revision r2 from r1, moment
// by moment.
func releaseSteps() []moment {
	base := v1alpha1.RolloutStatus{StableRevision: "r1", CanaryRevision: "r2", Attempt: 1, StepCount: 2, ReleaseStartedAt: at(t0)}
	with := func(f func(*v1alpha1.RolloutStatus)) v1alpha1.RolloutStatus {
		s := *base.DeepCopy()
		f(&s)
		return s
	}
	gitApproval := []v1alpha1.Approval{{Revision: "r2", Step: 1, ApprovedBy: "git"}}
	return []moment{
		{at: t0.Add(-time.Hour), status: v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseHealthy, StableRevision: "r1", CanaryRevision: "r1"}},
		{at: t0, status: with(func(s *v1alpha1.RolloutStatus) {
			s.Phase, s.CurrentStepIndex, s.CurrentStepState, s.StepStartedAt = v1alpha1.PhaseProgressing, 1, v1alpha1.StepUpgrade, at(t0)
		})},
		{at: t0.Add(time.Minute), status: with(func(s *v1alpha1.RolloutStatus) {
			s.Phase, s.CurrentStepIndex, s.CurrentStepState, s.StepStartedAt = v1alpha1.PhaseProgressing, 1, v1alpha1.StepPaused, at(t0.Add(time.Minute))
			s.AwaitingApproval = &v1alpha1.ApprovalRequest{Revision: "r2", Step: 1, Since: metav1.NewTime(t0.Add(time.Minute))}
		})},
		{at: t0.Add(6 * time.Minute), seen: gitApproval, status: with(func(s *v1alpha1.RolloutStatus) {
			s.Phase, s.CurrentStepIndex, s.CurrentStepState, s.StepStartedAt = v1alpha1.PhaseProgressing, 2, v1alpha1.StepUpgrade, at(t0.Add(6*time.Minute))
		})},
		{at: t0.Add(8 * time.Minute), seen: gitApproval, status: with(func(s *v1alpha1.RolloutStatus) {
			s.Phase, s.CurrentStepIndex, s.CurrentStepState, s.StepStartedAt = v1alpha1.PhaseProgressing, 2, v1alpha1.StepCompleted, at(t0.Add(8*time.Minute))
		})},
		{at: t0.Add(9 * time.Minute), seen: gitApproval, status: with(func(s *v1alpha1.RolloutStatus) {
			s.Phase, s.CurrentStepIndex, s.CurrentStepState, s.StableRevision = v1alpha1.PhaseHealthy, 2, v1alpha1.StepCompleted, "r2"
		})},
	}
}

func TestReleaseObservedOnceAcrossRepeatedReconciles(t *testing.T) {
	m, reg := newMetrics(t)
	steps := releaseSteps()
	// Every transition is reported three times (a reconcile that read the
	// older status from the cache, a status patch that failed), and every
	// status is also reported unchanged, as most reconciles do.
	for i := 1; i < len(steps); i++ {
		for range 3 {
			m.Transition(metrics.Transition{Namespace: "shop", Name: "web", Old: &steps[i-1].status, New: &steps[i].status, Seen: steps[i].seen, Now: steps[i].at})
			m.Transition(metrics.Transition{Namespace: "shop", Name: "web", Old: &steps[i].status, New: &steps[i].status, Seen: steps[i].seen, Now: steps[i].at.Add(time.Second)})
		}
	}
	if n, sum := observations(t, reg, "rollgate_approval_wait_seconds", map[string]string{"source": "git"}); n != 1 || sum != 300 {
		t.Errorf("approval wait (git): %d observations summing %vs, want 1 of 300s", n, sum)
	}
	if n, _ := observations(t, reg, "rollgate_approval_wait_seconds", map[string]string{"source": "cluster"}); n != 0 {
		t.Errorf("approval wait (cluster): %d observations, want 0", n)
	}
	completed := map[string]string{"namespace": "shop", "name": "web", "outcome": "completed"}
	if n, sum := observations(t, reg, "rollgate_rollout_step_duration_seconds", completed); n != 2 || sum != 360+120 {
		t.Errorf("step durations: %d observations summing %vs, want 2 (6m for step 1, 2m for step 2)", n, sum)
	}
	if got := value(t, reg, "rollgate_releases_total", map[string]string{"namespace": "shop", "name": "web", "result": "completed"}); got != 1 {
		t.Errorf("rollgate_releases_total{result=completed} = %v, want 1", got)
	}
}

func TestApprovalSource(t *testing.T) {
	m, reg := newMetrics(t)
	gate := func(step int32) *v1alpha1.RolloutStatus {
		return &v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseProgressing, StableRevision: "r1", CanaryRevision: "r2", CurrentStepIndex: step, CurrentStepState: v1alpha1.StepPaused,
			AwaitingApproval: &v1alpha1.ApprovalRequest{Revision: "r2", Step: step, Since: metav1.NewTime(t0)}}
	}
	next := func(step int32) *v1alpha1.RolloutStatus {
		return &v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseProgressing, StableRevision: "r1", CanaryRevision: "r2", CurrentStepIndex: step + 1, CurrentStepState: v1alpha1.StepUpgrade}
	}
	// Gate 1: spec.approvals (applied by the GitOps tool, or rollgate approve).
	spec := []v1alpha1.Approval{{Revision: "r2", Step: 1}}
	m.Transition(metrics.Transition{Namespace: "shop", Name: "web", Old: gate(1), New: next(1), Spec: spec, Seen: spec, Now: t0.Add(time.Hour)})
	// Gate 2 closes because the release is aborted: no approval, no wait.
	aborted := &v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseFailed, StableRevision: "r1", CanaryRevision: "r2", CurrentStepIndex: 2, CurrentStepState: v1alpha1.StepRollingBack}
	m.Transition(metrics.Transition{Namespace: "shop", Name: "web", Old: gate(2), New: aborted, Spec: spec, Seen: spec, Now: t0.Add(2 * time.Hour)})
	if n, sum := observations(t, reg, "rollgate_approval_wait_seconds", map[string]string{"source": "cluster"}); n != 1 || sum != 3600 {
		t.Errorf("approval wait (cluster): %d observations summing %vs, want 1 of 3600s", n, sum)
	}
	if n, _ := observations(t, reg, "rollgate_approval_wait_seconds", nil); n != 1 {
		t.Errorf("approval waits: %d, want 1 (a gate closed by an abort is not approved)", n)
	}
}

func TestReleaseResults(t *testing.T) {
	inStep := v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseProgressing, StableRevision: "r1", CanaryRevision: "r2", Attempt: 1,
		CurrentStepIndex: 1, StepCount: 2, CurrentStepState: v1alpha1.StepUpgrade, StepStartedAt: at(t0), ReleaseStartedAt: at(t0)}
	stalled := func(reason string) []metav1.Condition {
		return []metav1.Condition{{Type: v1alpha1.StalledCondition, Status: metav1.ConditionTrue, Reason: reason}}
	}
	for _, tc := range []struct {
		name, result string
		new          v1alpha1.RolloutStatus
	}{
		{"analysis failed", "failed", v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseFailed, StableRevision: "r1", CanaryRevision: "r2", Attempt: 1,
			CurrentStepIndex: 1, CurrentStepState: v1alpha1.StepRollingBack, Conditions: stalled(v1alpha1.ReasonAnalysisFailed)}},
		{"spec.abort", "aborted", v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseFailed, StableRevision: "r1", CanaryRevision: "r2", Attempt: 1,
			CurrentStepIndex: 1, CurrentStepState: v1alpha1.StepRollingBack, Conditions: stalled(v1alpha1.ReasonAborted)}},
		{"template reverted in Git", "aborted", v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseProgressing, StableRevision: "r1", CanaryRevision: "r2", Attempt: 1,
			CurrentStepIndex: 1, CurrentStepState: v1alpha1.StepRollingBack}},
		{"disabled", "aborted", v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseDisabled, StableRevision: "r1", CanaryRevision: "r1"}},
		{"newer revision", "superseded", v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseProgressing, StableRevision: "r1", CanaryRevision: "r3", Attempt: 1,
			CurrentStepIndex: 1, CurrentStepState: v1alpha1.StepUpgrade, StepStartedAt: at(t0.Add(time.Minute))}},
		{"promoted", "completed", v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseHealthy, StableRevision: "r2", CanaryRevision: "r2", Attempt: 1,
			CurrentStepIndex: 1, CurrentStepState: v1alpha1.StepCompleted}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, reg := newMetrics(t)
			for range 2 {
				m.Transition(metrics.Transition{Namespace: "shop", Name: "web", Old: inStep.DeepCopy(), New: inStep.DeepCopy(), Now: t0})
				m.Transition(metrics.Transition{Namespace: "shop", Name: "web", Old: inStep.DeepCopy(), New: tc.new.DeepCopy(), Now: t0.Add(time.Minute)})
			}
			var got []string
			for _, s := range series(t, reg, "rollgate_releases_total", nil) {
				got = append(got, fmt.Sprintf("%s=%v", s.labels["result"], s.value))
			}
			if want := tc.result + "=1"; strings.Join(got, ",") != want {
				t.Errorf("rollgate_releases_total: %v, want %s", got, want)
			}
			outcome := "aborted"
			if tc.result == "completed" {
				outcome = "completed"
			}
			if n, sum := observations(t, reg, "rollgate_rollout_step_duration_seconds", map[string]string{"outcome": outcome}); n != 1 || sum != 60 {
				t.Errorf("step duration (%s): %d observations summing %vs, want 1 of 60s", outcome, n, sum)
			}
		})
	}
}

// TestReleaseFinishedWithPromotedTraffic: a release whose traffic was all
// on the canary has the new revision as stable while the declared routes
// come back, before Healthy; it is counted once, as completed.
func TestReleaseFinishedWithPromotedTraffic(t *testing.T) {
	last := v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseProgressing, StableRevision: "r1", CanaryRevision: "r2", Attempt: 1,
		CurrentStepIndex: 2, StepCount: 2, CurrentStepState: v1alpha1.StepPaused, StepStartedAt: at(t0), ReleaseStartedAt: at(t0)}
	promoted := last
	promoted.CurrentStepState = v1alpha1.StepCompleted
	routesBack := promoted
	routesBack.StableRevision = "r2"
	healthy := routesBack
	healthy.Phase = v1alpha1.PhaseHealthy
	m, reg := newMetrics(t)
	seq := []v1alpha1.RolloutStatus{last, promoted, routesBack, routesBack, healthy, healthy}
	for i := 1; i < len(seq); i++ {
		m.Transition(metrics.Transition{Namespace: "shop", Name: "web", Old: seq[i-1].DeepCopy(), New: seq[i].DeepCopy(),
			Now: t0.Add(time.Duration(i) * time.Second)})
	}
	var got []string
	for _, s := range series(t, reg, "rollgate_releases_total", nil) {
		got = append(got, fmt.Sprintf("%s=%v", s.labels["result"], s.value))
	}
	if strings.Join(got, ",") != "completed=1" {
		t.Errorf("rollgate_releases_total: %v, want completed=1", got)
	}
}

func TestStepStartUnknownAfterRestart(t *testing.T) {
	m, reg := newMetrics(t)
	step := func(i int32, started time.Time) *v1alpha1.RolloutStatus {
		return &v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseProgressing, StableRevision: "r1", CanaryRevision: "r2", StepCount: 3,
			CurrentStepIndex: i, CurrentStepState: v1alpha1.StepPaused, StepStartedAt: at(started), ReleaseStartedAt: at(t0)}
	}
	// A fresh process first sees step 2 in progress: its start is unknown
	// (status.stepStartedAt is the start of the step's current state).
	m.Transition(metrics.Transition{Namespace: "shop", Name: "web", Old: step(2, t0.Add(time.Hour)), New: step(2, t0.Add(time.Hour)), Now: t0.Add(2 * time.Hour)})
	m.Transition(metrics.Transition{Namespace: "shop", Name: "web", Old: step(2, t0.Add(time.Hour)), New: step(3, t0.Add(3*time.Hour)), Now: t0.Add(3 * time.Hour)})
	if n, _ := observations(t, reg, "rollgate_rollout_step_duration_seconds", nil); n != 0 {
		t.Errorf("%d step durations observed for a step whose start was never seen; want none", n)
	}
	// Step 1 first seen mid-way starts with the release.
	m.Transition(metrics.Transition{Namespace: "shop", Name: "api", Old: step(1, t0.Add(time.Minute)), New: step(1, t0.Add(time.Minute)), Now: t0.Add(2 * time.Minute)})
	m.Transition(metrics.Transition{Namespace: "shop", Name: "api", Old: step(1, t0.Add(time.Minute)), New: step(2, t0.Add(4*time.Minute)), Now: t0.Add(4 * time.Minute)})
	if n, sum := observations(t, reg, "rollgate_rollout_step_duration_seconds", map[string]string{"name": "api"}); n != 1 || sum != 240 {
		t.Errorf("step 1 seen mid-way: %d observations summing %vs, want 1 of 240s (from status.releaseStartedAt)", n, sum)
	}
}

func TestMeasured(t *testing.T) {
	m, reg := newMetrics(t)
	prev := []v1alpha1.MetricResult{
		{Template: "slo", Metric: "errors", Step: 1, Successful: 2},
		{Template: "slo", Metric: "latency", Step: 1, Successful: 1, Errors: 1},
	}
	results := []v1alpha1.MetricResult{
		{Template: "slo", Metric: "errors", Step: 1, Successful: 3},
		{Template: "slo", Metric: "latency", Step: 1, Successful: 1, Errors: 2},
		{Template: "smoke", Metric: "http", Step: 1, Failed: 1},
	}
	m.Measured("shop", "web", prev, results)
	for _, c := range []struct {
		template, metric, phase string
		want                    float64
	}{
		{"slo", "errors", "Successful", 1},
		{"slo", "latency", "Error", 1},
		{"smoke", "http", "Failed", 1},
	} {
		labels := map[string]string{"namespace": "shop", "name": "web", "template": c.template, "metric": c.metric, "phase": c.phase}
		if got := value(t, reg, "rollgate_analysis_measurements_total", labels); got != c.want {
			t.Errorf("%s/%s %s = %v, want %v", c.template, c.metric, c.phase, got, c.want)
		}
	}
	if n := len(series(t, reg, "rollgate_analysis_measurements_total", nil)); n != 3 {
		t.Errorf("%d measurement series, want 3 (unchanged counters add none)", n)
	}
}

func TestGitObserverResults(t *testing.T) {
	m, reg := newMetrics(t)
	observe := m.GitObserver("shop", "apps")
	observe(gitsync.OpFetch, 200*time.Millisecond, nil)
	observe(gitsync.OpPush, time.Second, fmt.Errorf("pushing: %w", gitsync.ErrNonFastForward))
	observe(gitsync.OpPush, time.Second, errors.New("connection refused"))
	for _, c := range []struct{ op, result string }{{"fetch", "success"}, {"push", "rejected"}, {"push", "error"}} {
		labels := map[string]string{"namespace": "shop", "repository": "apps", "operation": c.op, "result": c.result}
		if n, _ := observations(t, reg, "rollgate_git_operation_duration_seconds", labels); n != 1 {
			t.Errorf("%s %s: %d observations, want 1", c.op, c.result, n)
		}
	}
}

func TestLuaObserverThroughTheRunner(t *testing.T) {
	m, reg := newMetrics(t)
	runner := luascripts.Runner{Observe: m.LuaObserver(), Limits: luascripts.Limits{Time: 50 * time.Millisecond}}
	nginx, err := luascripts.NewLibrary().ResolveIngress("nginx", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runner.RunIngress(context.Background(), nginx, luascripts.IngressInput{Weight: 20, StableService: "web", CanaryService: "web-canary"}); err != nil {
		t.Fatal(err)
	}
	broken, err := luascripts.NewScript("lua.traffic.routing.ingress.broken", `error("no")`)
	if err != nil {
		t.Fatal(err)
	}
	broken.Key = "lua.traffic.routing.ingress.broken"
	if _, err := runner.RunIngress(context.Background(), broken, luascripts.IngressInput{}); err == nil {
		t.Fatal("a script calling error() succeeded")
	}
	loop, err := luascripts.NewScript("loop", `while true do end`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runner.RunIngress(context.Background(), loop, luascripts.IngressInput{}); !errors.Is(err, luascripts.ErrTimeout) {
		t.Fatalf("endless loop: err = %v, want ErrTimeout", err)
	}
	for _, c := range []struct{ script, result string }{
		{"lua.traffic.routing.ingress.nginx", "success"},
		{"lua.traffic.routing.ingress.broken", "error"},
		{"loop", "timeout"},
	} {
		if n, _ := observations(t, reg, "rollgate_lua_evaluation_duration_seconds", map[string]string{"script": c.script, "result": c.result}); n != 1 {
			t.Errorf("%s %s: %d observations, want 1", c.script, c.result, n)
		}
	}
	if got := testutil.CollectAndCount(reg, "rollgate_lua_evaluation_duration_seconds"); got != 3 {
		t.Errorf("%d Lua series, want 3", got)
	}
}

func TestApprovalWaitOncePerGateOfEachAttempt(t *testing.T) {
	m, reg := newMetrics(t)
	gate := func(attempt int32) *v1alpha1.RolloutStatus {
		return &v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseProgressing, StableRevision: "r1", CanaryRevision: "r2", Attempt: attempt,
			CurrentStepIndex: 1, CurrentStepState: v1alpha1.StepPaused,
			AwaitingApproval: &v1alpha1.ApprovalRequest{Revision: "r2", Step: 1, Since: metav1.NewTime(t0)}}
	}
	passed := func(attempt int32) *v1alpha1.RolloutStatus {
		return &v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseProgressing, StableRevision: "r1", CanaryRevision: "r2", Attempt: attempt,
			CurrentStepIndex: 2, CurrentStepState: v1alpha1.StepUpgrade}
	}
	// The attempt-1 approval alone does not open the gate of attempt 2.
	approvals := []v1alpha1.Approval{{Revision: "r2", Step: 1}}
	m.Transition(metrics.Transition{Namespace: "shop", Name: "web", Old: gate(2), New: passed(2), Spec: approvals, Seen: approvals, Now: t0.Add(time.Minute)})
	if n, _ := observations(t, reg, "rollgate_approval_wait_seconds", nil); n != 0 {
		t.Errorf("approval waits = %d, want 0: no approval names attempt 2", n)
	}
	approvals = append(approvals, v1alpha1.Approval{Revision: "r2", Step: 1, Attempt: 2})
	for _, attempt := range []int32{1, 1, 2, 2} {
		m.Transition(metrics.Transition{Namespace: "shop", Name: "web", Old: gate(attempt), New: passed(attempt), Spec: approvals, Seen: approvals, Now: t0.Add(time.Minute)})
	}
	if n, _ := observations(t, reg, "rollgate_approval_wait_seconds", nil); n != 2 {
		t.Errorf("approval waits = %d, want 2: the gate of step 1 in attempts 1 and 2, once each", n)
	}
}
