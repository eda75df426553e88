package gitsource

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/reconciler/internal/rollouttest"
)

// TestApprovalPolicyJudgesTheTrackedHead: under an approval policy the
// verdict is judged at the tracked branch's head as the Repository last
// fetched it, not at a newer head the history clone saw. An approval
// merged after that fetch counts only once the Repository fetched it (its
// interval or its push webhook), as without a policy; until then no
// verdict is given, however often the gate asks.
func TestApprovalPolicyJudgesTheTrackedHead(t *testing.T) {
	ctx, cfg, c, scheme := rollouttest.StartAPIServer(t)
	const gated, ns = "gated", "judged-at-head"
	srv, url := gatedRepo(t, c, ns, gated)
	repo := &v1alpha1.Repository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-repo"},
		Spec: v1alpha1.RepositorySpec{URL: url, Branch: "main", Interval: &metav1.Duration{Duration: 10 * time.Minute},
			Approvals: &v1alpha1.ApprovalPolicy{MergeOnly: true}}}
	rollouttest.MustCreate(t, c, repo)
	manifest := fmt.Sprintf("apiVersion: rollgate.dev/v1alpha1\nkind: Rollout\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n  approvals: []\n", gated, ns)
	if _, err := srv.Commit("app", "main", "the Rollout", map[string]string{manifestPath(gated): manifest}); err != nil {
		t.Fatal(err)
	}
	g := poolWithAGate(ctx, t, cfg, c, scheme, repo, gated)
	e := openAndCheck(ctx, t, g, repo)
	want := gitsync.Approval{Revision: "abc", Step: 1}

	approved := strings.Replace(manifest, "approvals: []", "approvals:\n  - {revision: abc, step: 1}", 1)
	merged, err := srv.Commit("app", "main", "approve step 1", map[string]string{manifestPath(gated): approved})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		seen, err := e.Approvals(ctx, "main", manifestPath(gated), ns, gated, want)
		if err != nil {
			t.Fatal(err)
		}
		if seen.Verdict != nil {
			t.Fatalf("ask %d: a verdict (commit %s) on the approval merged in %s, which the Repository has not fetched: "+
				"the history clone's newer head was judged", i+1, seen.Verdict.Commit, merged)
		}
	}

	g.checkIfDue(ctx, e, time.Now().Add(time.Hour)) // the Repository's next fetch
	if e.health.fetchErr != nil {
		t.Fatal(e.health.fetchErr)
	}
	seen, err := e.Approvals(ctx, "main", manifestPath(gated), ns, gated, want)
	if err != nil {
		t.Fatal(err)
	}
	if seen.Verdict == nil || seen.Verdict.Commit != merged {
		t.Fatalf("after the Repository fetched %s: verdict %+v, want one judging the commit that brought the approval", merged, seen.Verdict)
	}
}
