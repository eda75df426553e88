package main

import (
	"strings"
	"testing"
)

// TestJudge: a figure within its goal is met, one beyond it missed, and
// one the log lacks is not measured, with its benchmark's failure or the
// fact that it did not run.
func TestJudge(t *testing.T) {
	p50 := goals[0] // P1 push p50, at most 1 s
	p4 := goals[8]  // P4, at least 20,000 evals/s per core
	p6 := goals[10] // P6, rollgate's wall time at most 1.2 times the native rollout's
	for _, tc := range []struct {
		name string
		g    goal
		log  string
		want string
	}{
		{"met", p50, "P1 approval latency, push webhook, 50 gates: p50 0.34 s",
			"P1 approval latency, push webhook, p50: 0.34 s (goal <= 1 s): met"},
		{"missed", p50, "P1 approval latency, push webhook, 50 gates: p50 2.30 s",
			"P1 approval latency, push webhook, p50: 2.3 s (goal <= 1 s): missed"},
		{"the last line counts", p50, "P1 approval latency, push webhook, 50 gates: p50 2.30 s\nP1 approval latency, push webhook, 50 gates: p50 0.5 s",
			"P1 approval latency, push webhook, p50: 0.5 s (goal <= 1 s): met"},
		{"at least", p4, "P4 VirtualService evaluations (built-in, Go implementation): 19000 evals/s per core (CPU time)",
			"P4 VirtualService evaluations (built-in, Go implementation): 19000 evals/s per core (goal >= 20000 evals/s per core): missed"},
		{"ratio of two lines", p6, "P6 native cost, native, 10 pods, wall time median 20.0 s, max 22.1 s\nP6 native cost, rollgate, 10 pods, wall time median 26.0 s, max 30.5 s",
			"P6 cost over a native rollout, rollgate wall time median / native wall time median: 1.3 x (goal <= 1.2 x): missed"},
		{"failed", p50, "BenchmarkApprovalLatency\n--- FAIL: BenchmarkApprovalLatency\n    fleet_test.go:120: create kwok cluster: etcd missing\nFAIL",
			"P1 approval latency, push webhook, p50: not measured (goal <= 1 s): missed: BenchmarkApprovalLatency: FAIL: fleet_test.go:120: create kwok cluster: etcd missing"},
		{"did not run", p50, "ok  \tgithub.com/rollgate/rollgate/gitsync\t3.1s",
			"P1 approval latency, push webhook, p50: not measured (goal <= 1 s): missed: BenchmarkApprovalLatency: the benchmark did not run (not in the log)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.g.judge(strings.Split(tc.log, "\n")); got != tc.want {
				t.Errorf("judge:\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}
