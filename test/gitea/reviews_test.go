package gitea_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/gitsync/forge"
	"github.com/rollgate/rollgate/reconciler/rollout"
	"github.com/rollgate/rollgate/test/gitea"
)

// reviewGate is the gate of a Repository with spec.approvals.reviews, at
// the level of its decision: the approval is found on main and the commit
// that brought it is found in main's history (gitsync's verifier, as the
// controller's history clone runs it), the forge client reads the pull
// request and its reviews from Gitea, and rollout.JudgeReviews decides.
type reviewGate struct {
	f        *fixture
	history  *gitsync.Repository
	verifier *gitsync.ApprovalVerifier
}

func newReviewGate(t *testing.T, f *fixture) *reviewGate {
	t.Helper()
	h, err := gitsync.Open(gitsync.Options{URL: f.repo.CloneURL, Credentials: f.creds, Depth: -1})
	if err != nil {
		t.Fatal(err)
	}
	v, err := gitsync.NewApprovalVerifier(nil, false)
	if err != nil {
		t.Fatal(err)
	}
	return &reviewGate{f: f, history: h, verifier: v}
}

// judge decides the gate of step of revision, whose approval branch is p,
// under policy.
func (g *reviewGate) judge(t *testing.T, p gitsync.Proposal, revision string, step int, policy *v1alpha1.ReviewPolicy) (string, error) {
	t.Helper()
	ctx := context.Background()
	if err := g.history.Fetch(ctx, "main"); err != nil {
		t.Fatal(err)
	}
	snap, err := g.history.LocalSnapshot("main")
	if err != nil {
		t.Fatal(err)
	}
	v, found, err := g.verifier.Verify(snap, manifestPath, ns, "echoserver", gitsync.Approval{Revision: revision, Step: step})
	if err != nil || !found || !v.Counts() {
		t.Fatalf("the approval of %s step %d on main: %+v, found %v, %v", revision, step, v, found, err)
	}
	rec, err := g.f.forge.PullRequestReviews(ctx, p.Branch)
	if err != nil {
		t.Fatalf("PullRequestReviews(%s): %v", p.Branch, err)
	}
	return rollout.JudgeReviews(policy, rec, "main", v.Commit)
}

// open opens the approval pull request of p into base and returns its
// number and URL.
func (g *reviewGate) open(t *testing.T, p gitsync.Proposal, revision string, step int, base string) (int64, string) {
	t.Helper()
	req := approvalRequest(p, "echoserver", revision, step)
	req.Base = base
	u, err := g.f.forge.EnsurePullRequest(context.Background(), req)
	if err != nil {
		t.Fatalf("EnsurePullRequest: %v", err)
	}
	i := strings.LastIndex(u, "/")
	var n int64
	if _, err := fmt.Sscan(u[i+1:], &n); err != nil {
		t.Fatalf("pull request URL %q: %v", u, err)
	}
	return n, u
}

