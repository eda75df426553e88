package main

import (
	"strings"
	"testing"
	"time"

	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/test/gitserver"
)

// TestApproveInGitNamesTheAttempt: after a retry, `rollgate approve --repo`
// learns the attempt from the status file and approves that attempt, on a
// branch of its own, although Git still holds the approval of attempt 1.
func TestApproveInGitNamesTheAttempt(t *testing.T) {
	srv := gitserver.Start(t, gitserver.Options{})
	const path = "apps/echo/rollout.yaml"
	url, err := srv.CreateRepo("app", map[string]string{path: `apiVersion: rollgate.dev/v1alpha1
kind: Rollout
metadata: {name: echo, namespace: demo}
spec:
  workloadRef: {apiVersion: apps/v1, kind: Deployment, name: echo}
  approvals:
  - {revision: new, step: 1}
`})
	if err != nil {
		t.Fatal(err)
	}
	status, err := gitsync.RenderStatus(gitsync.RolloutState{
		Namespace: "demo", Name: "echo", Phase: "Progressing",
		Step:             gitsync.StepState{Current: 1, Total: 2, State: "StepPaused"},
		AwaitingApproval: &gitsync.AwaitingApproval{Revision: "new", Step: 1, Attempt: 2, Since: time.Now()},
		Git:              gitsync.GitInfo{Repository: url, Branch: "main", Path: path},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Commit("app", gitsync.DefaultStatusBranch, "status", map[string]string{"demo/echo.yaml": string(status)}); err != nil {
		t.Fatal(err)
	}

	out, code := run(t, "", "approve", "demo/echo", "--repo", url, "--by", "alice")
	branch := "rollgate/approve/demo/echo/new-attempt-2-step-1"
	if code != exitOK || !strings.Contains(out, "approval branch "+branch+" is ready") {
		t.Fatalf("approve --repo: exit %d\n%s", code, out)
	}
	if got, err := srv.ReadFile("app", branch, path); err != nil || !strings.Contains(got, "- {revision: new, step: 1, attempt: 2}\n") {
		t.Fatalf("manifest on %s (%v):\n%s", branch, err, got)
	}

	out, code = run(t, "", "approve", "demo/echo", "--repo", url, "--direct")
	if code != exitOK || !strings.Contains(out, "approved step 1 of demo/echo (revision new, attempt 2) in commit") {
		t.Fatalf("approve --repo --direct: exit %d\n%s", code, out)
	}
	if got, _ := srv.ReadFile("app", "main", path); !strings.Contains(got, "- {revision: new, step: 1, attempt: 2}\n") {
		t.Fatalf("main after the direct approval:\n%s", got)
	}
	out, code = run(t, "", "approve", "demo/echo", "--repo", url)
	if code != exitOK || !strings.Contains(out, "step 1 of demo/echo (revision new, attempt 2) is already approved on main") {
		t.Fatalf("approve --repo once approved: exit %d\n%s", code, out)
	}
}

// TestStatusFromGitSaysWhatEachReleaseWaitsFor: `rollgate status --repo`
// shows, from the status files alone, what each release waits for: a
// place in a budget's queue, the upstream waves, a freeze, an approval,
// the other members of a lockstep group (and that a member is in one).
func TestStatusFromGitSaysWhatEachReleaseWaitsFor(t *testing.T) {
	srv := gitserver.Start(t, gitserver.Options{})
	url, err := srv.CreateRepo("app", map[string]string{"README.md": "app\n"})
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, st := range []gitsync.RolloutState{
		{Namespace: "shop", Name: "cart", Phase: "Paused", Reason: "WaitingForBudget",
			Queue: &gitsync.QueueState{Budget: "one-at-a-time", Position: 2, Since: time.Now()}},
		{Namespace: "shop", Name: "web", Phase: "Paused", Reason: "WaitingForFleet", WaitsFor: []string{"staging/shop/web", "canary/shop/web"}},
		{Namespace: "shop", Name: "pay", Phase: "Paused", Reason: "WaitingForFreeze",
			Message: "revision 6d4f9c waits to be released: freeze black-friday (peak), merged in 1a2b3c4 by Jane <jane@example.com>"},
		{Namespace: "shop", Name: "search", Phase: "Progressing", Step: gitsync.StepState{Current: 1, Total: 2, State: "StepPaused"},
			AwaitingApproval: &gitsync.AwaitingApproval{Revision: "new", Step: 1, Attempt: 1, Branch: "rollgate/approve/shop/search/new-step-1"}},
		{Namespace: "shop", Name: "worker", Phase: "Progressing", Group: "checkout", Reason: "WaitingForGroup",
			Step:    gitsync.StepState{Current: 1, Total: 3, State: "StepReady"},
			Message: "step 1/3 of 5f6e7d waits before step 2: group checkout waits for api (step 1/3, StepUpgrade) to finish step 1"},
		{Namespace: "shop", Name: "api", Phase: "Progressing", Group: "checkout", Step: gitsync.StepState{Current: 1, Total: 3, State: "StepUpgrade"}},
	} {
		data, err := gitsync.RenderStatus(st)
		if err != nil {
			t.Fatal(err)
		}
		files[st.Namespace+"/"+st.Name+".yaml"] = string(data)
	}
	if _, err := srv.Commit("app", gitsync.DefaultStatusBranch, "status", files); err != nil {
		t.Fatal(err)
	}
	out, code := run(t, "", "status", "--repo", url)
	for _, want := range []string{
		"budget one-at-a-time: position 2 in the queue",
		"fleet: staging/shop/web, canary/shop/web",
		"freeze: freeze black-friday (peak), merged in 1a2b3c4 by Jane <jane@example.com>",
		"approval: merge branch rollgate/approve/shop/search/new-step-1",
		"group: group checkout waits for api (step 1/3, StepUpgrade) to finish step 1",
		"its own step, in lockstep group checkout",
	} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Errorf("status --repo: exit %d, want %q in:\n%s", code, want, out)
		}
	}
}
