package gitsync_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/rollgate/rollgate/gitsync"
)

// valuesPath is a chart's values file: the Rollout's spec.git.path when a
// chart renders the Rollout.
const valuesPath = "charts/echoserver/values.yaml"

// TestApprovalThroughAValuesFile: for a Rollout a chart renders, the
// approval branch appends to the list marked `# rollgate:approvals
// <namespace>/<name>` in the values file, changing only that line; merging
// it approves exactly that revision and step; the list of another Rollout
// in the same file is left alone.
func TestApprovalThroughAValuesFile(t *testing.T) {
	before, err := os.ReadFile("testdata/approve-values-flow/before.yaml")
	if err != nil {
		t.Fatal(err)
	}
	srv, repo := newRepo(t, map[string]string{valuesPath: string(before)})
	if as, err := gitsync.ApprovalsOnBranch(ctx(t), repo, "main", valuesPath, "demo", "echoserver"); err != nil || len(as) != 0 {
		t.Fatalf("approvals before any merge = %v, %v; want none and no error", as, err)
	}
	p, err := gitsync.ProposeApproval(ctx(t), repo, "main", valuesPath, "demo", "echoserver", step2, "rollgate controller")
	if err != nil || !p.Pushed {
		t.Fatalf("proposal = %+v, %v", p, err)
	}
	got, err := srv.ReadFile("app", p.Branch, valuesPath)
	want, _ := os.ReadFile("testdata/approve-values-flow/after.yaml")
	if err != nil || got != string(want) {
		t.Fatalf("values file on the approval branch:\n%s", got)
	}
	if _, err := srv.Merge("app", "main", p.Branch, "Merge pull request #7"); err != nil {
		t.Fatal(err)
	}
	as, err := gitsync.ApprovalsOnBranch(ctx(t), repo, "main", valuesPath, "demo", "echoserver")
	if err != nil || !gitsync.HasApproval(as, step2) || gitsync.HasApproval(as, gitsync.Approval{Revision: step2.Revision, Step: 3}) {
		t.Fatalf("approvals after the merge = %v, %v; want step 2 of %s only", as, err, step2.Revision)
	}
	if other, err := gitsync.ApprovalsOnBranch(ctx(t), repo, "main", valuesPath, "demo", "another-rollout"); err != nil || len(other) != 0 {
		t.Fatalf("the other Rollout's list = %v, %v; want it untouched", other, err)
	}
	if again, err := gitsync.ProposeApproval(ctx(t), repo, "main", valuesPath, "demo", "echoserver", step2, ""); err != nil || !again.AlreadyApproved {
		t.Fatalf("proposal after the merge = %+v, %v", again, err)
	}
	// `rollgate approve --direct`: committed to main, in the same list.
	step3 := gitsync.Approval{Revision: step2.Revision, Step: 3}
	if _, err := gitsync.RecordApproval(ctx(t), repo, "main", valuesPath, "demo", "echoserver", step3, "bob"); err != nil {
		t.Fatal(err)
	}
	got, err = srv.ReadFile("app", "main", valuesPath)
	if err != nil || !strings.Contains(got, "approvals: [{revision: 7b1e2a9f, step: 2}, {revision: 7b1e2a9f, step: 3}]   # rollgate:approvals demo/echoserver") {
		t.Fatalf("values file on main after a direct approval:\n%s", got)
	}
}

func TestApprovalsMarkerErrors(t *testing.T) {
	a := gitsync.Approval{Revision: "r", Step: 1}
	unmarked := []byte("rollout:\n  approvals: []\n")
	if _, _, err := gitsync.AddApproval(unmarked, "demo", "echoserver", a); !errors.Is(err, gitsync.ErrManifestNotFound) {
		t.Errorf("no marker: err = %v, want ErrManifestNotFound", err)
	}
	if _, err := gitsync.ApprovalsIn(unmarked, "demo", "echoserver"); !errors.Is(err, gitsync.ErrManifestNotFound) {
		t.Errorf("no marker: ApprovalsIn err = %v, want ErrManifestNotFound", err)
	}
	otherNS := []byte("rollout:\n  approvals: [] # rollgate:approvals prod/echoserver\n")
	if _, _, err := gitsync.AddApproval(otherNS, "demo", "echoserver", a); !errors.Is(err, gitsync.ErrManifestNotFound) {
		t.Errorf("marker of another namespace: err = %v, want ErrManifestNotFound", err)
	}
	twice := []byte("a:\n  approvals: [] # rollgate:approvals demo/echoserver\nb:\n  approvals: [] # rollgate:approvals demo/echoserver\n")
	if _, _, err := gitsync.AddApproval(twice, "demo", "echoserver", a); !errors.Is(err, gitsync.ErrInvalidManifest) {
		t.Errorf("two marked lists: err = %v, want ErrInvalidManifest", err)
	}
	notAList := []byte("rollout:\n  approvals: yes # rollgate:approvals demo/echoserver\n")
	if _, _, err := gitsync.AddApproval(notAList, "demo", "echoserver", a); !errors.Is(err, gitsync.ErrInvalidManifest) {
		t.Errorf("marked scalar: err = %v, want ErrInvalidManifest", err)
	}
}