// merge merges pull request n with a merge commit, as its author (no
// branch protection: the forge lets anything through, the gate must not).
func (g *reviewGate) merge(t *testing.T, n int64) {
	t.Helper()
	ctx := context.Background()
	if _, err := forgeServer.WaitMergeable(ctx, g.f.repo, n, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := forgeServer.Merge(ctx, forgeServer.Admin, g.f.repo, n); err != nil {
		t.Fatalf("merge %d: %v", n, err)
	}
}

// createUser adds an ordinary user through the admin API, with a token
// that may review, and gives them write access to r.
func createUser(t *testing.T, r gitea.Repo, name string) gitea.User {
	t.Helper()
	ctx := context.Background()
	s := forgeServer
	u := gitea.User{Name: name, Password: "pw-" + name + "-0123456789", Email: name + "@example.com"}
	in := map[string]any{"username": u.Name, "email": u.Email, "password": u.Password, "must_change_password": false}
	if err := s.Call(ctx, s.Admin.Token, http.MethodPost, "admin/users", in, nil); err != nil {
		t.Fatalf("create user %s: %v", name, err)
	}
	tok, err := s.CreateToken(ctx, u, "review", "write:repository")
	if err != nil {
		t.Fatalf("token of %s: %v", name, err)
	}
	u.Token = tok
	path := "repos/" + url.PathEscape(r.Owner) + "/" + url.PathEscape(r.Name) + "/collaborators/" + url.PathEscape(name)
	if err := s.Call(ctx, s.Admin.Token, http.MethodPut, path, map[string]any{"permission": "write"}, nil); err != nil {
		t.Fatalf("collaborator %s: %v", name, err)
	}
	return u
}

// TestReviewPolicyOnGitea: under spec.approvals.reviews an approval merged
// on a real Gitea counts only with enough approving reviews, by allowed
// logins other than the author, of the head that was merged. Merged
// without review, reviewed by a stranger, reviewed then pushed to, and
// approved by its author only, the gate holds with a message naming the
// pull request; with two allowed reviews it opens. Closed without merge
// and merged into another branch, it holds too.
func TestReviewPolicyOnGitea(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := forgeServer
	f := newFixture(t, "reviews")
	g := newReviewGate(t, f)
	stranger := createUser(t, f.repo, "stranger")
	carol := createUser(t, f.repo, "carol")
	rev := s.Reviewer
	byReviewer := &v1alpha1.ReviewPolicy{MinApprovals: 1, From: []string{rev.Name}}

	holds := func(t *testing.T, got string, err error, url string, want ...string) {
		t.Helper()
		if err == nil {
			t.Fatalf("the gate opens (%s); want it to hold", got)
		}
		msg := err.Error()
		if !strings.Contains(msg, "pull request "+url) {
			t.Errorf("message %q does not name pull request %s", msg, url)
		}
		for _, w := range want {
			if !strings.Contains(msg, w) {
				t.Errorf("message %q lacks %q", msg, w)
			}
		}
		t.Logf("holds: %s", msg)
	}

	t.Run("merged without review", func(t *testing.T) {
		p := f.propose(t, "echoserver", "aa000001", 1)
		n, u := g.open(t, p, "aa000001", 1, "main")
		g.merge(t, n)
		got, err := g.judge(t, p, "aa000001", 1, byReviewer)
		holds(t, got, err, u, "was merged with 0 of 1 required approving reviews from [reviewer]")
	})
	t.Run("reviewed by a stranger", func(t *testing.T) {
		p := f.propose(t, "echoserver", "aa000002", 1)
		n, u := g.open(t, p, "aa000002", 1, "main")
		if err := s.Review(ctx, stranger, f.repo, n, "APPROVED", "lgtm"); err != nil {
			t.Fatal(err)
		}
		g.merge(t, n)
		got, err := g.judge(t, p, "aa000002", 1, byReviewer)
		holds(t, got, err, u, "0 of 1", "stranger is not in spec.approvals.reviews.from")
	})
	t.Run("reviewed then pushed to", func(t *testing.T) {
		p := f.propose(t, "echoserver", "aa000003", 1)
		n, u := g.open(t, p, "aa000003", 1, "main")
		if err := s.Review(ctx, rev, f.repo, n, "APPROVED", "lgtm"); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateFile(ctx, f.repo, p.Branch, "later.txt", []byte("pushed after the review\n")); err != nil {
			t.Fatal(err)
		}
		g.merge(t, n)
		got, err := g.judge(t, p, "aa000003", 1, byReviewer)
		holds(t, got, err, u, "0 of 1", "reviewer approved commit "+p.Commit[:7]+", not the merged head")
	})
	t.Run("approved by the author only", func(t *testing.T) {
		p := f.propose(t, "echoserver", "aa000004", 1)
		n, u := g.open(t, p, "aa000004", 1, "main")
		// Gitea refuses an author's approval of their own pull request.
		err := s.Review(ctx, s.Admin, f.repo, n, "APPROVED", "self-approval")
		var apiErr *gitea.APIError
		if !errors.As(err, &apiErr) {
			t.Fatalf("the author's approval: %v; want Gitea to refuse it", err)
		}
		t.Logf("Gitea refuses the author's approval: %v", err)
		if err := s.Review(ctx, s.Admin, f.repo, n, "COMMENT", "looks right to me"); err != nil {
			t.Fatal(err)
		}
		g.merge(t, n)
		got, err := g.judge(t, p, "aa000004", 1, &v1alpha1.ReviewPolicy{MinApprovals: 1, From: []string{s.Admin.Name}})
		holds(t, got, err, u, "was merged with 0 of 1 required approving reviews from ["+s.Admin.Name+"]")
	})
	t.Run("two allowed reviews", func(t *testing.T) {
		p := f.propose(t, "echoserver", "aa000005", 1)
		n, u := g.open(t, p, "aa000005", 1, "main")
		for _, who := range []gitea.User{rev, carol, stranger} {
			if err := s.Review(ctx, who, f.repo, n, "APPROVED", "lgtm"); err != nil {
				t.Fatal(err)
			}
		}
		g.merge(t, n)
		merge, err := s.BranchHead(ctx, f.repo, "main")
		if err != nil {
			t.Fatal(err)
		}
		got, err := g.judge(t, p, "aa000005", 1, &v1alpha1.ReviewPolicy{MinApprovals: 2, From: []string{rev.Name, carol.Name}})
		if err != nil {
			t.Fatalf("the gate holds: %v; want it to open", err)
		}
		if want := "pull request " + u + " merged as " + merge + " with approving reviews by reviewer, carol on " + p.Commit; got != want {
			t.Errorf("record %q\nwant    %q", got, want)
		}
		t.Logf("opens: %s", got)
		// A reviewer removed from the allowed set after approving: it holds.
		_, err = g.judge(t, p, "aa000005", 1, &v1alpha1.ReviewPolicy{MinApprovals: 2, From: []string{rev.Name}})
		holds(t, "", err, u, "1 of 2", "carol is not in spec.approvals.reviews.from")
	})
	t.Run("closed without merge", func(t *testing.T) {
		p := f.propose(t, "echoserver", "aa000006", 1)
		n, u := g.open(t, p, "aa000006", 1, "main")
		if err := s.Review(ctx, rev, f.repo, n, "APPROVED", "lgtm"); err != nil {
			t.Fatal(err)
		}
		path := "repos/" + url.PathEscape(f.repo.Owner) + "/" + url.PathEscape(f.repo.Name) + fmt.Sprintf("/pulls/%d", n)
		if err := s.Call(ctx, s.Admin.Token, http.MethodPatch, path, map[string]any{"state": "closed"}, nil); err != nil {
			t.Fatal(err)
		}
		rec, err := f.forge.PullRequestReviews(ctx, p.Branch)
		if err != nil || rec.State != forge.StateClosed {
			t.Fatalf("PullRequestReviews = %+v, %v; want it closed", rec, err)
		}
		got, err := rollout.JudgeReviews(byReviewer, rec, "main", p.Commit)
		holds(t, got, err, u, "was closed without merge")
	})
	t.Run("merged into another branch", func(t *testing.T) {
		path := "repos/" + url.PathEscape(f.repo.Owner) + "/" + url.PathEscape(f.repo.Name) + "/branches"
		if err := s.Call(ctx, s.Admin.Token, http.MethodPost, path, map[string]any{"new_branch_name": "release", "old_branch_name": "main"}, nil); err != nil {
			t.Fatal(err)
		}
		p := f.propose(t, "echoserver", "aa000007", 1)
		n, u := g.open(t, p, "aa000007", 1, "release")
		if err := s.Review(ctx, rev, f.repo, n, "APPROVED", "lgtm"); err != nil {
			t.Fatal(err)
		}
		g.merge(t, n)
		rec, err := f.forge.PullRequestReviews(ctx, p.Branch)
		if err != nil {
			t.Fatal(err)
		}
		got, err := rollout.JudgeReviews(byReviewer, rec, "main", rec.MergeCommit)
		holds(t, got, err, u, "was merged into release, not into the tracked branch main")
	})
}
