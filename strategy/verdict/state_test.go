package verdict

import (
	"fmt"
	"math"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func i32(v int32) *int32 { return &v }

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

// run feeds measurements with the given phases ("S", "F", "I", "E", or
// "-" for nothing due) one minute apart and returns every phase seen.
func run(m *v1alpha1.Metric, step int32, seq string) ([]Phase, v1alpha1.MetricResult) {
	res := v1alpha1.MetricResult{Template: "t", Metric: m.Name, Step: step}
	long := map[byte]Phase{'S': PhaseSuccessful, 'F': PhaseFailed, 'I': PhaseInconclusive, 'E': PhaseError, '?': "Bogus"}
	var phases []Phase
	for i := 0; i < len(seq); i++ {
		var meas *v1alpha1.Measurement
		if seq[i] != '-' {
			meas = &v1alpha1.Measurement{Phase: string(long[seq[i]]), At: metav1.NewTime(t0.Add(time.Duration(i) * time.Minute))}
		}
		var p Phase
		res, p = Advance(m, res, meas)
		phases = append(phases, p)
	}
	return phases, res
}

func TestAdvance(t *testing.T) {
	for _, tc := range []struct {
		name   string
		metric v1alpha1.Metric
		step   int32
		seq    string
		want   string // one letter per measurement: R S F I E
		counts [4]int32
		consec int32
	}{
		{"step default count is one", v1alpha1.Metric{}, 1, "S", "S", [4]int32{1, 0, 0, 0}, 0},
		{"nothing due keeps running", v1alpha1.Metric{}, 1, "--S", "RRS", [4]int32{1, 0, 0, 0}, 0},
		{"first failure fails by default", v1alpha1.Metric{Count: i32(3)}, 1, "SF", "RF", [4]int32{1, 1, 0, 0}, 0},
		{"failure limit tolerates", v1alpha1.Metric{Count: i32(4), FailureLimit: 2}, 1, "FSFS", "RRRS", [4]int32{2, 2, 0, 0}, 0},
		{"failure limit exceeded", v1alpha1.Metric{Count: i32(5), FailureLimit: 1}, 1, "FSF", "RRF", [4]int32{1, 2, 0, 0}, 0},
		{"count reached with failures within limit", v1alpha1.Metric{Count: i32(2), FailureLimit: 1}, 1, "FS", "RS", [4]int32{1, 1, 0, 0}, 0},
		{"inconclusive over limit", v1alpha1.Metric{Count: i32(3)}, 1, "I", "I", [4]int32{0, 0, 1, 0}, 0},
		{"inconclusive within limit", v1alpha1.Metric{Count: i32(3), InconclusiveLimit: 1}, 1, "ISS", "RRS", [4]int32{2, 0, 1, 0}, 0},
		{"default error limit is four", v1alpha1.Metric{Count: i32(3)}, 1, "EEEEE", "RRRRE", [4]int32{0, 0, 0, 5}, 5},
		{"error limit zero", v1alpha1.Metric{Count: i32(3), ConsecutiveErrorLimit: i32(0)}, 1, "E", "E", [4]int32{0, 0, 0, 1}, 1},
		{"good measurement resets consecutive errors", v1alpha1.Metric{Count: i32(2), ConsecutiveErrorLimit: i32(2)}, 1, "EESEES", "RRRRRS", [4]int32{2, 0, 0, 4}, 0},
		{"errors do not count towards count", v1alpha1.Metric{Count: i32(2)}, 1, "SES", "RRS", [4]int32{2, 0, 0, 1}, 0},
		{"unknown phase is an error", v1alpha1.Metric{Count: i32(2), ConsecutiveErrorLimit: i32(0)}, 1, "?", "E", [4]int32{0, 0, 0, 1}, 1},
		{"terminal result ignores later measurements", v1alpha1.Metric{}, 1, "FSS", "FFF", [4]int32{0, 1, 0, 0}, 0},
		{"background runs without end", v1alpha1.Metric{}, 0, "SSSSSSSSSSSS", "RRRRRRRRRRRR", [4]int32{12, 0, 0, 0}, 0},
		{"background fails", v1alpha1.Metric{FailureLimit: 1}, 0, "SFSF", "RRRF", [4]int32{2, 2, 0, 0}, 0},
		{"dry-run is judged like any metric", v1alpha1.Metric{DryRun: true}, 1, "F", "F", [4]int32{0, 1, 0, 0}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.metric
			m.Name = "m"
			phases, res := run(&m, tc.step, tc.seq)
			got := ""
			for _, p := range phases {
				got += string(p[0])
			}
			if got != tc.want {
				t.Errorf("phases after each measurement = %s, want %s", got, tc.want)
			}
			counts := [4]int32{res.Successful, res.Failed, res.Inconclusive, res.Errors}
			if counts != tc.counts || res.ConsecutiveErrors != tc.consec {
				t.Errorf("counts (S,F,I,E) = %v consecutive %d, want %v consecutive %d", counts, res.ConsecutiveErrors, tc.counts, tc.consec)
			}
		})
	}
}

