package gitsync_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/rollgate/rollgate/gitsync"
)

// approveRequest is the optional request.json of an approve-* golden case.
// Live are the Rollout's live revisions (stable and canary), given to the
// edit so that it prunes the others.
type approveRequest struct {
	Namespace, Name, Revision string
	Step, Attempt             int
	Live                      []string
}

// golden compares got with the file, or rewrites it with UPDATE_GOLDEN=1.
func golden(t *testing.T, file string, got []byte) {
	t.Helper()
	if os.Getenv("UPDATE_GOLDEN") != "" {
		if err := os.WriteFile(file, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs (UPDATE_GOLDEN=1 to accept)\n--- got ---\n%s\n--- want ---\n%s", file, got, want)
	}
}

func TestAddApprovalGolden(t *testing.T) {
	dirs, err := filepath.Glob("testdata/approve-*")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no golden cases: %v", err)
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			req := approveRequest{Namespace: "demo", Name: "echoserver", Revision: "7b1e2a9f", Step: 2}
			if data, err := os.ReadFile(filepath.Join(dir, "request.json")); err == nil {
				if err := json.Unmarshal(data, &req); err != nil {
					t.Fatal(err)
				}
			}
			before, err := os.ReadFile(filepath.Join(dir, "before.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			a := gitsync.Approval{Revision: req.Revision, Step: req.Step, Attempt: req.Attempt}
			out, changed, err := gitsync.AddApproval(before, req.Namespace, req.Name, a, req.Live...)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, filepath.Join(dir, "after.yaml"), out)
			if changed == (string(out) == string(before)) {
				t.Errorf("changed = %v but output equal to input = %v", changed, string(out) == string(before))
			}
			as, err := gitsync.ApprovalsIn(out, req.Namespace, req.Name)
			if err != nil || !gitsync.HasApproval(as, a) {
				t.Fatalf("approvals after edit = %v, %v", as, err)
			}
			if other := (gitsync.Approval{Revision: a.Revision, Step: a.Step, Attempt: max(a.Attempt, 1) + 1}); gitsync.HasApproval(as, other) {
				t.Fatalf("approvals after edit %v approve attempt %d too", as, other.Attempt)
			}
			if len(req.Live) > 0 {
				had, err := gitsync.ApprovalsIn(before, req.Namespace, req.Name)
				if err != nil {
					t.Fatal(err)
				}
				if want := liveApprovals(had, a, req.Live); !reflect.DeepEqual(as, want) {
					t.Fatalf("approvals after the edit = %+v, want the live ones %+v", as, want)
				}
			}
			// Idempotent: a second edit changes nothing.
			again, changed, err := gitsync.AddApproval(out, req.Namespace, req.Name, a, req.Live...)
			if err != nil || changed || string(again) != string(out) {
				t.Fatalf("second AddApproval changed=%v err=%v", changed, err)
			}
		})
	}
}

func TestAddApprovalErrors(t *testing.T) {
	deployment := []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: echoserver\n")
	if _, _, err := gitsync.AddApproval(deployment, "demo", "echoserver", gitsync.Approval{Revision: "r", Step: 1}); !errors.Is(err, gitsync.ErrManifestNotFound) {
		t.Errorf("no Rollout: err = %v, want ErrManifestNotFound", err)
	}
	otherNS := []byte("apiVersion: rollgate.dev/v1alpha1\nkind: Rollout\nmetadata:\n  name: echoserver\n  namespace: prod\n")
	if _, _, err := gitsync.AddApproval(otherNS, "demo", "echoserver", gitsync.Approval{Revision: "r", Step: 1}); !errors.Is(err, gitsync.ErrManifestNotFound) {
		t.Errorf("other namespace: err = %v, want ErrManifestNotFound", err)
	}
	if _, _, err := gitsync.AddApproval([]byte("a: [\n"), "demo", "echoserver", gitsync.Approval{}); !errors.Is(err, gitsync.ErrInvalidManifest) {
		t.Errorf("broken YAML: err = %v, want ErrInvalidManifest", err)
	}
}

