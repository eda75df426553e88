package strategy

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

const missingRoute = "HTTPRoute demo/echoserver named by spec.strategy.canary.trafficRoutings[0].gateway.httpRouteName does not exist"

// An object a release needs is missing: while idle the Rollout is not
// Ready and says what is missing; a new revision is not released (no pod,
// no route moves) until it exists, then the release starts at step 1.
func TestMissingDependencyHoldsTheRelease(t *testing.T) {
	spec := echoSpec()
	healthy := &v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseHealthy, StableRevision: "v1", CanaryRevision: "v1"}

	idle := atRevision(10, "v1")
	idle.Missing = []string{missingRoute}
	p := decide(t, spec, healthy, idle, t0)
	wantConditions(t, p, cFalse, cTrue, cFalse, v1alpha1.ReasonDependencyNotFound)
	if !strings.Contains(p.Status.Message, missingRoute) || p.RequeueAfter == 0 {
		t.Fatalf("message %q requeue %s, want the missing route named and a requeue", p.Status.Message, p.RequeueAfter)
	}

	bump := observed(10, 0)
	bump.Missing = idle.Missing
	p = decide(t, spec, persist(p), bump, at(time.Second))
	if p.Workload != WorkloadKeep || p.Traffic.Mode != TrafficOriginal || p.Status.CanaryRevision != "v1" {
		t.Fatalf("workload %s traffic %+v canary %s: a release started with a missing route", p.Workload, p.Traffic, p.Status.CanaryRevision)
	}
	wantConditions(t, p, cFalse, cTrue, cFalse, v1alpha1.ReasonDependencyNotFound)

	bump.Missing = nil
	p = decide(t, spec, persist(p), bump, at(2*time.Second))
	if w := whereOf(&p.Status); w.Phase != v1alpha1.PhaseProgressing || w.Index != 1 || p.Status.CanaryRevision != "v2" {
		t.Fatalf("at %+v canary %s, want the release of v2 at step 1", w, p.Status.CanaryRevision)
	}
}

// A spec problem found while observing (a template argument without a
// value) stalls with the field named, idle or mid-release, and moves
// nothing; a failed release still rolls back.
func TestInvalidObservationStalls(t *testing.T) {
	bad := &SpecError{Field: "spec.strategy.canary.steps[1].analysis.args", Detail: `AnalysisTemplate success-rate: argument "service" has no value`}
	spec := echoSpec()
	healthy := &v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseHealthy, StableRevision: "v1", CanaryRevision: "v1"}
	for name, tc := range map[string]struct {
		st  *v1alpha1.RolloutStatus
		obs Observed
	}{
		"idle":         {healthy, atRevision(10, "v1")},
		"new revision": {healthy, observed(10, 0)},
		"mid-release":  {releasing(2, v1alpha1.StepPaused, -time.Minute), observed(10, 4)},
	} {
		t.Run(name, func(t *testing.T) {
			tc.obs.Invalid = bad
			p, err := Decide(spec, tc.st, tc.obs, t0)
			if !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("err = %v, want an invalid spec", err)
			}
			wantConditions(t, p, cFalse, cFalse, cTrue, v1alpha1.ReasonInvalidSpec)
			if !strings.Contains(p.Conditions.Stalled.Message, bad.Field) || p.Workload != WorkloadKeep {
				t.Fatalf("Stalled %q workload %s, want the field named and nothing moved", p.Conditions.Stalled.Message, p.Workload)
			}
		})
	}
	failed := failedStatus(v1alpha1.ReasonAborted)
	obs := observed(10, 4)
	obs.Invalid = bad
	if _, err := Decide(spec, failed, obs, t0); err != nil {
		t.Fatalf("a failed release must roll back whatever the analysis templates say: %v", err)
	}
}
