package strategy

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
	k8sfield "k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/strategy/verdict"
)

// Step is one step of a release resolved against the workload's size: the
// numbers the planner acts on.
type Step struct {
	// Replicas is how many pods of the new revision the step asks for.
	Replicas int32
	// Traffic is what the routers carry once the step's traffic is
	// applied. A step that sets none of traffic, matches and
	// requestHeaderModifier keeps the traffic of the step before it; before
	// the first such step all traffic goes to the stable revision.
	Traffic Traffic
	// Pause is how long the step waits once its traffic and analysis are
	// done; zero when it does not wait for a time.
	Pause time.Duration
	// Gate is true when the step waits for an approval (a pause without
	// duration).
	Gate bool
	// Analysis is true when the step runs metric analysis: its own, or the
	// verification of its traffic share (Verify).
	Analysis bool
	// Verify is true when the step's traffic share is measured from the
	// data plane (a traffic routing sets verify and the step's traffic is
	// a weight; not a mirror step, whose copies the data plane may count).
	Verify bool
}

// ResolveSteps resolves the steps of spec against a workload of replicas
// pods. It fails with a *SpecError when a value cannot be parsed, when a step
// has neither replicas nor traffic, or when replicas decrease from one step
// to the next once resolved (mixing numbers and percentages can do that).
func ResolveSteps(spec *v1alpha1.RolloutSpec, replicas int32) ([]Step, error) {
	raw, field, err := specSteps(spec)
	if err != nil {
		return nil, err
	}
	routed := len(spec.Strategy.TrafficRoutings()) > 0
	verify := verifies(spec)
	out := make([]Step, len(raw))
	prev := baseTraffic(routed)
	for i := range raw {
		f := fmt.Sprintf("%s.steps[%d]", field, i)
		s, err := resolveStep(&raw[i], f, replicas, prev, routed)
		if err != nil {
			return nil, err
		}
		if i > 0 && s.Replicas < out[i-1].Replicas {
			return nil, specErrorf(f+".replicas",
				"step %d resolves to %d of %d pods, fewer than the %d of step %d: replicas must not decrease from one step to the next",
				i+1, s.Replicas, replicas, out[i-1].Replicas, i)
		}
		if verify && s.Traffic.Mode == TrafficCanary && len(s.Traffic.Matches) == 0 && s.Traffic.Mirror == 0 {
			s.Verify, s.Analysis = true, true
		}
		if h := raw[i].Hooks; h != nil {
			p := k8sfield.NewPath(f, "hooks")
			if errs := append(verdict.ValidateHooks(h.Before, p.Child("before")), verdict.ValidateHooks(h.After, p.Child("after"))...); len(errs) > 0 {
				return nil, specErrorf(errs[0].Field, "%s", errs[0].ErrorBody())
			}
		}
		out[i] = s
		prev = s.Traffic
	}
	if errs := verdict.ValidateHooks(spec.Strategy.OnRollback, k8sfield.NewPath("spec", "strategy", "onRollback")); len(errs) > 0 {
		return nil, specErrorf(errs[0].Field, "%s", errs[0].ErrorBody())
	}
	return out, nil
}

// verifies reports whether a traffic routing of spec measures the canary's
// share from the data plane.
func verifies(spec *v1alpha1.RolloutSpec) bool {
	for _, r := range spec.Strategy.TrafficRoutings() {
		if r.Verify != nil {
			return true
		}
	}
	return false
}

// ResolveReplicas resolves a number of pods or a percentage of replicas.
// Percentages round up, so that any percentage of at least 1% asks for at
// least one pod; the result never exceeds replicas.
func ResolveReplicas(v intstr.IntOrString, replicas int32) (int32, error) {
	replicas = max(replicas, 0)
	if v.Type == intstr.Int {
		if v.IntVal < 0 {
			return 0, fmt.Errorf("%d is negative", v.IntVal)
		}
		return min(v.IntVal, replicas), nil
	}
	pct, err := parsePercent(v.StrVal)
	if err != nil {
		return 0, err
	}
	return percentOf(pct, replicas, true), nil
}

// resolveStep resolves one step; prev is the traffic of the step before.
func resolveStep(st *v1alpha1.CanaryStep, field string, replicas int32, prev Traffic, routed bool) (Step, error) {
	var s Step
	var err error
	if s.Traffic, err = stepTraffic(st, field, prev, routed); err != nil {
		return s, err
	}
	switch {
	case st.Replicas != nil:
		if s.Replicas, err = ResolveReplicas(*st.Replicas, replicas); err != nil {
			return s, specErrorf(field+".replicas", "%v: use a number of pods or a percentage such as \"20%%\"", err)
		}
	case st.Traffic != nil:
		pct, err := parsePercent(*st.Traffic)
		if err != nil {
			return s, specErrorf(field+".traffic", "%v", err)
		}
		s.Replicas = percentOf(pct, replicas, true)
	default:
		return s, specErrorf(field+".replicas", "the step sets neither replicas nor traffic: set replicas, or traffic for replicas to follow")
	}
	if s.Pause, s.Gate, err = pauseOf(st.Pause); err != nil {
		return s, specErrorf(field+".pause.duration", "%v", err)
	}
	s.Analysis = st.Analysis != nil
	return s, nil
}

