package rollout

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/gitsync/forge"
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

// approvalRecord is what the status file records of the last approval
// that counted under an approval policy: the ApprovalVerified condition's
// message, while it is True.
func approvalRecord(ro *v1alpha1.Rollout) string {
	if c := conditions.Get(ro, v1alpha1.ApprovalVerifiedCondition); c != nil && c.Status == metav1True {
		return c.Message
	}
	return ""
}

// reviewRecheck is how long a failed review check is reused before the
// forge is asked again (a Retry-After longer than it wins).
const reviewRecheck = 30 * time.Second

// reviewMemo remembers failed review checks, so a gate that holds does not
// ask the forge at every reconcile, and honours a forge's Retry-After. A
// check that passes is never remembered: the gate opens on a fresh answer
// only, and a restart (which forgets everything) asks again.
type reviewMemo struct {
	mu      sync.Mutex
	entries map[string]reviewMemoEntry
}

type reviewMemoEntry struct {
	err   error
	until time.Time
}

var reviewChecks = &reviewMemo{entries: map[string]reviewMemoEntry{}}

func (m *reviewMemo) get(key string, now time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.entries[key]; ok && now.Before(e.until) {
		return e.err
	}
	return nil
}

func (m *reviewMemo) put(key string, err error, until time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.entries) > 1024 {
		clear(m.entries)
	}
	m.entries[key] = reviewMemoEntry{err: err, until: until}
}

// checkReviews applies spec.approvals.reviews of the Repository to v, the
// verdict of the Git checks on the waiting gate's approval: when v counts,
// the forge must say that the approval branch's pull request was merged
// into the tracked branch with the reviews asked for. It returns the
// verdict to use (a copy; v is the verifier's cached one).
func (r *Reconciler) checkReviews(ctx context.Context, sc *scope, v *gitsync.Verdict) *gitsync.Verdict {
	repo := sc.repository
	if v == nil || !v.Counts() || repo == nil || repo.Spec.Approvals == nil || repo.Spec.Approvals.Reviews == nil {
		return v
	}
	p := repo.Spec.Approvals.Reviews
	out := *v
	a := sc.ro.Status.AwaitingApproval
	tracked := trackedBranch(sc.ro, repo)
	if a == nil || a.Branch == "" {
		out.Err = fmt.Errorf("%w: the gate has no approval branch, so no pull request to read reviews from", gitsync.ErrReviewsMissing)
		return &out
	}
	key := fmt.Sprintf("%s/%s@%d %s %s %s", repo.Namespace, repo.Name, repo.Generation, a.Branch, tracked, v.Commit)
	if err := reviewChecks.get(key, sc.now); err != nil {
		out.Err = err
		return &out
	}
	var rec forge.PullRequestRecord
	fc, err := r.forgeClient(ctx, repo)
	if err == nil && fc == nil {
		err = errors.New("spec.forge is not set")
	}
	if err == nil {
		rec, err = fc.PullRequestReviews(ctx, a.Branch)
	}
	switch {
	case errors.Is(err, forge.ErrNotFound) && rec.URL == "":
		out.Err = fmt.Errorf("%w: no pull request from %s found on the forge (did the approval reach %s without one?): %v", gitsync.ErrReviewsMissing, a.Branch, tracked, err)
	case err != nil:
		what := "the pull request from " + a.Branch
		if u := orString(rec.URL, a.PullRequestURL); u != "" {
			what = "pull request " + u
		}
		out.Err = fmt.Errorf("%w: %s: %v; retrying", gitsync.ErrReviewsUnread, what, err)
	default:
		out.Reviews, err = JudgeReviews(p, rec, tracked, v.Commit)
		if err != nil {
			out.Err = fmt.Errorf("%w: %v", gitsync.ErrReviewsMissing, err)
		}
	}
	if out.Err != nil {
		until := sc.now.Add(reviewRecheck)
		var fe *forge.Error
		if errors.As(err, &fe) && fe.RetryAfter > reviewRecheck {
			until = sc.now.Add(fe.RetryAfter)
		}
		reviewChecks.put(key, out.Err, until)
	}
	return &out
}

