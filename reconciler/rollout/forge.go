package rollout

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/gitsync/forge"
	"github.com/rollgate/rollgate/strategy"
	"github.com/rollgate/rollgate/strategy/plantext"
)

// forgeClient returns the pull-request client of a Repository, or nil
// when it configures no forge. The token is read from the Secret on every
// call and never kept beyond it.
func (r *Reconciler) forgeClient(ctx context.Context, repo *v1alpha1.Repository) (forge.Client, error) {
	f := repo.Spec.Forge
	if f == nil {
		return nil, nil
	}
	var s corev1.Secret
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: repo.Namespace, Name: f.SecretRef.Name}, &s); err != nil {
		return nil, fmt.Errorf("getting Secret %s/%s named by Repository %s spec.forge.secretRef: %w", repo.Namespace, f.SecretRef.Name, repo.Name, err)
	}
	var opts []forge.Option
	if r.Options.InsecureHTTP {
		opts = append(opts, forge.AllowHTTP())
	}
	hc := &http.Client{Timeout: 30 * time.Second}
	if ca := s.Data[gitsync.SecretKeyCA]; len(ca) > 0 {
		// A forge behind a private CA, as for Git over HTTPS.
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(ca) {
			return nil, fmt.Errorf("Secret %s/%s named by Repository %s spec.forge.secretRef: key %s holds no PEM certificate", repo.Namespace, f.SecretRef.Name, repo.Name, gitsync.SecretKeyCA)
		}
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		hc.Transport = t
	}
	return forge.New(f.Provider, f.URL, f.Project, string(s.Data["token"]), hc, opts...)
}

