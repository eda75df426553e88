package strategy

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

func TestResolveReplicasRounding(t *testing.T) {
	tests := []struct {
		value    intstr.IntOrString
		replicas int32
		want     int32
	}{
		{intstr.FromString("5%"), 10, 1},
		{intstr.FromString("33%"), 10, 4},
		{intstr.FromString("40%"), 10, 4},
		{intstr.FromString("100%"), 10, 10},
		{intstr.FromString("50%"), 3, 2},
		{intstr.FromString("1%"), 3, 1},
		{intstr.FromString("1%"), 1, 1},
		{intstr.FromString("99%"), 3, 3},
		{intstr.FromString("0%"), 10, 0},
		{intstr.FromString("50%"), 0, 0},
		{intstr.FromInt32(1), 10, 1},
		{intstr.FromInt32(5), 3, 3},
		{intstr.FromInt32(0), 3, 0},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s_of_%d", tt.value.String(), tt.replicas), func(t *testing.T) {
			got, err := ResolveReplicas(tt.value, tt.replicas)
			if err != nil {
				t.Fatalf("ResolveReplicas: %v", err)
			}
			if got != tt.want {
				t.Errorf("ResolveReplicas(%s, %d) = %d, want %d", tt.value.String(), tt.replicas, got, tt.want)
			}
		})
	}
}

func TestResolveReplicasRejectsBadValues(t *testing.T) {
	for _, v := range []intstr.IntOrString{
		intstr.FromString("abc"), intstr.FromString("101%"), intstr.FromString("5"),
		intstr.FromString("-5%"), intstr.FromString("+5%"), intstr.FromInt32(-1),
	} {
		if _, err := ResolveReplicas(v, 10); err == nil {
			t.Errorf("ResolveReplicas(%s): want an error", v.String())
		}
	}
}

func TestResolveSteps(t *testing.T) {
	spec := routedSpec(
		step("5%", num(1), gatePause()),
		step("", pct("20%"), nil),                                        // keeps 5%
		withAnalysis(step("40%", nil, timedPause(intstr.FromInt32(30)))), // replicas follow traffic
		step("100%", pct("100%"), nil),
	)
	got, err := ResolveSteps(spec, 10)
	if err != nil {
		t.Fatalf("ResolveSteps: %v", err)
	}
	want := []Step{
		{Replicas: 1, Traffic: Traffic{Mode: TrafficCanary, Weight: 5}, Gate: true},
		{Replicas: 2, Traffic: Traffic{Mode: TrafficCanary, Weight: 5}},
		{Replicas: 4, Traffic: Traffic{Mode: TrafficCanary, Weight: 40}, Pause: 30 * time.Second, Analysis: true},
		{Replicas: 10, Traffic: Traffic{Mode: TrafficCanary, Weight: 100}},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d steps, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Replicas != want[i].Replicas || !got[i].Traffic.Equal(want[i].Traffic) ||
			got[i].Pause != want[i].Pause || got[i].Gate != want[i].Gate || got[i].Analysis != want[i].Analysis {
			t.Errorf("step %d = %+v, want %+v", i+1, got[i], want[i])
		}
	}
}

func TestResolveStepsTrafficBeforeFirstTrafficStepIsStable(t *testing.T) {
	got, err := ResolveSteps(routedSpec(step("", num(1), nil), step("10%", num(2), nil)), 10)
	if err != nil {
		t.Fatalf("ResolveSteps: %v", err)
	}
	if got[0].Traffic.Mode != TrafficStable {
		t.Errorf("step 1 traffic = %+v, want Stable", got[0].Traffic)
	}
}

func TestResolveStepsMatchesTakePrecedenceAndAreNotCarriedByTraffic(t *testing.T) {
	ab := step("", num(1), nil)
	ab.Matches = []v1alpha1.HttpRouteMatch{{QueryParams: nil, Headers: nil, Path: nil}}
	got, err := ResolveSteps(routedSpec(ab, step("50%", num(2), nil)), 4)
	if err != nil {
		t.Fatalf("ResolveSteps: %v", err)
	}
	if got[0].Traffic.String() != "matches" {
		t.Errorf("step 1 traffic = %q, want matches", got[0].Traffic.String())
	}
	if len(got[1].Traffic.Matches) != 0 || got[1].Traffic.Weight != 50 {
		t.Errorf("step 2 traffic = %+v, want 50%% without matches", got[1].Traffic)
	}
}

