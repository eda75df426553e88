package rollout

import (
	"testing"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// TestCountedApprovals: with spec.approvals on the Repository only the
// approvals read (and verified) from Git count, not those written into the
// Rollout object; without it both do.
func TestCountedApprovals(t *testing.T) {
	inCluster := v1alpha1.Approval{Revision: "abc", Step: 1, ApprovedBy: "kubectl"}
	fromGit := v1alpha1.Approval{Revision: "abc", Step: 2, ApprovedBy: "git 1234567"}
	ro := &v1alpha1.Rollout{Spec: v1alpha1.RolloutSpec{Approvals: []v1alpha1.Approval{inCluster}}}
	for _, tc := range []struct {
		name   string
		policy *v1alpha1.ApprovalPolicy
		want   int
	}{
		{"no policy", nil, 2},
		{"an empty policy", &v1alpha1.ApprovalPolicy{}, 2},
		{"signedBy", &v1alpha1.ApprovalPolicy{SignedBy: &v1alpha1.LocalObjectReference{Name: "keys"}}, 1},
		{"mergeOnly", &v1alpha1.ApprovalPolicy{MergeOnly: true}, 1},
	} {
		sc := &scope{ro: ro, repository: &v1alpha1.Repository{Spec: v1alpha1.RepositorySpec{Approvals: tc.policy}},
			gitApprovals: []v1alpha1.Approval{fromGit}}
		got := countedApprovals(sc)
		if len(got) != tc.want || got[len(got)-1] != fromGit {
			t.Errorf("%s: counted %+v", tc.name, got)
		}
	}
}
