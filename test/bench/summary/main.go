// Command summary prints the P-figures of a `make bench` log against the
// goals of docs/benchmarks.md: per figure its value, its goal and "met"
// or "missed", so that a regression shows in the first run after it. A
// figure the log does not hold is "not measured", with why: the failure
// its benchmark printed, or that the benchmark did not run.
//
//	go run ./test/bench/summary -commit "$(git rev-parse --short HEAD)" bin/bench.log
package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// goal is one P-figure of docs/benchmarks.md and the value it must keep
// to.
type goal struct {
	// figure names it; bench is the benchmark that prints it.
	figure, bench string
	// value reads the figure from the log's lines, or says why it cannot.
	value func(lines []string) (float64, error)
	// most, when set, is the highest value that meets the goal; else
	// least is the lowest.
	most, least *float64
	unit        string
}

func atMost(v float64) *float64  { return &v }
func atLeast(v float64) *float64 { return &v }

// goals are the P-figures of docs/benchmarks.md, in its order.
var goals = []goal{
	{figure: "P1 approval latency, push webhook, p50", bench: "BenchmarkApprovalLatency",
		value: line(`^P1 approval latency, push webhook, \d+ gates: p50 ([\d.]+) s$`), most: atMost(1), unit: "s"},
	{figure: "P1 approval latency, push webhook, p99", bench: "BenchmarkApprovalLatency",
		value: line(`^P1 approval latency, push webhook, \d+ gates: p99 ([\d.]+) s$`), most: atMost(3), unit: "s"},
	{figure: "P1 approval latency, polling every 5 s, p99 (interval + 1 s)", bench: "BenchmarkApprovalLatency",
		value: line(`^P1 approval latency, polling every 5s, \d+ gates: p99 ([\d.]+) s$`), most: atMost(6), unit: "s"},
	{figure: "P2 scale, reconcile p99 during the release", bench: "BenchmarkScale",
		value: line(`^P2 scale, \d+ Rollouts, reconcile p99 during the release: ([\d.]+) ms$`), most: atMost(1000), unit: "ms"},
	{figure: "P2 scale, RSS with the releases at their gates", bench: "BenchmarkScale",
		value: line(`^P2 scale, \d+ Rollouts, RSS with \d+ releases at their gates: ([\d.]+) MiB$`), most: atMost(1024), unit: "MiB"},
	{figure: "P3 write-back, window 10s, every state in Git after", bench: "BenchmarkWriteBack1000",
		value: line(`^P3 write-back, \d+ Rollouts at once, window 10s, foreign pushes at 10 Hz: every state in Git after ([\d.]+) s$`), most: atMost(10), unit: "s"},
	{figure: "P3 write-back, window 10s, status commits", bench: "BenchmarkWriteBack1000",
		value: line(`^P3 write-back, window 10s: status commits (\d+)$`), most: atMost(5), unit: "commits"},
	{figure: "P3 write-back, window 10s, states lost", bench: "BenchmarkWriteBack1000",
		value: line(`^P3 write-back, window 10s: states lost (\d+) of \d+$`), most: atMost(0), unit: "states"},
	{figure: "P4 VirtualService evaluations (built-in, Go implementation)", bench: "BenchmarkRunVirtualServicePooled",
		value: line(`^P4 VirtualService evaluations \(built-in, Go implementation\): ([\d.]+) evals/s per core \(CPU time\)$`), least: atLeast(20000), unit: "evals/s per core"},
	{figure: "P5 side by side, rollgate, 50 Rollouts, step 1 p50 / floor p50", bench: "BenchmarkSideBySide",
		value: ratio(`^P5 side by side, rollgate, 50 Rollouts, time to step 1 p50: ([\d.]+) s$`,
			`^P5 side by side, rollgate, 50 Rollouts, floor \(plain Deployment, first new pod ready\) p50: ([\d.]+) s$`), most: atMost(1.2), unit: "x"},
	{figure: "P6 cost over a native rollout, rollgate wall time median / native wall time median", bench: "BenchmarkNativeCost",
		value: ratio(`^P6 native cost, rollgate, \d+ pods, wall time median ([\d.]+) s, max [\d.]+ s$`,
			`^P6 native cost, native, \d+ pods, wall time median ([\d.]+) s, max [\d.]+ s$`), most: atMost(1.2), unit: "x"},
	{figure: "P6 cost over a native rollout, failed requests, native", bench: "BenchmarkNativeCost",
		value: line(`^P6 native cost, native, failed requests (\d+) of \d+$`), most: atMost(0), unit: "requests"},
	{figure: "P6 cost over a native rollout, failed requests, rollgate", bench: "BenchmarkNativeCost",
		value: line(`^P6 native cost, rollgate, failed requests (\d+) of \d+$`), most: atMost(0), unit: "requests"},
}

