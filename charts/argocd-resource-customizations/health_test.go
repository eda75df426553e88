package argocd

import "testing"

// fixtures are the Rollout states in testdata/, one file each.
var fixtures = []string{
	"no-status",
	"generation-not-observed",
	"progressing",
	"awaiting-approval",
	"awaiting-approval-step2",
	"awaiting-approval-inconclusive",
	"awaiting-approval-retry",
	"timed-pause",
	"paused",
	"failed-analysis",
	"aborted",
	"stalled-invalid-spec",
	"completed",
	"disabled",
}

func TestHealth(t *testing.T) {
	tests := []struct {
		fixture string
		status  string
		message string
	}{
		{"no-status", "Progressing", "waiting for the controller to observe generation 1"},
		{"generation-not-observed", "Progressing", "waiting for the controller to observe generation 5"},
		{"progressing", "Progressing",
			"step 1/3: waiting for 1 new pods of 7d9c4f6b5 to be ready"},
		{"awaiting-approval", "Suspended",
			"step 1/3 of revision 7d9c4f6b5 waits for approval: merge pull request https://github.com/acme/apps/pull/41" +
				" (branch rollgate/approve/demo/echoserver/7d9c4f6b5-step-1)"},
		{"awaiting-approval-step2", "Suspended",
			"step 2/3 of revision 7d9c4f6b5 waits for approval: merge branch rollgate/approve/demo/echoserver/7d9c4f6b5-step-2"},
		{"awaiting-approval-inconclusive", "Suspended",
			"analysis was inconclusive: step 2/3 of revision 7d9c4f6b5 waits for approval: add {revision: 7d9c4f6b5, step: 2} to spec.approvals"},
		{"awaiting-approval-retry", "Suspended",
			"step 1/3 of revision 7d9c4f6b5 (attempt 2) waits for approval: add {revision: 7d9c4f6b5, step: 1, attempt: 2} to spec.approvals"},
		{"timed-pause", "Progressing", "step 2/3: pausing for 10m0s, until 2026-08-10T11:10:00Z"},
		{"paused", "Suspended", "release of 7d9c4f6b5 held at step 2/3 (StepPaused): spec.strategy.paused is true"},
		{"failed-analysis", "Degraded",
			"release of 7d9c4f6b5 failed (AnalysisFailed): analysis of step 2 failed: success-rate/error-ratio: 0.12 > 0.05;" +
				" traffic and pods return to stable revision 6b7f9c5d8; revert proposed in https://github.com/acme/apps/pull/43"},
		{"aborted", "Degraded",
			"release of 7d9c4f6b5 failed (Aborted): spec.abort: error budget burning; traffic and pods return to stable revision 6b7f9c5d8"},
		{"stalled-invalid-spec", "Degraded",
			`spec.strategy.canary.steps[1].replicas: "20%" of 10 pods is 2, fewer than the 3 of steps[0]`},
		{"completed", "Healthy", "revision 7d9c4f6b5 is released"},
		{"disabled", "Healthy", "spec.disabled is true: rollgate leaves the workload and its traffic as Git declares them"},
	}
	if len(tests) != len(fixtures) {
		t.Fatalf("%d health cases for %d fixtures: give every fixture a case", len(tests), len(fixtures))
	}
	for _, tc := range tests {
		t.Run(tc.fixture, func(t *testing.T) {
			got := runHealth(t, loadFixture(t, tc.fixture))
			if got.Status != tc.status {
				t.Errorf("status = %s, want %s (message %q)", got.Status, tc.status, got.Message)
			}
			if got.Message != tc.message {
				t.Errorf("message:\n got  %q\n want %q", got.Message, tc.message)
			}
		})
	}
}

// TestHealthFallbacks covers statuses that carry less than the controller
// writes: the script still answers with a useful message.
func TestHealthFallbacks(t *testing.T) {
	tests := []struct {
		name, fixture string
		edit          func(obj map[string]any)
		status        string
		message       string
	}{
		{"no generation and no status", "no-status", func(o map[string]any) {
			delete(o, "status")
			delete(o["metadata"].(map[string]any), "generation")
		}, "Progressing", "waiting for the controller to report status"},
		{"failed without Stalled condition", "failed-analysis", func(o map[string]any) {
			st := o["status"].(map[string]any)
			delete(st, "conditions")
			delete(st, "git")
		}, "Degraded", "release of 7d9c4f6b5 failed (AnalysisFailed): analysis of step 2 failed: success-rate/error-ratio: 0.12 > 0.05;" +
			" traffic and pods return to stable revision 6b7f9c5d8"},
		{"gate without awaitingApproval", "awaiting-approval", func(o map[string]any) {
			st := o["status"].(map[string]any)
			delete(st, "awaitingApproval")
			delete(st, "message")
		}, "Suspended", "waits for approval"},
		{"paused without message", "paused", func(o map[string]any) {
			delete(o["status"].(map[string]any), "message")
		}, "Suspended", "paused: spec.strategy.paused is true"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obj := loadFixture(t, tc.fixture)
			tc.edit(obj)
			got := runHealth(t, obj)
			if got.Status != tc.status || got.Message != tc.message {
				t.Errorf("got %s %q, want %s %q", got.Status, got.Message, tc.status, tc.message)
			}
		})
	}
}