// JudgeReviews is the review policy's decision (the gate calls it with
// what the forge answered): whether rec, the pull request that brought an
// approval to tracked with commit, meets p. It returns the record of what
// counted, or an error naming the pull request and the reason.
//
// A review counts when it approves, is not dismissed or stale, was made on
// the head that was merged (a review of an older commit, pushed over
// since, does not; one whose commit the forge does not record, as on
// GitLab, does), and is by a login of p.From other than the author. Each
// login counts once, by its last review that approves, asks for changes
// or was dismissed.
func JudgeReviews(p *v1alpha1.ReviewPolicy, rec forge.PullRequestRecord, tracked, commit string) (string, error) {
	pr := "pull request " + rec.URL
	switch {
	case rec.State == forge.StateOpen:
		return "", fmt.Errorf("%s is open, not merged (reopened, or the approval reached %s another way)", pr, tracked)
	case rec.State == forge.StateClosed:
		return "", fmt.Errorf("%s was closed without merge", pr)
	case rec.State != forge.StateMerged:
		return "", fmt.Errorf("%s is %q, not merged", pr, rec.State)
	case rec.Base != tracked:
		return "", fmt.Errorf("%s was merged into %s, not into the tracked branch %s", pr, rec.Base, tracked)
	case rec.MergeCommit != "" && commit != "" && rec.MergeCommit != commit:
		return "", fmt.Errorf("%s was merged as commit %s, but the approval reached %s with commit %s", pr, shortCommit(rec.MergeCommit), tracked, shortCommit(commit))
	}
	allowed := func(login string) bool {
		return slices.ContainsFunc(p.From, func(f string) bool { return strings.EqualFold(f, login) })
	}
	last := map[string]forge.Review{}
	var order []string
	for _, rv := range rec.Reviews {
		switch rv.State {
		case forge.ReviewApproved, forge.ReviewChangesRequested, forge.ReviewDismissed:
		default:
			continue
		}
		k := strings.ToLower(rv.Login)
		if _, ok := last[k]; !ok {
			order = append(order, k)
		}
		last[k] = rv
	}
	var counted, ignored []string
	for _, k := range order {
		rv := last[k]
		switch {
		case rv.State != forge.ReviewApproved || rv.Dismissed:
			if allowed(rv.Login) {
				state := rv.State
				if rv.Dismissed {
					state = forge.ReviewDismissed
				}
				ignored = append(ignored, rv.Login+"'s last review is "+strings.ReplaceAll(state, "_", " "))
			}
		case !allowed(rv.Login):
			ignored = append(ignored, rv.Login+" is not in spec.approvals.reviews.from")
		case strings.EqualFold(rv.Login, rec.Author):
			ignored = append(ignored, rv.Login+" is the author")
		case rv.Stale || rv.CommitSHA != "" && rec.HeadSHA != "" && rv.CommitSHA != rec.HeadSHA:
			ignored = append(ignored, fmt.Sprintf("%s approved commit %s, not the merged head %s", rv.Login, shortCommit(rv.CommitSHA), shortCommit(rec.HeadSHA)))
		default:
			counted = append(counted, rv.Login)
		}
	}
	if len(counted) < int(p.MinApprovals) {
		msg := fmt.Sprintf("%s was merged with %d of %d required approving reviews from [%s]", pr, len(counted), p.MinApprovals, strings.Join(p.From, " "))
		if len(ignored) > 0 {
			msg += " (" + strings.Join(ignored, "; ") + ")"
		}
		return "", errors.New(msg)
	}
	return fmt.Sprintf("%s merged as %s with approving reviews by %s on %s", pr, orString(rec.MergeCommit, "(unknown)"), strings.Join(counted, ", "), orString(rec.HeadSHA, "(unknown)")), nil
}

// orString returns a, or b when a is empty.
func orString(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
