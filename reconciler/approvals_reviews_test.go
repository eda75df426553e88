package reconciler

import (
	"strings"
	"testing"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync/forge"
)

// TestJudgeReviews is the review policy's decision on review sets: only
// approving, undismissed reviews of the merged head, by distinct allowed
// logins other than the author, count.
func TestJudgeReviews(t *testing.T) {
	const url = "https://git.example/acme/app/pulls/7"
	merged := func(rs ...forge.Review) forge.PullRequestRecord {
		return forge.PullRequestRecord{Number: 7, URL: url, Author: "bob", Head: "rollgate/approve/x", Base: "main",
			State: forge.StateMerged, HeadSHA: "head2", MergeCommit: "merge1", Reviews: rs}
	}
	ok := func(login string) forge.Review {
		return forge.Review{Login: login, State: forge.ReviewApproved, CommitSHA: "head2"}
	}
	with := func(r forge.PullRequestRecord, f func(*forge.PullRequestRecord)) forge.PullRequestRecord {
		f(&r)
		return r
	}
	one := &v1alpha1.ReviewPolicy{MinApprovals: 1, From: []string{"alice", "Carol"}}
	two := &v1alpha1.ReviewPolicy{MinApprovals: 2, From: []string{"alice", "carol", "bob"}}
	cases := []struct {
		name   string
		p      *v1alpha1.ReviewPolicy
		rec    forge.PullRequestRecord
		commit string
		want   string // "" when it counts; else a part of the error
	}{
		{"one allowed approval", one, merged(ok("alice")), "merge1", ""},
		{"login matched case-insensitively", one, merged(ok("carol")), "merge1", ""},
		{"merged without review", one, merged(), "merge1", "pull request " + url + " was merged with 0 of 1 required approving reviews from [alice Carol]"},
		{"a stranger approved", one, merged(ok("mallory")), "merge1", "mallory is not in spec.approvals.reviews.from"},
		{"the author approved", two, merged(ok("bob"), ok("alice")), "merge1", "bob is the author"},
		{"approved an older commit", one, merged(forge.Review{Login: "alice", State: forge.ReviewApproved, CommitSHA: "head1"}), "merge1", "alice approved commit head1, not the merged head head2"},
		{"stale", one, merged(forge.Review{Login: "alice", State: forge.ReviewApproved, CommitSHA: "head2", Stale: true}), "merge1", "0 of 1"},
		{"dismissed", one, merged(forge.Review{Login: "alice", State: forge.ReviewApproved, CommitSHA: "head2", Dismissed: true}), "merge1", "alice's last review is dismissed"},
		{"approval then changes requested", one, merged(ok("alice"), forge.Review{Login: "alice", State: forge.ReviewChangesRequested, CommitSHA: "head2"}), "merge1", "alice's last review is changes requested"},
		{"a comment after approving keeps it", one, merged(ok("alice"), forge.Review{Login: "alice", State: forge.ReviewCommented, CommitSHA: "head2"}), "merge1", ""},
		{"one login twice is one review", two, merged(ok("alice"), ok("ALICE")), "merge1", "1 of 2"},
		{"two distinct allowed", two, merged(ok("alice"), ok("carol")), "merge1", ""},
		{"no commit recorded (GitLab)", one, merged(forge.Review{Login: "alice", State: forge.ReviewApproved}), "merge1", ""},
		{"closed without merge", one, with(merged(ok("alice")), func(r *forge.PullRequestRecord) { r.State, r.MergeCommit = forge.StateClosed, "" }), "merge1", "pull request " + url + " was closed without merge"},
		{"reopened", one, with(merged(ok("alice")), func(r *forge.PullRequestRecord) { r.State, r.MergeCommit = forge.StateOpen, "" }), "merge1", "pull request " + url + " is open, not merged"},
		{"wrong base", one, with(merged(ok("alice")), func(r *forge.PullRequestRecord) { r.Base = "release" }), "merge1", "was merged into release, not into the tracked branch main"},
		{"another merge commit", one, merged(ok("alice")), "other9", "was merged as commit merge1, but the approval reached main with commit other9"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec, err := JudgeReviews(c.p, c.rec, "main", c.commit)
			switch {
			case c.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case c.want == "" && !strings.Contains(rec, url):
				t.Errorf("record %q does not name the pull request", rec)
			case c.want != "" && err == nil:
				t.Errorf("counted (%s); want refused with %q", rec, c.want)
			case c.want != "" && !strings.Contains(err.Error(), c.want):
				t.Errorf("error %q; want it to hold %q", err, c.want)
			case c.want != "" && !strings.Contains(err.Error(), url):
				t.Errorf("error %q does not name the pull request", err)
			}
		})
	}
}
