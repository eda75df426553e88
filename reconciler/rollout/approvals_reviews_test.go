package rollout

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/gitsync/forge"
	"github.com/rollgate/rollgate/reconciler/internal/rollouttest"
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

// TestReviewCheckHoldsWhileTheForgeCannotAnswer: a forge that rate-limits
// (429 with Retry-After), fails (502) or is down holds the gate with a
// message naming the pull request and the reason, never opens it; the
// forge is not asked again before its Retry-After; a passing check is
// never remembered, so it is asked again at every reconcile.
func TestReviewCheckHoldsWhileTheForgeCannotAnswer(t *testing.T) {
	ctx, _, c, _ := rollouttest.StartAPIServer(t)
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "forge", Namespace: "default"},
		Data: map[string][]byte{"token": []byte("t0ken")}}); err != nil {
		t.Fatal(err)
	}
	const branch = "rollgate/approve/default/web/abc-step-1"
	var mu sync.Mutex
	answer, calls := "429", 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		switch {
		case answer == "429":
			w.Header().Set("Retry-After", "120")
			http.Error(w, `{"message":"slow down"}`, http.StatusTooManyRequests)
		case answer == "502":
			http.Error(w, "bad gateway", http.StatusBadGateway)
		case strings.HasSuffix(r.URL.Path, "/pulls"):
			w.Header().Set("X-Total-Count", "1")
			_, _ = w.Write([]byte(`[{"number":7,"html_url":"https://git.example/acme/app/pulls/7","merged":true,"state":"closed",
				"user":{"login":"bob"},"merge_commit_sha":"merge1",
				"head":{"ref":"` + branch + `","sha":"head1","repo_id":1},"base":{"ref":"main","repo_id":1}}]`))
		default:
			w.Header().Set("X-Total-Count", "1")
			_, _ = w.Write([]byte(`[{"user":{"login":"alice"},"state":"APPROVED","commit_id":"head1"}]`))
		}
	}))
	defer srv.Close()
	called := func() int { mu.Lock(); defer mu.Unlock(); return calls }
	set := func(a string) { mu.Lock(); defer mu.Unlock(); answer = a }

	repo := &v1alpha1.Repository{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "default"}, Spec: v1alpha1.RepositorySpec{
		Branch:    "main",
		Forge:     &v1alpha1.ForgeSpec{Provider: "gitea", URL: srv.URL, Project: "acme/app", SecretRef: v1alpha1.LocalObjectReference{Name: "forge"}},
		Approvals: &v1alpha1.ApprovalPolicy{Reviews: &v1alpha1.ReviewPolicy{MinApprovals: 1, From: []string{"alice"}}},
	}}
	ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}}
	ro.Status.AwaitingApproval = &v1alpha1.ApprovalRequest{Revision: "abc", Step: 1, Branch: branch, PullRequestURL: "https://git.example/acme/app/pulls/7"}
	r := &Reconciler{APIReader: c, Options: Options{InsecureHTTP: true}}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	sc := &scope{ro: ro, repository: repo, now: t0}
	git := &gitsync.Verdict{Approval: gitsync.Approval{Revision: "abc", Step: 1}, Commit: "merge1"}

	check := func(wantCalls int, want ...error) *gitsync.Verdict {
		t.Helper()
		v := r.checkReviews(ctx, sc, git)
		if !git.Counts() || git.Reviews != "" {
			t.Fatalf("the verifier's verdict was changed: %+v", git)
		}
		if got := called(); got != wantCalls {
			t.Errorf("the forge was called %d times, want %d", got, wantCalls)
		}
		if len(want) == 0 {
			if !v.Counts() {
				t.Fatalf("holds: %v; want it to open", v.Err)
			}
			return v
		}
		if v.Counts() {
			t.Fatalf("opens (%s); want it to hold", v)
		}
		for _, w := range want {
			if !errors.Is(v.Err, w) {
				t.Errorf("error %v does not wrap %v", v.Err, w)
			}
		}
		if !strings.Contains(v.String(), "pull request https://git.example/acme/app/pulls/7") {
			t.Errorf("message %q does not name the pull request", v)
		}
		t.Logf("holds: %s", v)
		return v
	}
	v := check(1, gitsync.ErrReviewsUnread)
	if !strings.Contains(v.Err.Error(), "429") || !strings.Contains(v.Err.Error(), "retry after 2m0s") {
		t.Errorf("error %q does not say 429 and when to retry", v.Err)
	}
	sc.now = t0.Add(time.Minute) // before Retry-After: not asked again
	check(1, gitsync.ErrReviewsUnread)
	set("502")
	sc.now = t0.Add(121 * time.Second)
	check(2, gitsync.ErrReviewsUnread)
	set("ok")
	sc.now = t0.Add(time.Hour)
	v = check(4)
	if want := "pull request https://git.example/acme/app/pulls/7 merged as merge1 with approving reviews by alice on head1"; v.Reviews != want {
		t.Errorf("record %q, want %q", v.Reviews, want)
	}
	check(6) // a pass is asked again, never remembered
	srv.Close()
	sc.now = t0.Add(2 * time.Hour)
	check(6, gitsync.ErrReviewsUnread)
}
