package verdict

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

func TestNextMeasurementAt(t *testing.T) {
	last := func(p Phase, at time.Time) v1alpha1.MetricResult {
		return v1alpha1.MetricResult{Phase: string(PhaseRunning), Measurements: []v1alpha1.Measurement{{Phase: string(p), At: metav1.NewTime(at)}}}
	}
	for _, tc := range []struct {
		name   string
		metric v1alpha1.Metric
		result v1alpha1.MetricResult
		want   time.Time
	}{
		{"first, no delay", v1alpha1.Metric{}, v1alpha1.MetricResult{}, t0},
		{"first, initial delay", v1alpha1.Metric{InitialDelay: dur(2 * time.Minute)}, v1alpha1.MetricResult{}, t0.Add(2 * time.Minute)},
		{"default interval", v1alpha1.Metric{}, last(PhaseSuccessful, t0.Add(time.Hour)), t0.Add(time.Hour + time.Minute)},
		{"interval", v1alpha1.Metric{Interval: dur(5 * time.Minute)}, last(PhaseFailed, t0), t0.Add(5 * time.Minute)},
		{"initial delay only counts once", v1alpha1.Metric{InitialDelay: dur(time.Hour), Interval: dur(time.Minute)}, last(PhaseSuccessful, t0), t0.Add(time.Minute)},
		{"error retries sooner", v1alpha1.Metric{Interval: dur(5 * time.Minute)}, last(PhaseError, t0), t0.Add(ErrorRetryInterval)},
		{"error retry never later than interval", v1alpha1.Metric{Interval: dur(2 * time.Second)}, last(PhaseError, t0), t0.Add(2 * time.Second)},
		{"terminal: never", v1alpha1.Metric{}, v1alpha1.MetricResult{Phase: string(PhaseSuccessful)}, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := NextMeasurementAt(&tc.metric, tc.result, t0); !got.Equal(tc.want) {
				t.Fatalf("NextMeasurementAt = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDue(t *testing.T) {
	m := v1alpha1.Metric{InitialDelay: dur(time.Minute)}
	if Due(&m, v1alpha1.MetricResult{}, t0, t0.Add(59*time.Second)) {
		t.Error("due before the initial delay")
	}
	if !Due(&m, v1alpha1.MetricResult{}, t0, t0.Add(time.Minute)) {
		t.Error("not due at the end of the initial delay")
	}
	if Due(&m, v1alpha1.MetricResult{Phase: string(PhaseFailed)}, t0, t0.Add(time.Hour)) {
		t.Error("a failed metric is due")
	}
}

func TestAggregate(t *testing.T) {
	failed := v1alpha1.MetricResult{Template: "success-rate", Metric: "error-rate", Phase: string(PhaseFailed), Failed: 1,
		Measurements: []v1alpha1.Measurement{{Phase: string(PhaseFailed), Value: "0.12", Message: `failed condition "result[0] < 0.05"`}}}
	errored := v1alpha1.MetricResult{Template: "t", Metric: "latency", Phase: string(PhaseError), ConsecutiveErrors: 5, Errors: 5,
		Measurements: []v1alpha1.Measurement{{Phase: string(PhaseError), Message: "connection refused"}}}
	inconclusive := v1alpha1.MetricResult{Template: "t", Metric: "p99", Phase: string(PhaseInconclusive), Inconclusive: 1,
		Measurements: []v1alpha1.Measurement{{Phase: string(PhaseInconclusive), Value: "0.3", Message: "failed condition"}}}
	ok := func(name string) v1alpha1.MetricResult {
		return v1alpha1.MetricResult{Template: "t", Metric: name, Phase: string(PhaseSuccessful)}
	}
	running := v1alpha1.MetricResult{Template: "t", Metric: "slow", Phase: string(PhaseRunning)}
	real, dry := &v1alpha1.Metric{}, &v1alpha1.Metric{DryRun: true}
	for _, tc := range []struct {
		name    string
		entries []Entry
		want    Phase
		msg     string
	}{
		{"all successful", []Entry{{real, ok("a")}, {real, ok("b")}}, PhaseSuccessful, "2 of 2 metrics successful"},
		{"failure names metric, value and condition", []Entry{{real, ok("a")}, {real, failed}}, PhaseFailed,
			`metric "error-rate" value 0.12 failed condition "result[0] < 0.05" (template "success-rate": 1 failed, failureLimit 0)`},
		{"failure beats running", []Entry{{real, running}, {real, failed}}, PhaseFailed, `metric "error-rate"`},
		{"error fails safe", []Entry{{real, errored}, {real, ok("a")}}, PhaseError, `metric "latency" error: connection refused (template "t": 5 consecutive errors, consecutiveErrorLimit 4: failing safe)`},
		{"inconclusive waits for a human", []Entry{{real, inconclusive}, {real, ok("a")}}, PhaseInconclusive, `metric "p99" value 0.3`},
		{"failure beats inconclusive", []Entry{{real, inconclusive}, {real, failed}}, PhaseFailed, `metric "error-rate"`},
		{"running", []Entry{{real, running}, {real, ok("a")}}, PhaseRunning, `measuring metrics "slow"`},
		{"dry-run failure does not fail", []Entry{{dry, failed}, {real, ok("a")}}, PhaseSuccessful, `1 of 2 metrics successful; dry-run metric "error-rate" value 0.12`},
		{"dry-run error does not fail", []Entry{{dry, errored}, {real, ok("a")}}, PhaseSuccessful, "dry-run metric \"latency\" error"},
		{"dry-run running does not hold", []Entry{{dry, running}, {real, ok("a")}}, PhaseSuccessful, "1 of 2"},
		{"only dry-run: waits for it", []Entry{{dry, running}}, PhaseRunning, "dry-run"},
		{"only dry-run: ends", []Entry{{dry, failed}}, PhaseSuccessful, "0 of 1 metrics successful; dry-run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := Aggregate(tc.entries)
			if out.Phase != tc.want || !contains(out.Message, tc.msg) {
				t.Fatalf("Aggregate = %s %q, want %s with %q", out.Phase, out.Message, tc.want, tc.msg)
			}
		})
	}
}
