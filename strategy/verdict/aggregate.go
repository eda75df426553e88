package verdict

import (
	"fmt"
	"strings"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// Entry pairs one metric's spec with its current result.
type Entry struct {
	// Metric is the spec from the AnalysisTemplate.
	Metric *v1alpha1.Metric
	// Result is the metric's current result (Template and Metric set).
	Result v1alpha1.MetricResult
}

// Outcome is the verdict over all metrics of an analysis.
type Outcome struct {
	// Phase: Running, Successful, Failed, Inconclusive or Error. The
	// caller treats Error like Failed (the analysis fails safe).
	Phase Phase
	// Message says, for a human, which metric decided and why.
	Message string
	// Template and Metric name the metric that decided a Failed, Error or
	// Inconclusive outcome.
	Template, Metric string
}

// Aggregate folds the metrics of one analysis into one outcome. Metrics
// that are not dry-run decide, in this order: the first Failed or Error
// metric fails the analysis; else the first Inconclusive one makes it
// Inconclusive; else any Running one keeps it Running; else it is
// Successful. Dry-run metrics never decide and never hold the analysis,
// except when every metric is dry-run: then it is Running until all of
// them end, and Successful after. What dry-run metrics would have done is
// appended to the message.
func Aggregate(entries []Entry) Outcome {
	var inconclusive *Entry
	var running, dryNotes []string
	decided := 0
	for i := range entries {
		e := &entries[i]
		phase := Phase(e.Result.Phase)
		if e.Metric.DryRun {
			if phase != PhaseSuccessful && phase.Terminal() {
				dryNotes = append(dryNotes, "dry-run "+describe(e))
			}
			continue
		}
		decided++
		switch phase {
		case PhaseFailed, PhaseError:
			return Outcome{Phase: phase, Message: describe(e), Template: e.Result.Template, Metric: e.Result.Metric}
		case PhaseInconclusive:
			if inconclusive == nil {
				inconclusive = e
			}
		case PhaseSuccessful:
		default:
			running = append(running, fmt.Sprintf("%q", e.Result.Metric))
		}
	}
	var out Outcome
	switch {
	case inconclusive != nil:
		out = Outcome{Phase: PhaseInconclusive, Message: describe(inconclusive),
			Template: inconclusive.Result.Template, Metric: inconclusive.Result.Metric}
	case len(running) > 0:
		out = Outcome{Phase: PhaseRunning, Message: "measuring metrics " + strings.Join(running, ", ")}
	case decided == 0 && !allTerminal(entries):
		out = Outcome{Phase: PhaseRunning, Message: "measuring dry-run metrics"}
	default:
		out = Outcome{Phase: PhaseSuccessful, Message: fmt.Sprintf("%d of %d metrics successful", decided, len(entries))}
	}
	if len(dryNotes) > 0 {
		out.Message += "; " + strings.Join(dryNotes, "; ")
	}
	return out
}

func allTerminal(entries []Entry) bool {
	for _, e := range entries {
		if !Phase(e.Result.Phase).Terminal() {
			return false
		}
	}
	return true
}

// describe explains a metric's terminal phase with its deciding
// measurement, such as
// `metric "error-rate" value 0.12 failed condition "result[0] < 0.05" (template "success-rate": 1 failed, failureLimit 0)`.
func describe(e *Entry) string {
	r := e.Result
	phase := Phase(r.Phase)
	var tail string
	switch phase {
	case PhaseFailed:
		tail = fmt.Sprintf("%d failed, failureLimit %d", r.Failed, e.Metric.FailureLimit)
	case PhaseError:
		tail = fmt.Sprintf("%d consecutive errors, consecutiveErrorLimit %d: failing safe", r.ConsecutiveErrors, ConsecutiveErrorLimit(e.Metric))
	case PhaseInconclusive:
		tail = fmt.Sprintf("%d inconclusive, inconclusiveLimit %d", r.Inconclusive, e.Metric.InconclusiveLimit)
	default:
		return fmt.Sprintf("metric %q is %s", r.Metric, phase)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "metric %q", r.Metric)
	if last, ok := lastWithPhase(r.Measurements, phase); ok {
		if last.Value != "" {
			fmt.Fprintf(&b, " value %s", last.Value)
		}
		switch {
		case last.Message == "":
		case phase == PhaseError:
			fmt.Fprintf(&b, " error: %s", last.Message)
		default:
			fmt.Fprintf(&b, " %s", last.Message)
		}
	}
	fmt.Fprintf(&b, " (template %q: %s)", r.Template, tail)
	return b.String()
}

func lastWithPhase(ms []v1alpha1.Measurement, p Phase) (v1alpha1.Measurement, bool) {
	for i := len(ms) - 1; i >= 0; i-- {
		if Phase(ms[i].Phase) == p {
			return ms[i], true
		}
	}
	return v1alpha1.Measurement{}, false
}
