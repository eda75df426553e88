package forge

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// golden compares got with testdata/name, or rewrites it with
// UPDATE_GOLDEN=1.
func golden(t *testing.T, name, got string) {
	t.Helper()
	file := filepath.Join("testdata", name)
	if os.Getenv("UPDATE_GOLDEN") != "" {
		if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("%s differs (UPDATE_GOLDEN=1 to accept)\n--- got ---\n%s\n--- want ---\n%s", file, got, want)
	}
}

func TestApprovalBody(t *testing.T) {
	facts := map[string]string{
		"Analysis: success-rate":    "99.4% (min 99%) passed",
		"Analysis: p99-latency":     "212ms (max 300ms) passed",
		FactTraffic:                 Change("5%", "20%"),
		FactCanaryReplicas:          Change("1", "2"),
		FactStableReplicas:          Change("4", "4"),
		FactImage:                   "ghcr.io/acme/echo:1.5.0",
		FactAnalysis:                "passed",
		"":                          "skipped: no key",
		"Note | with <b>markup</b>": "line one\nline *two*",
		"Pause":                     "",
	}
	got := ApprovalBody("demo", "echo", "7f9c2ba", 1, 2, 4, facts)
	golden(t, "approval.md", got)
	if !strings.Contains(got, "Merging this pull request approves step 2 of revision 7f9c2ba.") {
		t.Error("the body lacks the instruction")
	}
	for i := 0; i < 5; i++ { // map order must not leak into the output
		if again := ApprovalBody("demo", "echo", "7f9c2ba", 1, 2, 4, facts); again != got {
			t.Fatal("ApprovalBody is not stable")
		}
	}
}

func TestApprovalBodyWithoutFacts(t *testing.T) {
	golden(t, "approval-minimal.md", ApprovalBody("demo", "echo", "rev_1", 0, 1, 0, nil))
}

func TestApprovalBodyOfARetry(t *testing.T) {
	got := ApprovalBody("demo", "echo", "7f9c2ba", 2, 1, 4, map[string]string{FactTraffic: Change("0%", "5%")})
	golden(t, "approval-attempt.md", got)
	if !strings.Contains(got, "Merging this pull request approves step 1 of revision 7f9c2ba, attempt 2.") ||
		!strings.Contains(got, "`{revision: 7f9c2ba, step: 1, attempt: 2}`") {
		t.Error("the body does not name the attempt")
	}
}

func TestRevertBody(t *testing.T) {
	got := RevertBody("demo", "echo", "7f9c2ba", "analysis success-rate failed 3 times.\n", map[string]string{
		"Image app":              "ghcr.io/acme/echo:1.4.0",
		"Image sidecar":          "ghcr.io/acme/proxy:2.0.1",
		"Analysis: success-rate": "91.2% (min 99%) failed",
	})
	golden(t, "revert.md", got)
}

func TestTitles(t *testing.T) {
	for got, want := range map[string]string{
		ApprovalTitle("demo", "echo", "7f9c2ba", 1, 2, 4): "rollgate: approve demo/echo revision 7f9c2ba step 2 of 4",
		ApprovalTitle("demo", "echo", "7f9c2ba", 0, 2, 0): "rollgate: approve demo/echo revision 7f9c2ba step 2",
		ApprovalTitle("demo", "echo", "7f9c2ba", 3, 2, 4): "rollgate: approve demo/echo revision 7f9c2ba attempt 3 step 2 of 4",
		RevertTitle("demo", "echo", "7f9c2ba"):            "rollgate: revert demo/echo to stable (revision 7f9c2ba failed)",
		Change("4", "3"):                                  "4 → 3",
		Change("4", "4"):                                  "4",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}
