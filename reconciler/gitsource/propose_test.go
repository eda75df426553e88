package gitsource

import (
	"context"
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/test/gitserver"
)

// TestProposeApprovalPrunesToTheLiveRevisions: the approval branch the
// repository's proposer pushes for a gate removes from spec.approvals the
// entries of revisions that are neither status.stableRevision nor
// status.canaryRevision, and the Rollout's approval branches of earlier
// releases are deleted. Propose answers with the branch once it is
// pushed, and the Rollout is woken then.
func TestProposeApprovalPrunesToTheLiveRevisions(t *testing.T) {
	const path = "apps/web/rollout.yaml"
	manifest := "apiVersion: rollgate.dev/v1alpha1\nkind: Rollout\nmetadata:\n  name: web\n  namespace: demo\nspec:\n" +
		"  # Merged approval branches append here.\n  approvals:\n" +
		"  - {revision: old1, step: 1}\n  - {revision: stable1, step: 1}\n  - {revision: old2, step: 1}\n  - {revision: canary1, step: 1}\n"
	srv := gitserver.Start(t, gitserver.Options{})
	url, err := srv.CreateRepo("app", map[string]string{path: manifest})
	if err != nil {
		t.Fatal(err)
	}
	obsolete := gitsync.ApprovalBranch("demo", "web", gitsync.Approval{Revision: "old2", Step: 1})
	if _, err := srv.Commit("app", obsolete, "an approval of an earlier release", map[string]string{"x.txt": "x\n"}); err != nil {
		t.Fatal(err)
	}
	clone, err := gitsync.Open(gitsync.Options{URL: url, RetryBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pushed := newNotifier()
	p := newProposer(clone, pushed)
	go p.start(ctx)
	e := &Repo{clone: clone, proposer: p}
	key := types.NamespacedName{Namespace: "demo", Name: "web"}
	// What the Rollout's reconcile asks for (proposeApproval).
	proposal := Proposal{Tracked: "main", Path: path,
		Approval: gitsync.Approval{Revision: "canary1", Step: 2}, Live: []string{"stable1", "canary1"}}
	if res, ok := e.Propose(key, proposal); ok {
		t.Fatalf("the reconcile that asked for the branch: %+v; want it asked for, not pushed yet", res)
	}
	select {
	case <-pushed.wake:
	case <-ctx.Done():
		t.Fatal("the Rollout was never woken with its approval branch")
	}
	if got := pushed.take(); len(got) != 1 {
		t.Fatalf("woken %v; want the Rollout", got)
	}
	res, ok := e.Propose(key, proposal)
	if !ok || res.Err != nil {
		t.Fatalf("the proposal once pushed: %+v, ended %v", res, ok)
	}
	branch := res.Branch
	if branch != gitsync.ApprovalBranch("demo", "web", gitsync.Approval{Revision: "canary1", Step: 2}) {
		t.Fatalf("approval branch = %q", branch)
	}
	got, err := gitsync.ApprovalsOnBranch(ctx, clone, branch, path, "demo", "web")
	want := []gitsync.Approval{{Revision: "stable1", Step: 1}, {Revision: "canary1", Step: 1}, {Revision: "canary1", Step: 2}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("approvals on %s = %+v, %v; want the stable and canary ones only: %+v", branch, got, err, want)
	}
	if h, _ := srv.Head("app", obsolete); h != "" {
		t.Errorf("the obsolete approval branch %s survived", obsolete)
	}
}
