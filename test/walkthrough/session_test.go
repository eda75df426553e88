package walkthrough

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

func TestSessionCarriesStateAndStopsAtTheFirstFailure(t *testing.T) {
	dir := t.TempDir()
	s, err := StartSession(dir, append(os.Environ(), "GIVEN=from-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	run := func(script string) (string, error) { return s.Run(ctx, script, 10*time.Second) }

	if _, err := run("export X=1\nmkdir sub\ncd sub\n"); err != nil {
		t.Fatal(err)
	}
	out, err := run("echo \"$X $GIVEN $(basename \"$PWD\")\"\ncat <<'EOF'\nheredoc line\nEOF\n")
	if err != nil {
		t.Fatal(err)
	}
	if out != "1 from-test sub\nheredoc line\n" {
		t.Errorf("state did not carry between blocks: %q", out)
	}
	// A command reading stdin gets /dev/null, not the session's script.
	if out, err := run("cat\necho after\n"); err != nil || out != "after\n" {
		t.Errorf("stdin of a block: %q, %v", out, err)
	}
	if _, err := run("echo unset: $UNSET_VARIABLE\n"); err == nil {
		t.Error("an unset variable must fail the block (set -u)")
	}
	if _, err := run("true\n"); err == nil {
		t.Error("the session must be over after a failure")
	}
}

func TestSessionFailsAPipelineAndTimesOut(t *testing.T) {
	s, err := StartSession(t.TempDir(), os.Environ())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out, err := s.Run(context.Background(), "echo before\nfalse | cat\necho never\n", 10*time.Second)
	if err == nil || out != "before\n" {
		t.Errorf("a failing pipeline must stop the block: %q, %v", out, err)
	}

	s2, err := StartSession(t.TempDir(), os.Environ())
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if _, err := s2.Run(context.Background(), "sleep 30\n", 300*time.Millisecond); err == nil || !strings.Contains(err.Error(), "not finished") {
		t.Errorf("a block over its time must fail: %v", err)
	}
}