func TestResolveStepsVerifyWeightedSteps(t *testing.T) {
	ab := step("", num(1), nil)
	ab.Matches = []v1alpha1.HttpRouteMatch{{}}
	spec := routedSpec(step("", num(1), nil), ab, step("20%", num(2), nil), step("", num(3), nil), step("0%", num(3), nil))
	for _, verify := range []bool{false, true} {
		if verify {
			spec.Strategy.Canary.TrafficRoutings[0].Verify = &v1alpha1.TrafficVerification{}
		}
		got, err := ResolveSteps(spec, 10)
		if err != nil {
			t.Fatalf("ResolveSteps: %v", err)
		}
		var verified []bool
		for _, s := range got {
			verified = append(verified, s.Verify)
			if s.Verify && !s.Analysis {
				t.Errorf("a verified step must hold for its analysis: %+v", s)
			}
		}
		// Stable before the first traffic step and a header match carry no
		// weight to verify; 20%, the 20% kept by the next step, and 0% do.
		want := []bool{false, false, verify, verify, verify}
		if fmt.Sprint(verified) != fmt.Sprint(want) {
			t.Errorf("verify=%t: steps verified %v, want %v", verify, verified, want)
		}
	}
}

func TestResolveStepsWithoutRoutingsIsOriginal(t *testing.T) {
	got, err := ResolveSteps(plainSpec(step("", num(1), nil), step("", pct("100%"), nil)), 10)
	if err != nil {
		t.Fatalf("ResolveSteps: %v", err)
	}
	for i, s := range got {
		if s.Traffic.Mode != TrafficOriginal {
			t.Errorf("step %d traffic = %+v, want Original", i+1, s.Traffic)
		}
	}
}

func TestResolveStepsErrorsNameTheField(t *testing.T) {
	tests := []struct {
		name     string
		spec     *v1alpha1.RolloutSpec
		replicas int32
		field    string
	}{
		{"mixed replicas decrease once resolved", routedSpec(step("5%", num(5), nil), step("10%", pct("20%"), nil)), 10,
			"spec.strategy.canary.steps[1].replicas"},
		{"number above the workload then percentage", routedSpec(step("5%", num(5), nil), step("10%", pct("50%"), nil)), 3,
			"spec.strategy.canary.steps[1].replicas"},
		{"neither replicas nor traffic", plainSpec(step("", nil, nil)), 10, "spec.strategy.canary.steps[0].replicas"},
		{"bad traffic", routedSpec(step("lots", num(1), nil)), 10, "spec.strategy.canary.steps[0].traffic"},
		{"bad replicas", routedSpec(step("5%", pct("five%"), nil)), 10, "spec.strategy.canary.steps[0].replicas"},
		{"bad duration", routedSpec(step("5%", num(1), timedPause(intstr.FromString("soon")))), 10,
			"spec.strategy.canary.steps[0].pause.duration"},
		{"no strategy", &v1alpha1.RolloutSpec{}, 10, "spec.strategy"},
		{"no steps", routedSpec(), 10, "spec.strategy.canary.steps"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ResolveSteps(tt.spec, tt.replicas)
			var se *SpecError
			if !errors.As(err, &se) || !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("err = %v, want a *SpecError wrapping ErrInvalidSpec", err)
			}
			if se.Field != tt.field || !strings.HasPrefix(err.Error(), tt.field+": ") {
				t.Errorf("field = %q (%v), want %q", se.Field, err, tt.field)
			}
		})
	}
}

