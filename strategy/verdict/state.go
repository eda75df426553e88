package verdict

import (
	"time"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// Defaults and bounds of the measurement state machine.
const (
	// MaxMeasurements is how many measurements a MetricResult keeps; the
	// oldest are dropped (the counters keep counting).
	MaxMeasurements = 10
	// DefaultInterval is the interval of a metric that sets none.
	DefaultInterval = time.Minute
	// DefaultConsecutiveErrorLimit is the consecutiveErrorLimit of a
	// metric that sets none.
	DefaultConsecutiveErrorLimit = 4
	// ErrorRetryInterval is how soon a measurement is retried after an
	// error, when the metric's interval is longer.
	ErrorRetryInterval = 10 * time.Second
)

// Advance records one measurement in a metric's result and returns the new
// result and the metric's phase; meas nil means nothing was measured (not
// yet due), and only the phase is brought up to date. prev is not modified.
// A result already in a terminal phase does not change.
//
// An Error measurement increments Errors and ConsecutiveErrors; any other
// measurement resets ConsecutiveErrors to zero.
func Advance(m *v1alpha1.Metric, prev v1alpha1.MetricResult, meas *v1alpha1.Measurement) (v1alpha1.MetricResult, Phase) {
	res := *prev.DeepCopy()
	if Phase(res.Phase).Terminal() {
		return res, Phase(res.Phase)
	}
	if meas != nil {
		record(&res, *meas)
	}
	phase := MetricPhase(m, res)
	res.Phase = string(phase)
	return res, phase
}

func record(res *v1alpha1.MetricResult, meas v1alpha1.Measurement) {
	switch Phase(meas.Phase) {
	case PhaseSuccessful:
		res.Successful++
	case PhaseFailed:
		res.Failed++
	case PhaseInconclusive:
		res.Inconclusive++
	default:
		// Anything else, including an unknown phase, is an error: it never
		// counts as a pass.
		meas.Phase = string(PhaseError)
		res.Errors++
		res.ConsecutiveErrors++
	}
	if Phase(meas.Phase) != PhaseError {
		res.ConsecutiveErrors = 0
	}
	res.Measurements = append(res.Measurements, meas)
	if n := len(res.Measurements); n > MaxMeasurements {
		res.Measurements = append([]v1alpha1.Measurement(nil), res.Measurements[n-MaxMeasurements:]...)
	}
}

// MetricPhase derives a metric's phase from its counters, checking in this
// order: Failed (Failed > failureLimit), Error (ConsecutiveErrors >
// consecutiveErrorLimit), Inconclusive (Inconclusive > inconclusiveLimit),
// Successful (count decided measurements taken), else Running. Errors do
// not count towards count.
func MetricPhase(m *v1alpha1.Metric, res v1alpha1.MetricResult) Phase {
	switch {
	case res.Failed > m.FailureLimit:
		return PhaseFailed
	case res.ConsecutiveErrors > ConsecutiveErrorLimit(m):
		return PhaseError
	case res.Inconclusive > m.InconclusiveLimit:
		return PhaseInconclusive
	}
	count := EffectiveCount(m, res.Step)
	if count > 0 && res.Successful+res.Failed+res.Inconclusive >= count {
		return PhaseSuccessful
	}
	return PhaseRunning
}

// EffectiveCount is how many decided measurements complete the metric: its
// count, or when unset one for a step analysis (step > 0) and 0, meaning
// unlimited, for background analysis (step 0).
func EffectiveCount(m *v1alpha1.Metric, step int32) int32 {
	switch {
	case m.Count != nil:
		return *m.Count
	case step > 0:
		return 1
	default:
		return 0
	}
}

// ConsecutiveErrorLimit is the metric's consecutiveErrorLimit or
// DefaultConsecutiveErrorLimit.
func ConsecutiveErrorLimit(m *v1alpha1.Metric) int32 {
	if m.ConsecutiveErrorLimit != nil {
		return *m.ConsecutiveErrorLimit
	}
	return DefaultConsecutiveErrorLimit
}

// Interval is the metric's interval or DefaultInterval.
func Interval(m *v1alpha1.Metric) time.Duration {
	if m.Interval != nil && m.Interval.Duration > 0 {
		return m.Interval.Duration
	}
	return DefaultInterval
}

// NextMeasurementAt says when the metric is next due: startedAt plus
// initialDelay for the first measurement, the last measurement plus the
// interval after that, and after an Error the last measurement plus the
// shorter of the interval and ErrorRetryInterval. It returns the zero time
// when the metric is in a terminal phase.
func NextMeasurementAt(m *v1alpha1.Metric, res v1alpha1.MetricResult, startedAt time.Time) time.Time {
	if Phase(res.Phase).Terminal() {
		return time.Time{}
	}
	if len(res.Measurements) == 0 {
		if m.InitialDelay != nil && m.InitialDelay.Duration > 0 {
			return startedAt.Add(m.InitialDelay.Duration)
		}
		return startedAt
	}
	last := res.Measurements[len(res.Measurements)-1]
	wait := Interval(m)
	if Phase(last.Phase) == PhaseError {
		wait = min(wait, ErrorRetryInterval)
	}
	return last.At.Add(wait)
}

// Due reports whether the metric should be measured at now.
func Due(m *v1alpha1.Metric, res v1alpha1.MetricResult, startedAt, now time.Time) bool {
	next := NextMeasurementAt(m, res, startedAt)
	return !next.IsZero() && !now.Before(next)
}
