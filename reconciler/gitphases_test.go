package reconciler

import (
	"context"
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/test/gitserver"
)

// TestProposeApprovalPrunesToTheLiveRevisions: the approval branch the
// repository's proposer pushes for a gate removes from spec.approvals the
// entries of revisions that are neither status.stableRevision nor
// status.canaryRevision, and the Rollout's approval branches of earlier
// releases are deleted. The reconcile records the branch once it is
// pushed, and its Rollout is woken then.
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
	ro := &v1alpha1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web"},
		Spec:       v1alpha1.RolloutSpec{Git: &v1alpha1.GitReference{Repository: "app", Path: path}},
		Status: v1alpha1.RolloutStatus{StableRevision: "stable1", CanaryRevision: "canary1",
			AwaitingApproval: &v1alpha1.ApprovalRequest{Revision: "canary1", Step: 2, Since: metav1.Now()}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pushed := newNotifier(priorityNormal)
	p := newProposer(clone, pushed)
	go p.start(ctx)
	sc := &scope{ro: ro, git: &repoHandle{clone: clone, proposer: p},
		repository: &v1alpha1.Repository{Spec: v1alpha1.RepositorySpec{URL: url, Branch: "main"}}}
	r := &RolloutReconciler{}
	if err := r.proposeApproval(ctx, sc); err != nil || ro.Status.AwaitingApproval.Branch != "" {
		t.Fatalf("the reconcile that asked for the branch: %v, branch %q; want it asked for, not recorded", err, ro.Status.AwaitingApproval.Branch)
	}
	select {
	case <-pushed.wake:
	case <-ctx.Done():
		t.Fatal("the Rollout was never woken with its approval branch")
	}
	if got := pushed.take(); len(got) != 1 {
		t.Fatalf("woken %v; want the Rollout", got)
	}
	if err := r.proposeApproval(ctx, sc); err != nil {
		t.Fatal(err)
	}
	branch := ro.Status.AwaitingApproval.Branch
	if branch != gitsync.ApprovalBranch("demo", "web", gitsync.Approval{Revision: "canary1", Step: 2}) {
		t.Fatalf("status.awaitingApproval.branch = %q", branch)
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