func TestAdvanceKeepsTenNewest(t *testing.T) {
	m := v1alpha1.Metric{Name: "m"}
	_, res := run(&m, 0, "SSSSSSSSSSSSSSS")
	if len(res.Measurements) != MaxMeasurements {
		t.Fatalf("kept %d measurements, want %d", len(res.Measurements), MaxMeasurements)
	}
	if got, want := res.Measurements[0].At.Time, t0.Add(5*time.Minute); !got.Equal(want) {
		t.Fatalf("oldest kept measurement at %v, want %v (the 6th of 15)", got, want)
	}
	if res.Successful != 15 {
		t.Fatalf("Successful = %d, want 15: counters keep counting", res.Successful)
	}
}

func TestAdvanceDoesNotModifyPrevious(t *testing.T) {
	m := v1alpha1.Metric{Name: "m", Count: i32(5)}
	_, prev := run(&m, 1, "SS")
	before := fmt.Sprint(prev)
	Advance(&m, prev, &v1alpha1.Measurement{Phase: string(PhaseFailed), At: metav1.NewTime(t0)})
	if after := fmt.Sprint(prev); after != before {
		t.Fatalf("Advance modified its input:\nbefore %s\nafter  %s", before, after)
	}
}

func TestJudge(t *testing.T) {
	both := mustConditions(t, "result[0] < 0.05", "result[0] > 0.10")
	onlySuccess := mustConditions(t, "result[0] < 0.05", "")
	onlyFailure := mustConditions(t, "", "result[0] > 0.10")
	for _, tc := range []struct {
		name  string
		c     Conditions
		value Value
		err   error
		want  Phase
		msg   string
	}{
		{"success", both, List([]float64{0.01}), nil, PhaseSuccessful, `met condition "result[0] < 0.05"`},
		{"failure wins", both, List([]float64{0.2}), nil, PhaseFailed, `met failure condition "result[0] > 0.10"`},
		{"neither decides", both, List([]float64{0.07}), nil, PhaseInconclusive, "but did not meet failure condition"},
		{"only success, false fails", onlySuccess, List([]float64{0.07}), nil, PhaseFailed, `failed condition "result[0] < 0.05"`},
		{"only failure, false passes", onlyFailure, List([]float64{0.07}), nil, PhaseSuccessful, "did not meet failure condition"},
		{"only failure, true fails", onlyFailure, List([]float64{0.2}), nil, PhaseFailed, "met failure condition"},
		{"empty vector", both, List(nil), nil, PhaseError, "no data"},
		{"empty matrix", both, Matrix([][]float64{{}, {}}), nil, PhaseError, "no data"},
		{"NaN", onlyFailure, List([]float64{math.NaN()}), nil, PhaseError, "NaN"},
		{"NaN in one series", onlySuccess, List([]float64{0.01, math.NaN()}), nil, PhaseError, "NaN"},
		{"provider error", both, Value{}, fmt.Errorf("connection refused"), PhaseError, "connection refused"},
		{"condition cannot evaluate", onlySuccess, Scalar(0.01), nil, PhaseError, "evaluating condition"},
		{"no condition", Conditions{}, List([]float64{0.01}), nil, PhaseError, "no condition"},
		{"zero value without error", onlySuccess, Value{}, nil, PhaseError, "no data"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := Judge(tc.c, tc.value, tc.err, t0)
			if Phase(m.Phase) != tc.want || !contains(m.Message, tc.msg) {
				t.Fatalf("Judge = %s %q, want %s with %q", m.Phase, m.Message, tc.want, tc.msg)
			}
			if !m.At.Time.Equal(t0) {
				t.Fatalf("At = %v, want %v", m.At, t0)
			}
		})
	}
}

func mustConditions(t *testing.T, success, failure string) Conditions {
	t.Helper()
	c, err := CompileMetric(&v1alpha1.Metric{SuccessCondition: success, FailureCondition: failure})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