// openApprovalRequest opens the pull request of the gate the Rollout waits
// at, once, with the step's numbers in its body, and closes the approval
// pull requests of earlier gates that were never merged.
func (r *Reconciler) openApprovalRequest(ctx context.Context, sc *scope) error {
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
		Title: forge.ApprovalTitle(ro.Namespace, ro.Name, a.Revision, int(a.Attempt), int(a.Step), int(ro.Status.StepCount)),
		Body: forge.ApprovalBody(ro.Namespace, ro.Name, a.Revision, int(a.Attempt), int(a.Step), int(ro.Status.StepCount), facts4PR(ro)) +
			approvalPlan(ro, int(a.Step), statusFileURL(sc, fc)) + groupNote(sc.group, int(a.Step)),
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
func (r *Reconciler) openRevertRequest(ctx context.Context, sc *scope, reason string) error {
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

// approvalPlan is the plan section of an approval pull request: every
// step of the release in the words and table of `rollgate plan`, the step
// the pull request approves marked, and a link to the Rollout's status
// file, where the release stands.
func approvalPlan(ro *v1alpha1.Rollout, current int, statusURL string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n### The release, step by step\n\n")
	steps, err := strategy.Preview(&ro.Spec, ro.Status.Replicas)
	if err != nil {
		fmt.Fprintf(&b, "The steps cannot be shown: %s\n", plantext.Cell(err.Error()))
	} else {
		var routers []string
		for _, r := range ro.Spec.Strategy.TrafficRoutings() {
			routers = append(routers, plantext.RouterName(r))
		}
		rows := make([]plantext.Row, len(steps))
		for i, s := range steps {
			row := plantext.Row{Step: i + 1, New: fmt.Sprint(s.Replicas), Old: fmt.Sprint(s.Stable)}
			var ts []plantext.Traffic
			for _, r := range routers {
				ts = append(ts, plantext.TrafficOn(r, s.Traffic))
			}
			row.Traffic = plantext.TrafficText(ts, len(routers) > 1)
			switch {
			case s.Gate:
				row.Pause = "approval"
			case s.Pause > 0:
				row.Pause = s.Pause.String()
			}
			if a := ro.Spec.Strategy.StepAnalysis(int32(i + 1)); a != nil {
				row.Analysis = strings.Join(a.Templates, ", ")
			}
			rows[i] = row
		}
		plantext.MarkdownTable(&b, rows, current)
	}
	if statusURL != "" {
		fmt.Fprintf(&b, "\nWhere the release stands: [its status file](%s).\n", statusURL)
	}
	return b.String()
}

// statusFileURL links the Rollout's status file on the forge, "" without
// a status writer.
func statusFileURL(sc *scope, fc forge.Client) string {
	if sc.git == nil || sc.git.Writer() == nil {
		return ""
	}
	return fc.FileURL(sc.git.StatusBranch(), sc.git.Writer().PathOf(sc.ro.Namespace, sc.ro.Name))
}

// nextGateStatus decides the commit status the pull request of the latest
// gate should show, from the Rollout's status: pending while the gate
// waits (once its pull request is open), success once the step went on
// or the release completed, failure when the release failed or another
// revision superseded it. A new gate first settles the previous one. ok
// is false when the status shown is already right.
func nextGateStatus(s *v1alpha1.RolloutStatus) (next v1alpha1.GateStatus, desc string, ok bool) {
	var last *v1alpha1.GateStatus
	if s.Git != nil {
		last = s.Git.GateStatus
	}
	a := s.AwaitingApproval
	waiting := a != nil && a.Branch != "" && a.PullRequestURL != ""
	if waiting && (last == nil || last.Branch == a.Branch || last.State != string(forge.StatusPending)) {
		next = v1alpha1.GateStatus{Branch: a.Branch, Revision: a.Revision, Step: a.Step, State: string(forge.StatusPending)}
		desc = fmt.Sprintf("Step %d of %d of %s waits for this pull request to be merged", a.Step, s.StepCount, a.Revision)
		return next, desc, last == nil || *last != next
	}
	if last == nil {
		return next, "", false
	}
	next = *last
	switch {
	case s.CanaryRevision == last.Revision && s.Phase == v1alpha1.PhaseFailed:
		next.State = string(forge.StatusFailure)
		desc = fmt.Sprintf("The release of %s failed and is rolled back: %s", last.Revision, s.Message)
	case last.State != string(forge.StatusPending):
		return next, "", false
	case s.StableRevision == last.Revision && s.Phase == v1alpha1.PhaseHealthy,
		s.CanaryRevision == last.Revision && s.CurrentStepIndex > last.Step:
		next.State = string(forge.StatusSuccess)
		desc = fmt.Sprintf("Step %d of %s approved and rolled out", last.Step, last.Revision)
	case s.CanaryRevision != last.Revision:
		next.State = string(forge.StatusFailure)
		desc = fmt.Sprintf("Superseded: the release of %s ended before step %d (now %s, %s)", last.Revision, last.Step, cmp.Or(s.CanaryRevision, "none"), s.Phase)
	case waiting:
		// Another gate of the same release (a retry's attempt).
		next.State = string(forge.StatusFailure)
		desc = fmt.Sprintf("Superseded by the gate of branch %s", a.Branch)
	}
	return next, desc, next != *last
}

// reportGateStatus sets the commit status nextGateStatus decides on the
// gate's pull request, and records it in status.git.gateStatus, so that
// each change is reported once, also across restarts (a report repeated
// after a restart replaces the same status). A gate whose pull request is
// gone is recorded without a report.
func (r *Reconciler) reportGateStatus(ctx context.Context, sc *scope) error {
	ro := sc.ro
	next, desc, ok := nextGateStatus(&ro.Status)
	if !ok {
		return nil
	}
	fc, err := r.forgeClient(ctx, sc.repository)
	if err != nil || fc == nil {
		return err
	}
	_, err = fc.ReportStatus(ctx, next.Branch, forge.CommitStatus{
		State: forge.StatusState(next.State), Context: forge.StatusContext(ro.Namespace, ro.Name), Description: desc,
	})
	if err != nil && !errors.Is(err, forge.ErrNotFound) {
		return err
	}
	if ro.Status.Git == nil {
		ro.Status.Git = &v1alpha1.GitStatus{}
	}
	ro.Status.Git.GateStatus = &next
	return nil
}