func main() {
	commit := flag.String("commit", "", "the commit the log was measured at, printed with the summary")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: summary [-commit <commit>] <bench log>")
		os.Exit(2)
	}
	data, err := os.ReadFile(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	summarize(os.Stdout, *commit, strings.Split(string(data), "\n"))
}

// summarize writes the summary of the log's lines to w.
func summarize(w io.Writer, commit string, lines []string) {
	title := "== P-figures against their goals (docs/benchmarks.md)"
	if commit != "" {
		title += ", measured at " + commit
	}
	fmt.Fprintln(w, title+" ==")
	for _, g := range goals {
		fmt.Fprintln(w, g.judge(lines))
	}
}

// judge is the summary line of g.
func (g goal) judge(lines []string) string {
	want := ""
	switch {
	case g.most != nil:
		want = fmt.Sprintf("goal <= %s %s", num(*g.most), g.unit)
	case g.least != nil:
		want = fmt.Sprintf("goal >= %s %s", num(*g.least), g.unit)
	}
	v, err := g.value(lines)
	if err != nil {
		return fmt.Sprintf("%s: not measured (%s): missed: %s: %v", g.figure, want, g.bench, why(lines, g.bench, err))
	}
	verdict := "met"
	if (g.most != nil && v > *g.most) || (g.least != nil && v < *g.least) {
		verdict = "missed"
	}
	return fmt.Sprintf("%s: %s %s (%s): %s", g.figure, num(v), g.unit, want, verdict)
}

// why is what the log says about a benchmark that printed no figure:
// its failure or skip and the first message after it, or that it did
// not run; err otherwise.
func why(lines []string, bench string, err error) error {
	ran := false
	for i, l := range lines {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, bench) {
			ran = true
		}
		for _, mark := range []string{"--- FAIL: ", "--- SKIP: "} {
			if !strings.HasPrefix(t, mark+bench) {
				continue
			}
			for _, next := range lines[i+1:] {
				if m := strings.TrimSpace(next); m != "" {
					return fmt.Errorf("%s%s", strings.TrimPrefix(mark, "--- "), m)
				}
			}
			return fmt.Errorf("%s", strings.TrimSuffix(strings.TrimPrefix(mark, "--- "), ": "))
		}
	}
	if !ran {
		return fmt.Errorf("the benchmark did not run (not in the log)")
	}
	return err
}

// line reads the first submatch of the last line matching pattern.
func line(pattern string) func([]string) (float64, error) {
	re := regexp.MustCompile(pattern)
	return func(lines []string) (float64, error) {
		for i := len(lines) - 1; i >= 0; i-- {
			if m := re.FindStringSubmatch(strings.TrimSpace(lines[i])); m != nil {
				return strconv.ParseFloat(m[1], 64)
			}
		}
		return 0, fmt.Errorf("no line matching %q", pattern)
	}
}

// ratio reads a figure divided by another, each as line reads it.
func ratio(of, by string) func([]string) (float64, error) {
	a, b := line(of), line(by)
	return func(lines []string) (float64, error) {
		x, err := a(lines)
		if err != nil {
			return 0, err
		}
		y, err := b(lines)
		if err != nil {
			return 0, err
		}
		if y == 0 {
			return 0, fmt.Errorf("the floor is 0")
		}
		return x / y, nil
	}
}

// num prints v with at most two decimals.
func num(v float64) string {
	return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64)
}