func TestResolveStepsBlueGreen(t *testing.T) {
	spec := &v1alpha1.RolloutSpec{Strategy: v1alpha1.RolloutStrategy{BlueGreen: &v1alpha1.BlueGreenStrategy{
		Steps: []v1alpha1.CanaryStep{step("", pct("50%"), nil), step("", num(1), nil)},
	}}}
	_, err := ResolveSteps(spec, 10)
	var se *SpecError
	if !errors.As(err, &se) || se.Field != "spec.strategy.blueGreen.steps[1].replicas" {
		t.Errorf("err = %v, want a SpecError on spec.strategy.blueGreen.steps[1].replicas", err)
	}
}

func TestPauseDuration(t *testing.T) {
	tests := []struct {
		name  string
		pause *v1alpha1.RolloutPause
		want  time.Duration
		gate  bool
	}{
		{"none", nil, 0, false},
		{"gate", gatePause(), 0, true},
		{"int seconds", timedPause(intstr.FromInt32(30)), 30 * time.Second, false},
		{"zero", timedPause(intstr.FromInt32(0)), 0, false},
		{"90s", timedPause(intstr.FromString("90s")), 90 * time.Second, false},
		{"10m", timedPause(intstr.FromString("10m")), 10 * time.Minute, false},
		{"1h30m", timedPause(intstr.FromString("1h30m")), 90 * time.Minute, false},
		{"1.5h", timedPause(intstr.FromString("1.5h")), 90 * time.Minute, false},
		{"digits string", timedPause(intstr.FromString("45")), 45 * time.Second, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, gate, err := pauseOf(tt.pause)
			if err != nil || d != tt.want || gate != tt.gate {
				t.Errorf("pauseOf = %v, %v, %v; want %v, %v, nil", d, gate, err, tt.want, tt.gate)
			}
		})
	}
	for _, bad := range []intstr.IntOrString{intstr.FromInt32(-1), intstr.FromString("-5s"), intstr.FromString("tomorrow")} {
		if _, _, err := pauseOf(timedPause(bad)); err == nil {
			t.Errorf("pauseOf(%s): want an error", bad.String())
		}
	}
}

func TestMaxUnavailable(t *testing.T) {
	tests := []struct {
		name string
		ft   *intstr.IntOrString
		want int32
	}{
		{"default from the workload", nil, 3},
		{"number", num(2), 2},
		{"number above the workload", num(20), 10},
		{"percentage rounds down", pct("25%"), 2},
		{"100%", pct("100%"), 10},
		{"0%", pct("0%"), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := echoSpec()
			spec.Strategy.Canary.FailureThreshold = tt.ft
			got, err := maxUnavailable(spec, 10, 3)
			if err != nil || got != tt.want {
				t.Errorf("maxUnavailable = %d, %v; want %d", got, err, tt.want)
			}
		})
	}
	spec := echoSpec()
	spec.Strategy.Canary.FailureThreshold = pct("half")
	if _, err := maxUnavailable(spec, 10, 3); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("bad failureThreshold: err = %v, want ErrInvalidSpec", err)
	}
}