func TestApprovalBranchNames(t *testing.T) {
	tests := []struct {
		approval gitsync.Approval
		branch   string
	}{
		{gitsync.Approval{Revision: "7b1e2a9f", Step: 2}, "rollgate/approve/demo/echoserver/7b1e2a9f-step-2"},
		{gitsync.Approval{Revision: "7b1e2a9f", Step: 2, Attempt: 1}, "rollgate/approve/demo/echoserver/7b1e2a9f-step-2"},
		{gitsync.Approval{Revision: "7b1e2a9f", Step: 2, Attempt: 3}, "rollgate/approve/demo/echoserver/7b1e2a9f-attempt-3-step-2"},
		{gitsync.Approval{Revision: "7b1e2a9f", Step: 12, Attempt: 10}, "rollgate/approve/demo/echoserver/7b1e2a9f-attempt-10-step-12"},
	}
	for _, tt := range tests {
		b := gitsync.ApprovalBranch("demo", "echoserver", tt.approval)
		if b != tt.branch {
			t.Errorf("ApprovalBranch(%+v) = %q, want %q", tt.approval, b, tt.branch)
		}
		if !strings.HasPrefix(b, gitsync.ApprovalBranchesOf("demo", "echoserver")) {
			t.Errorf("%q is not under ApprovalBranchesOf, so cleanup would miss it", b)
		}
		want := tt.approval
		if want.Attempt == 1 {
			want.Attempt = 0
		}
		ns, name, a, ok := gitsync.ParseApprovalBranch(b)
		if !ok || ns != "demo" || name != "echoserver" || a != want {
			t.Errorf("ParseApprovalBranch(%q) = %q %q %+v %v, want %+v", b, ns, name, a, ok, want)
		}
	}
	for _, bad := range []string{"main", "rollgate/approve/demo/x", "rollgate/approve/a/b/rev-step-x",
		"rollgate/approve/a/b/rev-step-", "rollgate/approve/a/b/rev-step-+1", "rollgate/approve/a/b/-step-1",
		"rollgate/approve/a/b/rev-attempt-1-step-1", "rollgate/approve/a/b/-attempt-2-step-1"} {
		if _, _, a, ok := gitsync.ParseApprovalBranch(bad); ok {
			t.Errorf("ParseApprovalBranch(%q) = %+v, ok", bad, a)
		}
	}
}

const rolloutPath = "apps/echoserver/rollout.yaml"

// step2 approves step 2 of the first attempt of revision 7b1e2a9f.
var step2 = gitsync.Approval{Revision: "7b1e2a9f", Step: 2}

func TestProposeApprovalMergeAndCleanup(t *testing.T) {
	before, err := os.ReadFile("testdata/approve-append-block/before.yaml")
	if err != nil {
		t.Fatal(err)
	}
	srv, repo := newRepo(t, map[string]string{rolloutPath: string(before), "other.txt": "x\n"})
	p, err := gitsync.ProposeApproval(ctx(t), repo, "main", rolloutPath, "demo", "echoserver", step2, "rollgate controller")
	if err != nil {
		t.Fatal(err)
	}
	if p.Branch != gitsync.ApprovalBranch("demo", "echoserver", step2) || !p.Pushed || p.AlreadyApproved {
		t.Fatalf("proposal = %+v", p)
	}
	// The branch holds exactly the golden edit, one commit on top of main.
	got, err := srv.ReadFile("app", p.Branch, rolloutPath)
	want, _ := os.ReadFile("testdata/approve-append-block/after.yaml")
	if err != nil || got != string(want) {
		t.Fatalf("manifest on the approval branch:\n%s", got)
	}
	log := gitLog(t, srv, p.Branch)
	if len(log) != 2 || log[0] != "rollgate: approve demo/echoserver revision 7b1e2a9f step 2" {
		t.Fatalf("approval branch history = %v", log)
	}

	// Proposing again is a no-op, even after main moved on.
	if _, err := srv.Commit("app", "main", "unrelated", map[string]string{"other.txt": "y\n"}); err != nil {
		t.Fatal(err)
	}
	again, err := gitsync.ProposeApproval(ctx(t), repo, "main", rolloutPath, "demo", "echoserver", step2, "")
	if err != nil || again.Pushed || again.Commit != p.Commit {
		t.Fatalf("second proposal = %+v, %v", again, err)
	}

	// Before the merge, main does not approve; after it, only the exact
	// revision and step are approved.
	as, err := gitsync.ApprovalsOnBranch(ctx(t), repo, "main", rolloutPath, "demo", "echoserver")
	if err != nil || gitsync.HasApproval(as, step2) {
		t.Fatalf("approved before merge: %v, %v", as, err)
	}
	if _, err := srv.Merge("app", "main", p.Branch, "Merge pull request #1"); err != nil {
		t.Fatal(err)
	}
	as, err = gitsync.ApprovalsOnBranch(ctx(t), repo, "main", rolloutPath, "demo", "echoserver")
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		revision string
		step     int
		want     bool
	}{{"7b1e2a9f", 2, true}, {"7b1e2a9f", 3, false}, {"8c2f3b0a", 2, false}, {"5f00aa", 1, true}}
	for _, c := range checks {
		if got := gitsync.HasApproval(as, gitsync.Approval{Revision: c.revision, Step: c.step}); got != c.want {
			t.Errorf("HasApproval(%s, %d) = %v, want %v (approvals %v)", c.revision, c.step, got, c.want, as)
		}
	}
	if merged, err := gitsync.ProposeApproval(ctx(t), repo, "main", rolloutPath, "demo", "echoserver", step2, ""); err != nil || !merged.AlreadyApproved {
		t.Fatalf("proposal after merge = %+v, %v", merged, err)
	}

	// Another proposal, then cleanup keeps only what keep accepts.
	p3, err := gitsync.ProposeApproval(ctx(t), repo, "main", rolloutPath, "demo", "echoserver", gitsync.Approval{Revision: "7b1e2a9f", Step: 3}, "")
	if err != nil {
		t.Fatal(err)
	}
	deleted, err := gitsync.CleanupApprovalBranches(ctx(t), repo, "demo", "echoserver", func(b string) bool { return b == p3.Branch })
	if err != nil || !reflect.DeepEqual(deleted, []string{p.Branch}) {
		t.Fatalf("cleanup deleted %v, %v", deleted, err)
	}
	if h, _ := srv.Head("app", p.Branch); h != "" {
		t.Fatal("merged approval branch still exists")
	}
	if h, _ := srv.Head("app", p3.Branch); h == "" {
		t.Fatal("kept approval branch was deleted")
	}
}

