package reconciler

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/gitsync/forge"
)

// forgeClient returns the pull-request client of a Repository, or nil
// when it configures no forge. The token is read from the Secret on every
// call and never kept beyond it.
func (r *RolloutReconciler) forgeClient(ctx context.Context, repo *v1alpha1.Repository) (forge.Client, error) {
	f := repo.Spec.Forge
	if f == nil {
		return nil, nil
	}
	var s corev1.Secret
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: repo.Namespace, Name: f.SecretRef.Name}, &s); err != nil {
		return nil, fmt.Errorf("getting Secret %s/%s named by Repository %s spec.forge.secretRef: %w", repo.Namespace, f.SecretRef.Name, repo.Name, err)
	}
	var opts []forge.Option
	if r.Options.GitInsecureHTTP {
		opts = append(opts, forge.AllowHTTP())
	}
	return forge.New(f.Provider, f.URL, f.Project, string(s.Data["token"]), &http.Client{Timeout: 30 * time.Second}, opts...)
}

// openApprovalRequest opens the pull request of the gate the Rollout waits
// at, once, with the step's numbers in its body, and closes the approval
// pull requests of earlier gates that were never merged.
func (r *RolloutReconciler) openApprovalRequest(ctx context.Context, sc *scope) error {
	ro := sc.ro
	a := ro.Status.AwaitingApproval
	if a == nil || a.Branch == "" || a.PullRequestURL != "" {
		return nil
	}
	fc, err := r.forgeClient(ctx, sc.repository)
	if err != nil || fc == nil {
		return err
	}
	url, err := fc.EnsurePullRequest(ctx, forge.PullRequest{
		Head: a.Branch, Base: trackedBranch(ro, sc.repository),
		Title:  forge.ApprovalTitle(ro.Namespace, ro.Name, a.Revision, int(a.Attempt), int(a.Step), int(ro.Status.StepCount)),
		Body:   forge.ApprovalBody(ro.Namespace, ro.Name, a.Revision, int(a.Attempt), int(a.Step), int(ro.Status.StepCount), facts4PR(ro)),
		Labels: []string{"rollgate"},
	})
	if err != nil {
		return err
	}
	a.PullRequestURL = url
	keep := func(head string) bool { return head == a.Branch }
	_, err = fc.ClosePullRequests(ctx, gitsync.ApprovalBranchesOf(ro.Namespace, ro.Name), keep)
	return err
}

// openRevertRequest opens the pull request of a proposed revert.
func (r *RolloutReconciler) openRevertRequest(ctx context.Context, sc *scope, reason string) error {
	ro := sc.ro
	g := ro.Status.Git
	if g == nil || g.RevertBranch == "" || g.RevertBranch == trackedBranch(ro, sc.repository) || g.RevertPullRequestURL != "" {
		return nil
	}
	fc, err := r.forgeClient(ctx, sc.repository)
	if err != nil || fc == nil {
		return err
	}
	url, err := fc.EnsurePullRequest(ctx, forge.PullRequest{
		Head: g.RevertBranch, Base: trackedBranch(ro, sc.repository),
		Title:  forge.RevertTitle(ro.Namespace, ro.Name, ro.Status.CanaryRevision),
		Body:   forge.RevertBody(ro.Namespace, ro.Name, ro.Status.CanaryRevision, reason, facts4PR(ro)),
		Labels: []string{"rollgate"},
	})
	if err != nil {
		return err
	}
	g.RevertPullRequestURL = url
	return nil
}

// facts4PR are the numbers a reviewer sees in a pull request body.
func facts4PR(ro *v1alpha1.Rollout) map[string]string {
	s := ro.Status
	f := map[string]string{
		forge.FactReplicas:       fmt.Sprint(s.Replicas),
		forge.FactStableReplicas: fmt.Sprintf("%d (%d ready)", s.StableReplicas, s.StableReadyReplicas),
		forge.FactCanaryReplicas: fmt.Sprintf("%d (%d ready)", s.CanaryReplicas, s.CanaryReadyReplicas),
		forge.FactTraffic:        cmp.Or(s.Traffic, "0%") + " to the canary",
	}
	for _, m := range s.Analysis {
		if n := len(m.Measurements); n > 0 {
			last := m.Measurements[n-1]
			f[forge.FactAnalysis+": "+m.Template+"/"+m.Metric] = fmt.Sprintf("%s (last value %s)", m.Phase, last.Value)
		}
	}
	return f
}
