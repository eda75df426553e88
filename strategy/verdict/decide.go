package verdict

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// Phase is the state of a measurement, a metric or a whole analysis. The
// values are those stored in status.analysis[].phase.
type Phase string

// Phases of measurements, metrics and analyses.
const (
	// PhaseNone: no analysis runs, or none has reported yet (never the
	// phase of a measurement or a metric).
	PhaseNone Phase = ""
	// PhaseRunning: the metric still takes measurements (never a
	// measurement's phase).
	PhaseRunning Phase = "Running"
	// PhaseSuccessful: the value passed; the metric reached its count.
	PhaseSuccessful Phase = "Successful"
	// PhaseFailed: the value failed; the metric exceeded its failureLimit.
	PhaseFailed Phase = "Failed"
	// PhaseInconclusive: neither condition decided; the metric exceeded
	// its inconclusiveLimit and a human must decide.
	PhaseInconclusive Phase = "Inconclusive"
	// PhaseError: no usable value (provider error, empty result, NaN); the
	// metric exceeded its consecutiveErrorLimit. The caller treats an
	// Error outcome as a failure: analysis fails safe.
	PhaseError Phase = "Error"
)

// Terminal reports whether p ends a metric or an analysis.
func (p Phase) Terminal() bool {
	return p == PhaseSuccessful || p == PhaseFailed || p == PhaseInconclusive || p == PhaseError
}

// Sentinel errors a provider may return (wrapped) and that Judge reports.
var (
	// ErrNoData: the query returned nothing (no series, no sample).
	ErrNoData = errors.New("query returned no data")
	// ErrNaN: the query returned NaN, such as 0/0 when there is no traffic.
	ErrNaN = errors.New("query returned NaN")
)

// maxMessage bounds a measurement's message.
const maxMessage = 512

// Judge turns a provider's answer into a measurement taken at now:
//
//   - measureErr != nil, an empty value or a NaN anywhere in the value:
//     Error (never a pass).
//   - failureCondition true: Failed.
//   - successCondition true: Successful.
//   - successCondition false: Failed when it is the only condition,
//     Inconclusive when a failureCondition is also set.
//   - only failureCondition, and it is false: Successful.
//   - a condition that cannot be evaluated on this value: Error.
func Judge(c Conditions, v Value, measureErr error, now time.Time) v1alpha1.Measurement {
	m := v1alpha1.Measurement{At: metav1.NewTime(now)}
	if measureErr != nil {
		return withPhase(m, PhaseError, measureErr.Error())
	}
	if v.Empty() {
		return withPhase(m, PhaseError, ErrNoData.Error())
	}
	m.Value = v.String()
	if v.HasNaN() {
		return withPhase(m, PhaseError, ErrNaN.Error())
	}
	phase, msg := decide(c, v)
	return withPhase(m, phase, msg)
}

func decide(c Conditions, v Value) (Phase, string) {
	if c.Success.IsZero() && c.Failure.IsZero() {
		return PhaseError, "metric has no condition"
	}
	if !c.Failure.IsZero() {
		failed, err := c.Failure.Eval(v)
		if err != nil {
			return PhaseError, fmt.Sprintf("evaluating failure condition %q: %v", c.Failure, err)
		}
		if failed {
			return PhaseFailed, fmt.Sprintf("met failure condition %q", c.Failure)
		}
	}
	if c.Success.IsZero() {
		return PhaseSuccessful, fmt.Sprintf("did not meet failure condition %q", c.Failure)
	}
	ok, err := c.Success.Eval(v)
	switch {
	case err != nil:
		return PhaseError, fmt.Sprintf("evaluating condition %q: %v", c.Success, err)
	case ok:
		return PhaseSuccessful, fmt.Sprintf("met condition %q", c.Success)
	case c.Failure.IsZero():
		return PhaseFailed, fmt.Sprintf("failed condition %q", c.Success)
	default:
		return PhaseInconclusive, fmt.Sprintf("failed condition %q but did not meet failure condition %q", c.Success, c.Failure)
	}
}

func withPhase(m v1alpha1.Measurement, p Phase, msg string) v1alpha1.Measurement {
	m.Phase = string(p)
	m.Message = truncate(msg, maxMessage)
	return m
}

// WithNote appends a provider's note (a Job's outcome and the last lines
// of its log) to m's message, within the message's bound: when it does
// not fit, the note keeps its end, where a log's last lines are.
func WithNote(m v1alpha1.Measurement, note string) v1alpha1.Measurement {
	if note == "" {
		return m
	}
	head := truncate(m.Message, maxMessage/4) + "; "
	room := maxMessage - len(head)
	if len(note) > room {
		cut := len(note) - (room - 3)
		for cut < len(note) && !utf8.RuneStart(note[cut]) {
			cut++
		}
		note = "..." + note[cut:]
	}
	m.Message = head + note
	return m
}