func TestDesiredTraffic(t *testing.T) {
	spec := echoSpec()
	w := func(n int32) Traffic { return Traffic{Mode: TrafficCanary, Weight: n} }
	stable, original := Traffic{Mode: TrafficStable}, Traffic{Mode: TrafficOriginal}
	failed := failedStatus(v1alpha1.ReasonAborted)
	disabled := releasing(2, v1alpha1.StepPaused, 0)
	disabled.Phase = v1alpha1.PhaseDisabled
	held := releasing(2, v1alpha1.StepPaused, 0)
	held.Phase = v1alpha1.PhasePaused
	finished := releasing(3, v1alpha1.StepCompleted, 0)
	finished.StableRevision = "v2"
	tests := []struct {
		name   string
		status *v1alpha1.RolloutStatus
		want   Traffic
	}{
		{"no status", &v1alpha1.RolloutStatus{}, original},
		{"idle", &v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseHealthy, StableRevision: "v1", CanaryRevision: "v1"}, original},
		{"step 1 pods coming up", releasing(1, v1alpha1.StepUpgrade, 0), stable},
		{"step 1 routing", releasing(1, v1alpha1.StepTrafficRouting, 0), w(5)},
		{"step 1 gate", releasing(1, v1alpha1.StepPaused, 0), w(5)},
		{"step 2 pods coming up keep step 1 traffic", releasing(2, v1alpha1.StepUpgrade, 0), w(5)},
		{"step 2 analysis", releasing(2, v1alpha1.StepMetricsAnalysis, 0), w(40)},
		{"step 3 ready", releasing(3, v1alpha1.StepReady, 0), w(100)},
		{"index beyond the steps", releasing(7, v1alpha1.StepPaused, 0), w(100)},
		{"held by paused keeps the traffic", held, w(40)},
		{"finishing after a last step of 100%", releasing(3, v1alpha1.StepCompleted, 0), Traffic{Mode: TrafficPromoted, Weight: 100}},
		{"finishing, promoted at 40%", releasing(2, v1alpha1.StepCompleted, 0), original},
		{"finishing, every pod at the new revision", finished, original},
		{"rolling back", releasing(2, v1alpha1.StepRollingBack, 0), stable},
		{"failed", failed, stable},
		{"disabled", disabled, original},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DesiredTraffic(spec, tt.status); !got.Equal(tt.want) {
				t.Errorf("DesiredTraffic = %+v, want %+v", got, tt.want)
			}
		})
	}
	if got := DesiredTraffic(plainSpec(step("", num(1), nil)), releasing(1, v1alpha1.StepPaused, 0)); got.Mode != TrafficOriginal {
		t.Errorf("without trafficRoutings: DesiredTraffic = %+v, want Original", got)
	}
}

// TestResolveStepsMirror: a mirror step carries no weight and no matches,
// its copies in Traffic.Mirror; the step after it without traffic keeps
// the mirror, a weighted step ends it; a mirror step is never verified
// (the data plane may count the copies); a mirror beside traffic is a
// spec error naming the field.
func TestResolveStepsMirror(t *testing.T) {
	mirror := step("", num(1), gatePause())
	mirror.Mirror = ptr("30%")
	spec := routedSpec(mirror, step("", num(1), nil), step("20%", num(2), nil))
	spec.Strategy.Canary.TrafficRoutings[0].Verify = &v1alpha1.TrafficVerification{}
	got, err := ResolveSteps(spec, 10)
	if err != nil {
		t.Fatalf("ResolveSteps: %v", err)
	}
	var traffic []string
	for _, s := range got {
		traffic = append(traffic, fmt.Sprintf("%s/%d/%d/verify=%t", s.Traffic.String(), s.Traffic.Weight, s.Traffic.Mirror, s.Verify))
	}
	want := "[mirror 30%/0/30/verify=false mirror 30%/0/30/verify=false 20%/20/0/verify=true]"
	if fmt.Sprint(traffic) != want {
		t.Errorf("steps %v, want %s", traffic, want)
	}
	if got[0].Replicas != 1 {
		t.Errorf("mirror step replicas = %d, want 1", got[0].Replicas)
	}
	st := &v1alpha1.RolloutStatus{CanaryRevision: "b", StableRevision: "a", CurrentStepIndex: 1, CurrentStepState: v1alpha1.StepPaused}
	if d := DesiredTraffic(spec, st); d.Mode != TrafficCanary || d.Weight != 0 || d.Mirror != 30 || d.weight() != 0 {
		t.Errorf("DesiredTraffic at the mirror step = %+v, want canary mode with mirror 30 and weight 0", d)
	}

	for _, bad := range []struct{ traffic, mirror string }{{"10%", "30%"}, {"", "0%"}, {"", "30"}} {
		s := step(bad.traffic, num(1), nil)
		s.Mirror = ptr(bad.mirror)
		_, err := ResolveSteps(routedSpec(s), 10)
		var se *SpecError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), "spec.strategy.canary.steps[0].mirror") {
			t.Errorf("traffic %q mirror %q: error %v, want a spec error naming spec.strategy.canary.steps[0].mirror", bad.traffic, bad.mirror, err)
		}
	}
}
