package testlog

import (
	"fmt"
	"strings"
	"testing"
)

// recorder is a testing.TB whose Logf and Failed the tests control.
type recorder struct {
	testing.TB
	failed bool
	logged []string
}

func (r *recorder) Helper()      {}
func (r *recorder) Failed() bool { return r.failed }
func (r *recorder) Logf(format string, args ...any) {
	r.logged = append(r.logged, fmt.Sprintf(format, args...))
}

func TestReportPrintsOnlyAFailedTestsLog(t *testing.T) {
	var b Buffer
	fmt.Fprintf(&b, "first\nsecond\n")
	fmt.Fprintf(b.Prefixed("shard1: "), "third\n")
	passed := &recorder{}
	b.Report(passed, "controller")
	if len(passed.logged) != 0 {
		t.Fatalf("a passed test printed %q", passed.logged)
	}

	var c Buffer
	fmt.Fprintf(&c, "first\nsecond\n")
	fmt.Fprintf(c.Prefixed("shard1: "), "third\n")
	failed := &recorder{failed: true}
	c.Report(failed, "controller")
	fmt.Fprintf(&c, "after the report\n")
	if len(failed.logged) != 1 {
		t.Fatalf("a failed test printed %d entries, want 1: %q", len(failed.logged), failed.logged)
	}
	want := "log of the controller (0 earlier lines dropped):\nfirst\nsecond\nshard1: third"
	if failed.logged[0] != want {
		t.Fatalf("printed %q, want %q", failed.logged[0], want)
	}
}

func TestBufferKeepsTheLastLines(t *testing.T) {
	var b Buffer
	for i := range 2*Lines + 7 {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	r := &recorder{failed: true}
	b.Report(r, "controller")
	lines := strings.Split(r.logged[0], "\n")
	if got := lines[0]; got != fmt.Sprintf("log of the controller (%d earlier lines dropped):", Lines+7) {
		t.Fatalf("header %q", got)
	}
	if got, want := lines[1], fmt.Sprintf("line %d", Lines+7); got != want || len(lines) != Lines+1 || lines[Lines] != fmt.Sprintf("line %d", 2*Lines+6) {
		t.Fatalf("kept %d lines from %q to %q, want %d from %q", len(lines)-1, got, lines[len(lines)-1], Lines, want)
	}
}