// stepTraffic is the traffic of one step given the traffic before it.
func stepTraffic(st *v1alpha1.CanaryStep, field string, prev Traffic, routed bool) (Traffic, error) {
	if !routed {
		return Traffic{Mode: TrafficOriginal}, nil
	}
	ts := &st.TrafficRoutingStrategy
	if ts.Traffic == nil && len(ts.Matches) == 0 && ts.RequestHeaderModifier == nil && ts.Mirror == nil {
		return prev, nil
	}
	t := Traffic{Mode: TrafficCanary}
	if ts.Mirror != nil {
		// A mirror step sends no live request to the canary; the API
		// refuses traffic, matches and requestHeaderModifier beside it.
		if ts.Traffic != nil || len(ts.Matches) > 0 || ts.RequestHeaderModifier != nil {
			return t, specErrorf(field+".mirror", "a mirror step answers every request from the old revision: remove traffic, matches and requestHeaderModifier")
		}
		m, err := parsePercent(*ts.Mirror)
		if err != nil || m == 0 {
			return t, specErrorf(field+".mirror", "%q is not a percentage from \"1%%\" to \"100%%\"", *ts.Mirror)
		}
		t.Mirror = m
		return t, nil
	}
	if ts.Traffic != nil {
		w, err := parsePercent(*ts.Traffic)
		if err != nil {
			return t, specErrorf(field+".traffic", "%v", err)
		}
		t.Weight = w
	}
	for i := range ts.Matches {
		t.Matches = append(t.Matches, *ts.Matches[i].DeepCopy())
	}
	if ts.RequestHeaderModifier != nil {
		t.RequestHeaderModifier = ts.RequestHeaderModifier.DeepCopy()
	}
	return t, nil
}

// trafficAt is the traffic once step idx (1-based) applied its traffic; idx
// 0 is the traffic before the first step.
func trafficAt(spec *v1alpha1.RolloutSpec, idx int) (Traffic, error) {
	raw, field, err := specSteps(spec)
	if err != nil {
		return Traffic{}, err
	}
	routed := len(spec.Strategy.TrafficRoutings()) > 0
	t := baseTraffic(routed)
	for i := 0; i < idx && i < len(raw); i++ {
		if t, err = stepTraffic(&raw[i], fmt.Sprintf("%s.steps[%d]", field, i), t, routed); err != nil {
			return t, err
		}
	}
	return t, nil
}

// baseTraffic is the traffic of a release before any step set traffic.
func baseTraffic(routed bool) Traffic {
	if routed {
		return Traffic{Mode: TrafficStable}
	}
	return Traffic{Mode: TrafficOriginal}
}

// pauseOf parses a pause: a timed pause returns its duration, a pause
// without duration is a gate.
func pauseOf(p *v1alpha1.RolloutPause) (time.Duration, bool, error) {
	if p == nil {
		return 0, false, nil
	}
	if p.Duration == nil {
		return 0, true, nil
	}
	d, err := parsePauseDuration(*p.Duration)
	return d, false, err
}

// parsePauseDuration reads seconds as an integer (or a string of digits)
// or a Go duration such as "90s" or "1h30m".
func parsePauseDuration(v intstr.IntOrString) (time.Duration, error) {
	if v.Type == intstr.Int {
		if v.IntVal < 0 {
			return 0, fmt.Errorf("%d seconds is negative", v.IntVal)
		}
		return time.Duration(v.IntVal) * time.Second, nil
	}
	s := strings.TrimSpace(v.StrVal)
	if n, err := strconv.ParseUint(s, 10, 31); err == nil {
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is neither a number of seconds nor a duration such as \"90s\" or \"10m\"", v.StrVal)
	}
	if d < 0 {
		return 0, fmt.Errorf("%q is negative", v.StrVal)
	}
	return d, nil
}

// parsePercent reads "0%" to "100%".
func parsePercent(s string) (int32, error) {
	digits, ok := strings.CutSuffix(s, "%")
	n, err := strconv.ParseUint(digits, 10, 8)
	if !ok || err != nil || n > 100 {
		return 0, fmt.Errorf("%q is not a percentage from \"0%%\" to \"100%%\"", s)
	}
	return int32(n), nil
}

// percentOf is pct percent of n, rounded up or down, never above n.
func percentOf(pct, n int32, up bool) int32 {
	v := int64(pct) * int64(n)
	if up {
		v += 99
	}
	return min(int32(v/100), n)
}

// specSteps returns the steps of the strategy and the path of the strategy.
func specSteps(spec *v1alpha1.RolloutSpec) ([]v1alpha1.CanaryStep, string, error) {
	var steps []v1alpha1.CanaryStep
	var field string
	switch s := spec.Strategy; {
	case s.Canary != nil:
		steps, field = s.Canary.Steps, "spec.strategy.canary"
	case s.BlueGreen != nil:
		steps, field = s.BlueGreen.Steps, "spec.strategy.blueGreen"
	default:
		return nil, "", specErrorf("spec.strategy", "set canary or blueGreen")
	}
	if len(steps) == 0 {
		return nil, field, specErrorf(field+".steps", "a release needs at least one step")
	}
	return steps, field, nil
}

// maxUnavailable resolves failureThreshold against replicas (rounded down,
// like a workload's maxUnavailable), or returns def when it is unset.
func maxUnavailable(spec *v1alpha1.RolloutSpec, replicas, def int32) (int32, error) {
	var ft *intstr.IntOrString
	field := "spec.strategy.canary.failureThreshold"
	switch s := spec.Strategy; {
	case s.Canary != nil:
		ft = s.Canary.FailureThreshold
	case s.BlueGreen != nil:
		ft, field = s.BlueGreen.FailureThreshold, "spec.strategy.blueGreen.failureThreshold"
	}
	replicas = max(replicas, 0)
	if ft == nil {
		return max(def, 0), nil
	}
	if ft.Type == intstr.Int {
		if ft.IntVal < 0 {
			return def, specErrorf(field, "%d is negative", ft.IntVal)
		}
		return min(ft.IntVal, replicas), nil
	}
	pct, err := parsePercent(ft.StrVal)
	if err != nil {
		return def, specErrorf(field, "%v", err)
	}
	return percentOf(pct, replicas, false), nil
}
