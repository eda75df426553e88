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
type approveRequest struct {
	Namespace, Name, Revision string
	Step                      int
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
			a := gitsync.Approval{Revision: req.Revision, Step: req.Step}
			out, changed, err := gitsync.AddApproval(before, req.Namespace, req.Name, a)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, filepath.Join(dir, "after.yaml"), out)
			if changed == (string(out) == string(before)) {
				t.Errorf("changed = %v but output equal to input = %v", changed, string(out) == string(before))
			}
			as, err := gitsync.ApprovalsIn(out, req.Namespace, req.Name)
			if err != nil || !gitsync.HasApproval(as, a.Revision, a.Step) {
				t.Fatalf("approvals after edit = %v, %v", as, err)
			}
			// Idempotent: a second edit changes nothing.
			again, changed, err := gitsync.AddApproval(out, req.Namespace, req.Name, a)
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
	b := gitsync.ApprovalBranch("demo", "echoserver", "7b1e2a9f", 2)
	if b != "rollgate/approve/demo/echoserver/7b1e2a9f-step-2" {
		t.Fatalf("ApprovalBranch = %q", b)
	}
	ns, name, rev, step, ok := gitsync.ParseApprovalBranch(b)
	if !ok || ns != "demo" || name != "echoserver" || rev != "7b1e2a9f" || step != 2 {
		t.Fatalf("ParseApprovalBranch = %q %q %q %d %v", ns, name, rev, step, ok)
	}
	for _, bad := range []string{"main", "rollgate/approve/demo/x", "rollgate/approve/a/b/rev-step-x"} {
		if _, _, _, _, ok := gitsync.ParseApprovalBranch(bad); ok {
			t.Errorf("ParseApprovalBranch(%q) ok", bad)
		}
	}
}

const rolloutPath = "apps/echoserver/rollout.yaml"

func TestProposeApprovalMergeAndCleanup(t *testing.T) {
	before, err := os.ReadFile("testdata/approve-append-block/before.yaml")
	if err != nil {
		t.Fatal(err)
	}
	srv, repo := newRepo(t, map[string]string{rolloutPath: string(before), "other.txt": "x\n"})
	p, err := gitsync.ProposeApproval(ctx(t), repo, "main", rolloutPath, "demo", "echoserver", "7b1e2a9f", 2, "rollgate controller")
	if err != nil {
		t.Fatal(err)
	}
	if p.Branch != gitsync.ApprovalBranch("demo", "echoserver", "7b1e2a9f", 2) || !p.Pushed || p.AlreadyApproved {
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
	again, err := gitsync.ProposeApproval(ctx(t), repo, "main", rolloutPath, "demo", "echoserver", "7b1e2a9f", 2, "")
	if err != nil || again.Pushed || again.Commit != p.Commit {
		t.Fatalf("second proposal = %+v, %v", again, err)
	}

	// Before the merge, main does not approve; after it, only the exact
	// revision and step are approved.
	as, err := gitsync.ApprovalsOnBranch(ctx(t), repo, "main", rolloutPath, "demo", "echoserver")
	if err != nil || gitsync.HasApproval(as, "7b1e2a9f", 2) {
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
		if got := gitsync.HasApproval(as, c.revision, c.step); got != c.want {
			t.Errorf("HasApproval(%s, %d) = %v, want %v (approvals %v)", c.revision, c.step, got, c.want, as)
		}
	}
	if merged, err := gitsync.ProposeApproval(ctx(t), repo, "main", rolloutPath, "demo", "echoserver", "7b1e2a9f", 2, ""); err != nil || !merged.AlreadyApproved {
		t.Fatalf("proposal after merge = %+v, %v", merged, err)
	}

	// Another proposal, then cleanup keeps only what keep accepts.
	p3, err := gitsync.ProposeApproval(ctx(t), repo, "main", rolloutPath, "demo", "echoserver", "7b1e2a9f", 3, "")
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

func TestProposeApprovalRebuildsAStaleBranch(t *testing.T) {
	before, _ := os.ReadFile("testdata/approve-create-list/before.yaml")
	srv, repo := newRepo(t, map[string]string{rolloutPath: string(before)})
	branch := gitsync.ApprovalBranch("demo", "echoserver", "7b1e2a9f", 2)
	// Someone left a branch of that name without the approval in it.
	if _, err := srv.Commit("app", branch, "junk", map[string]string{"junk.txt": "j\n"}); err != nil {
		t.Fatal(err)
	}
	p, err := gitsync.ProposeApproval(ctx(t), repo, "main", rolloutPath, "demo", "echoserver", "7b1e2a9f", 2, "")
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
	commit, err := gitsync.RecordApproval(ctx(t), repo, "main", rolloutPath, "demo", "echoserver", "7b1e2a9f", 2, "alice@example.com")
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
	again, err := gitsync.RecordApproval(ctx(t), repo, "main", rolloutPath, "demo", "echoserver", "7b1e2a9f", 2, "")
	if err != nil || again != commit {
		t.Fatalf("second direct approval = %s, %v; want no new commit", again, err)
	}
	if _, err := gitsync.RecordApproval(ctx(t), repo, "main", rolloutPath, "demo", "missing", "r", 1, ""); !errors.Is(err, gitsync.ErrManifestNotFound) {
		t.Fatalf("unknown rollout: err = %v", err)
	}
}