// TestProposeApprovalOfARetry: after spec.retry, a step approved in the
// failed attempt needs a branch of its own, which adds the attempt.
func TestProposeApprovalOfARetry(t *testing.T) {
	before, err := os.ReadFile("testdata/approve-append-block/before.yaml") // approves 7b1e2a9f step 1
	if err != nil {
		t.Fatal(err)
	}
	srv, repo := newRepo(t, map[string]string{rolloutPath: string(before)})
	first := gitsync.Approval{Revision: "7b1e2a9f", Step: 1}
	retry := gitsync.Approval{Revision: "7b1e2a9f", Step: 1, Attempt: 2}
	if p, err := gitsync.ProposeApproval(ctx(t), repo, "main", rolloutPath, "demo", "echoserver", first, ""); err != nil || !p.AlreadyApproved {
		t.Fatalf("attempt 1: proposal = %+v, %v; want already approved", p, err)
	}
	stale, err := gitsync.ProposeApproval(ctx(t), repo, "main", rolloutPath, "demo", "echoserver", step2, "")
	if err != nil {
		t.Fatal(err)
	}

	p, err := gitsync.ProposeApproval(ctx(t), repo, "main", rolloutPath, "demo", "echoserver", retry, "rollgate")
	if err != nil {
		t.Fatal(err)
	}
	if p.AlreadyApproved || !p.Pushed || p.Branch != "rollgate/approve/demo/echoserver/7b1e2a9f-attempt-2-step-1" {
		t.Fatalf("attempt 2: proposal = %+v; want a new branch, the approval of attempt 1 does not count", p)
	}
	got, err := srv.ReadFile("app", p.Branch, rolloutPath)
	want := strings.Replace(string(before), "      step: 1\n  # Where", "      step: 1\n    - {revision: 7b1e2a9f, step: 1, attempt: 2}\n  # Where", 1)
	if err != nil || got != want {
		t.Fatalf("manifest on the approval branch:\n%s", got)
	}
	if log := gitLog(t, srv, p.Branch); len(log) != 2 || log[0] != "rollgate: approve demo/echoserver revision 7b1e2a9f attempt 2 step 1" {
		t.Fatalf("approval branch history = %v", log)
	}
	if body, _ := gitLogBody(t, srv, p.Branch); !strings.Contains(body, "Adds {revision: 7b1e2a9f, step: 1, attempt: 2} to spec.approvals") {
		t.Fatalf("commit message does not say what it adds:\n%s", body)
	}
	deleted, err := gitsync.CleanupApprovalBranches(ctx(t), repo, "demo", "echoserver", func(b string) bool { return b == p.Branch })
	if err != nil || !reflect.DeepEqual(deleted, []string{stale.Branch}) {
		t.Fatalf("cleanup deleted %v, %v; want the branch of the earlier gate only", deleted, err)
	}

	if _, err := srv.Merge("app", "main", p.Branch, "Merge pull request #2"); err != nil {
		t.Fatal(err)
	}
	as, err := gitsync.ApprovalsOnBranch(ctx(t), repo, "main", rolloutPath, "demo", "echoserver")
	if err != nil || !gitsync.HasApproval(as, retry) || gitsync.HasApproval(as, gitsync.Approval{Revision: "7b1e2a9f", Step: 1, Attempt: 3}) {
		t.Fatalf("approvals after the merge = %+v, %v; want attempt 2 of step 1 and not attempt 3", as, err)
	}
	if again, err := gitsync.ProposeApproval(ctx(t), repo, "main", rolloutPath, "demo", "echoserver", retry, ""); err != nil || !again.AlreadyApproved {
		t.Fatalf("proposal after merge = %+v, %v", again, err)
	}
	third := gitsync.Approval{Revision: "7b1e2a9f", Step: 1, Attempt: 3}
	if _, err := gitsync.RecordApproval(ctx(t), repo, "main", rolloutPath, "demo", "echoserver", third, "bob"); err != nil {
		t.Fatal(err)
	}
	if as, err = gitsync.ApprovalsOnBranch(ctx(t), repo, "main", rolloutPath, "demo", "echoserver"); err != nil || !gitsync.HasApproval(as, third) {
		t.Fatalf("approvals after the direct approval of attempt 3 = %+v, %v", as, err)
	}
}

