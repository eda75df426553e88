package reconciler

import (
	"github.com/rollgate/rollgate/api/v1alpha1"
)

// countedApprovals are the approvals the planner may count: those of the
// Rollout object and those found on the tracked branch, or, when the
// Repository restricts approvals (spec.approvals), only the ones found on
// the tracked branch that passed its checks.
func countedApprovals(sc *scope) []v1alpha1.Approval {
	if r := sc.repository; r != nil && r.Spec.Approvals.Enabled() {
		return append([]v1alpha1.Approval(nil), sc.gitApprovals...)
	}
	return append(append([]v1alpha1.Approval(nil), sc.ro.Spec.Approvals...), sc.gitApprovals...)
}
