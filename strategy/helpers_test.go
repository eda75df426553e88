package strategy

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// t0 is the test clock's origin.
var t0 = time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func mtime(d time.Duration) *metav1.Time {
	t := metav1.NewTime(at(d))
	return &t
}

func num(n int) *intstr.IntOrString {
	v := intstr.FromInt32(int32(n))
	return &v
}

func pct(s string) *intstr.IntOrString {
	v := intstr.FromString(s)
	return &v
}

func ptr[T any](v T) *T { return &v }

// step builds a step; traffic "" means unset, replicas nil means unset.
func step(traffic string, replicas *intstr.IntOrString, pause *v1alpha1.RolloutPause) v1alpha1.CanaryStep {
	s := v1alpha1.CanaryStep{Replicas: replicas, Pause: pause}
	if traffic != "" {
		s.Traffic = ptr(traffic)
	}
	return s
}

func gatePause() *v1alpha1.RolloutPause { return &v1alpha1.RolloutPause{} }

func timedPause(v intstr.IntOrString) *v1alpha1.RolloutPause {
	return &v1alpha1.RolloutPause{Duration: &v}
}

func withAnalysis(s v1alpha1.CanaryStep) v1alpha1.CanaryStep {
	s.Analysis = &v1alpha1.RolloutAnalysis{Templates: []string{"success-rate"}}
	return s
}

// routedSpec is a canary spec with one Gateway routing and no grace period.
func routedSpec(steps ...v1alpha1.CanaryStep) *v1alpha1.RolloutSpec {
	return &v1alpha1.RolloutSpec{
		WorkloadRef: v1alpha1.WorkloadRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "echoserver"},
		Strategy: v1alpha1.RolloutStrategy{Canary: &v1alpha1.CanaryStrategy{
			Steps: steps,
			TrafficRoutings: []v1alpha1.TrafficRoutingRef{{
				Service:            "echoserver",
				GracePeriodSeconds: ptr(int32(0)),
				Gateway:            &v1alpha1.GatewayTrafficRouting{HTTPRouteName: ptr("echoserver")},
			}},
		}},
	}
}

// plainSpec is a canary spec without traffic routing.
func plainSpec(steps ...v1alpha1.CanaryStep) *v1alpha1.RolloutSpec {
	s := routedSpec(steps...)
	s.Strategy.Canary.TrafficRoutings = nil
	return s
}

// echoSpec is the example of DESIGN.md: a gate at 5%, a timed pause with
// analysis at 40%, then 100%.
func echoSpec() *v1alpha1.RolloutSpec {
	return routedSpec(
		step("5%", num(1), gatePause()),
		withAnalysis(step("40%", pct("40%"), timedPause(intstr.FromString("10m")))),
		step("100%", pct("100%"), nil),
	)
}

// releasing is a status of a release of v2 over v1 at step idx and state.
func releasing(idx int32, state v1alpha1.StepState, since time.Duration) *v1alpha1.RolloutStatus {
	return &v1alpha1.RolloutStatus{
		Phase:            v1alpha1.PhaseProgressing,
		StableRevision:   "v1",
		CanaryRevision:   "v2",
		Attempt:          1,
		CurrentStepIndex: idx,
		StepCount:        3,
		CurrentStepState: state,
		StepStartedAt:    mtime(since),
		ReleaseStartedAt: mtime(0),
	}
}

// failedStatus is a release of v2 that failed for reason.
func failedStatus(reason string) *v1alpha1.RolloutStatus {
	s := releasing(2, v1alpha1.StepRollingBack, 0)
	s.Phase = v1alpha1.PhaseFailed
	s.Conditions = []metav1.Condition{{Type: v1alpha1.StalledCondition, Status: metav1.ConditionTrue, Reason: reason}}
	return s
}

// observed is a workload of replicas pods frozen at v1 with canary v2 pods
// all ready; traffic confirmed.
func observed(replicas, canary int32) Observed {
	return Observed{
		Replicas:       replicas,
		UpdateRevision: "v2",
		StableRevision: "v1",
		Held:           true,
		Pods: map[string]PodCounts{
			"v1": {Total: replicas - canary, Ready: replicas - canary},
			"v2": {Total: canary, Ready: canary},
		},
		MaxUnavailable: 0,
		TrafficDone:    true,
	}
}

// atRevision is a workload running rev on every pod, not frozen.
func atRevision(replicas int32, rev string) Observed {
	return Observed{
		Replicas:       replicas,
		UpdateRevision: rev,
		Pods:           map[string]PodCounts{rev: {Total: replicas, Ready: replicas}},
		TrafficDone:    true,
	}
}

func approval(rev string, step int32) v1alpha1.Approval {
	return v1alpha1.Approval{Revision: rev, Step: step, ApprovedBy: "alice"}
}

// decide calls Decide and fails the test on an error.
func decide(t *testing.T, spec *v1alpha1.RolloutSpec, st *v1alpha1.RolloutStatus, obs Observed, now time.Time) Plan {
	t.Helper()
	p, err := Decide(spec, st, obs, now)
	if err != nil {
		t.Fatalf("Decide: unexpected error: %v", err)
	}
	return p
}

// where summarises the step a plan's status is at.
type where struct {
	Phase v1alpha1.RolloutPhase
	Index int32
	State v1alpha1.StepState
}

func whereOf(s *v1alpha1.RolloutStatus) where {
	return where{s.Phase, s.CurrentStepIndex, s.CurrentStepState}
}

// persist is what the reconciler writes: the plan's status with its
// conditions applied.
func persist(p Plan) *v1alpha1.RolloutStatus {
	s := p.Status.DeepCopy()
	for typ, c := range p.Conditions.ByType() {
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{
			Type: typ, Status: c.Status, Reason: c.Reason, Message: c.Message,
		})
	}
	return s
}

// wantConditions checks the kstatus conditions of a plan.
func wantConditions(t *testing.T, p Plan, ready, reconciling, stalled metav1.ConditionStatus, reason string) {
	t.Helper()
	c := p.Conditions
	if c.Ready.Status != ready || c.Reconciling.Status != reconciling || c.Stalled.Status != stalled {
		t.Errorf("Ready/Reconciling/Stalled = %s/%s/%s, want %s/%s/%s", c.Ready.Status, c.Reconciling.Status,
			c.Stalled.Status, ready, reconciling, stalled)
	}
	if c.Ready.Reason != reason {
		t.Errorf("Ready reason = %q, want %q (message %q)", c.Ready.Reason, reason, c.Ready.Message)
	}
}