func TestProposeApprovalRebuildsAStaleBranch(t *testing.T) {
	before, _ := os.ReadFile("testdata/approve-create-list/before.yaml")
	srv, repo := newRepo(t, map[string]string{rolloutPath: string(before)})
	branch := gitsync.ApprovalBranch("demo", "echoserver", step2)
	// Someone left a branch of that name without the approval in it.
	if _, err := srv.Commit("app", branch, "junk", map[string]string{"junk.txt": "j\n"}); err != nil {
		t.Fatal(err)
	}
	p, err := gitsync.ProposeApproval(ctx(t), repo, "main", rolloutPath, "demo", "echoserver", step2, "")
	if err != nil || !p.Pushed {
		t.Fatalf("proposal = %+v, %v", p, err)
	}
	if _, err := srv.ReadFile("app", branch, "junk.txt"); err == nil {
		t.Fatal("stale branch content survived the rebuild")
	}
	if log := gitLog(t, srv, branch); len(log) != 2 {
		t.Fatalf("rebuilt branch history = %v", log)
	}
}

func TestRecordApprovalDirect(t *testing.T) {
	before, _ := os.ReadFile("testdata/approve-create-list/before.yaml")
	srv, repo := newRepo(t, map[string]string{rolloutPath: string(before)})
	commit, err := gitsync.RecordApproval(ctx(t), repo, "main", rolloutPath, "demo", "echoserver", step2, "alice@example.com")
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := srv.Head("app", "main"); h != commit {
		t.Fatalf("main at %s, approval commit %s", h, commit)
	}
	got, _ := srv.ReadFile("app", "main", rolloutPath)
	if want, _ := os.ReadFile("testdata/approve-create-list/after.yaml"); got != string(want) {
		t.Fatalf("manifest after direct approval:\n%s", got)
	}
	out, _ := gitLogBody(t, srv, "main")
	if !strings.Contains(out, "Requested-by: alice@example.com") {
		t.Fatalf("commit message lacks the requester:\n%s", out)
	}
	again, err := gitsync.RecordApproval(ctx(t), repo, "main", rolloutPath, "demo", "echoserver", step2, "")
	if err != nil || again != commit {
		t.Fatalf("second direct approval = %s, %v; want no new commit", again, err)
	}
	if _, err := gitsync.RecordApproval(ctx(t), repo, "main", rolloutPath, "demo", "missing", gitsync.Approval{Revision: "r", Step: 1}, ""); !errors.Is(err, gitsync.ErrManifestNotFound) {
		t.Fatalf("unknown rollout: err = %v", err)
	}
}
