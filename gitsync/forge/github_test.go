package forge

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// newFakeGitHub serves the part of the GitHub REST API v3 the client uses
// for repository acme/app (also reachable as /repositories/42, the form
// GitHub's Link headers use).
func newFakeGitHub(t *testing.T) (*fakeForge, *httptest.Server) {
	f := newFakeForge(t)
	return f, f.serveAPI(t, "Authorization", "Bearer ", f.github)
}

func (f *fakeForge) github(w http.ResponseWriter, r *http.Request, body map[string]any) {
	if a, v := r.Header.Get("Accept"), r.Header.Get("X-GitHub-Api-Version"); a != "application/vnd.github+json" || v != "2022-11-28" {
		f.t.Errorf("%s %s: Accept %q, X-GitHub-Api-Version %q", r.Method, r.URL.Path, a, v)
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
	switch {
	case r.Method == http.MethodGet && (r.URL.Path == "/repos/acme/app/pulls" || r.URL.Path == "/repositories/42/pulls"):
		f.ghList(w, r)
	case r.Method == http.MethodPost && r.URL.Path == "/repos/acme/app/pulls":
		f.ghCreate(w, body)
	case r.Method == http.MethodGet && len(parts) == 6 && parts[1] == "acme" && parts[2] == "app" && parts[3] == "pulls" && parts[5] == "reviews" && f.pr(parts[4]) != nil:
		var rs []map[string]any
		for _, rv := range f.pr(parts[4]).Reviews {
			rs = append(rs, map[string]any{"user": map[string]any{"login": rv.Login}, "state": rv.State, "commit_id": rv.Commit})
		}
		items, _, _ := page(f, r, rs)
		writeJSON(w, http.StatusOK, items)
	case r.Method == http.MethodPost && len(parts) == 5 && parts[1] == "acme" && parts[2] == "app" && parts[3] == "statuses":
		f.postStatus(w, parts[4], body)
	case len(parts) == 5 && parts[1] == "acme" && parts[2] == "app" && f.pr(parts[4]) != nil:
		f.ghItem(w, r.Method, parts[3], f.pr(parts[4]), body)
	case len(parts) == 6 && parts[1] == "acme" && parts[2] == "app" && parts[3] == "issues" && f.pr(parts[4]) != nil:
		f.ghIssue(w, r.Method, parts[5], f.pr(parts[4]), body)
	default:
		writeJSON(w, http.StatusNotFound, map[string]any{"message": "Not Found"})
	}
}

func (f *fakeForge) ghJSON(p *fakePR) map[string]any {
	owner, state := "acme", "open"
	if p.Fork {
		owner = "mallory"
	}
	var merged any
	if p.State != "open" {
		state = "closed"
	}
	if p.State == "merged" {
		merged = "2026-01-02T03:04:05Z"
	}
	labels := []map[string]any{}
	for _, l := range p.Labels {
		labels = append(labels, map[string]any{"name": l})
	}
	return map[string]any{
		"number": p.Num, "html_url": "https://github.example/acme/app/pull/" + strconv.Itoa(p.Num),
		"title": p.Title, "body": p.Body, "state": state, "merged_at": merged, "labels": labels,
		"user": map[string]any{"login": p.Author}, "merge_commit_sha": p.MergeSHA,
		"head": map[string]any{"ref": p.Head, "sha": p.HeadSHA, "repo": map[string]any{"full_name": owner + "/app"}},
		"base": map[string]any{"ref": p.Base, "repo": map[string]any{"full_name": "acme/app"}},
	}
}

func (f *fakeForge) ghList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var match []map[string]any
	for _, p := range f.listable(q.Get("state")) {
		if h := q.Get("head"); h != "" && (h != "acme:"+p.Head || p.Fork) {
			continue
		}
		if b := q.Get("base"); b != "" && b != p.Base {
			continue
		}
		match = append(match, f.ghJSON(p))
	}
	items, n, last := page(f, r, match)
	if n < last {
		q.Set("page", strconv.Itoa(n+1))
		w.Header().Set("Link", `<http://`+r.Host+`/repositories/42/pulls?`+q.Encode()+`>; rel="next", <http://`+r.Host+`/repositories/42/pulls?page=`+strconv.Itoa(last)+`>; rel="last"`)
	}
	writeJSON(w, http.StatusOK, items)
}

func (f *fakeForge) ghCreate(w http.ResponseWriter, body map[string]any) {
	head, _ := str(body, "head")
	base, _ := str(body, "base")
	title, _ := str(body, "title")
	text, _ := str(body, "body")
	switch {
	case f.open(head, base) != nil:
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"message": "Validation Failed",
			"errors": []any{map[string]any{"resource": "PullRequest", "code": "custom", "message": "A pull request already exists for acme:" + head + "."}}})
	case f.empty[head]:
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"message": "Validation Failed",
			"errors": []any{map[string]any{"resource": "PullRequest", "code": "custom", "message": "No commits between " + base + " and " + head}}})
	default:
		p := f.addLocked(fakePR{Head: head, Base: base, Title: title, Body: text})
		writeJSON(w, http.StatusCreated, f.ghJSON(p))
	}
}

func (f *fakeForge) ghItem(w http.ResponseWriter, method, kind string, p *fakePR, body map[string]any) {
	if method != http.MethodPatch || kind != "pulls" {
		writeJSON(w, http.StatusNotFound, map[string]any{"message": "Not Found"})
		return
	}
	if s, ok := str(body, "title"); ok {
		p.Title = s
	}
	if s, ok := str(body, "body"); ok {
		p.Body = s
	}
	if s, ok := str(body, "state"); ok {
		p.State = s
	}
	writeJSON(w, http.StatusOK, f.ghJSON(p))
}

func (f *fakeForge) ghIssue(w http.ResponseWriter, method, kind string, p *fakePR, body map[string]any) {
	switch {
	case method == http.MethodPost && kind == "labels":
		for _, l := range body["labels"].([]any) {
			p.Labels = append(p.Labels, l.(string))
		}
		writeJSON(w, http.StatusOK, f.ghJSON(p)["labels"])
	case method == http.MethodPost && kind == "comments":
		s, _ := str(body, "body")
		p.Comments = append(p.Comments, s)
		writeJSON(w, http.StatusCreated, map[string]any{"id": len(p.Comments)})
	default:
		writeJSON(w, http.StatusNotFound, map[string]any{"message": "Not Found"})
	}
}

const ghListApprove2 = "GET /repos/acme/app/pulls?base=main&head=acme%3Arollgate%2Fapprove%2Fdemo%2Fecho%2Fr2-step-2&per_page=100&state=open"

func approvePR(title, body string) PullRequest {
	return PullRequest{Head: "rollgate/approve/demo/echo/r2-step-2", Base: "main", Title: title, Body: body, Labels: []string{"rollgate"}}
}

func TestGitHubEnsureUpdatesBody(t *testing.T) {
	f, srv := newFakeGitHub(t)
	f.add(fakePR{Head: "rollgate/approve/demo/echo/r2-step-2", Base: "main", Fork: true, Title: "fork"})
	n := f.add(fakePR{Head: "rollgate/approve/demo/echo/r2-step-2", Base: "main", Title: "Approve step 2", Body: "old numbers", Labels: []string{"Rollgate", "team"}})
	c := newClient(t, GitHub, srv.URL, "acme/app", testToken)

	url, err := c.EnsurePullRequest(context.Background(), approvePR("Approve step 2", "new numbers"))
	if err != nil || url != "https://github.example/acme/app/pull/2" {
		t.Fatalf("EnsurePullRequest = %q, %v", url, err)
	}
	sameCalls(t, f.takeCalls(), []string{
		ghListApprove2,
		`PATCH /repos/acme/app/pulls/2 {"body":"new numbers","title":"Approve step 2"}`,
	})
	if got := f.get(n); got.Body != "new numbers" || got.Title != "Approve step 2" {
		t.Errorf("pull request after update: %+v", got)
	}
}

func TestGitHubEnsureNothingToMerge(t *testing.T) {
	f, srv := newFakeGitHub(t)
	f.empty = map[string]bool{"rollgate/approve/demo/echo/r2-step-2": true}
	c := newClient(t, GitHub, srv.URL, "acme/app", testToken)

	_, err := c.EnsurePullRequest(context.Background(), approvePR("Approve step 2", "Body"))
	if !errors.Is(err, ErrRejected) {
		t.Fatalf("EnsurePullRequest error = %v, want ErrRejected", err)
	}
	want := `forge github: POST /repos/acme/app/pulls: 422 Unprocessable Entity: {"errors":[{"code":"custom","message":"No commits between main and rollgate/approve/demo/echo/r2-step-2"`
	if !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error = %q\nwant prefix %q", err, want)
	}
}

func TestGitHubCloseStale(t *testing.T) {
	f, srv := newFakeGitHub(t)
	f.pageSize = 2
	prefix := "rollgate/approve/demo/echo/"
	old1 := f.add(fakePR{Head: prefix + "r1-step-1", Base: "main", Title: "r1"})
	f.add(fakePR{Head: "feature/x", Base: "main"})
	current := f.add(fakePR{Head: prefix + "r2-step-2", Base: "main"})
	f.add(fakePR{Head: prefix + "r1-step-2", Base: "main", Fork: true})
	f.add(fakePR{Head: "rollgate/approve/demo/other/r1-step-1", Base: "main"})
	old2 := f.add(fakePR{Head: prefix + "r2-step-1", Base: "main"})
	f.add(fakePR{Head: prefix + "r0-step-1", Base: "main", State: "closed"})
	c := newClient(t, GitHub, srv.URL, "acme/app", testToken)

	closed, err := c.ClosePullRequests(context.Background(), prefix, func(h string) bool { return h == prefix+"r2-step-2" })
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(closed, " "); got != prefix+"r1-step-1 "+prefix+"r2-step-1" {
		t.Errorf("closed %q", got)
	}
	comment := `{"body":"rollgate closed this pull request: branch ` + "`%s`" + ` is stale, superseded by a newer revision or step of the rollout."}`
	sameCalls(t, f.takeCalls(), []string{
		"GET /repos/acme/app/pulls?per_page=100&state=open",
		"GET /repositories/42/pulls?page=2&per_page=100&state=open",
		"GET /repositories/42/pulls?page=3&per_page=100&state=open",
		`PATCH /repos/acme/app/pulls/1 {"state":"closed"}`,
		"POST /repos/acme/app/issues/1/comments " + strings.Replace(comment, "%s", prefix+"r1-step-1", 1),
		`PATCH /repos/acme/app/pulls/6 {"state":"closed"}`,
		"POST /repos/acme/app/issues/6/comments " + strings.Replace(comment, "%s", prefix+"r2-step-1", 1),
	})
	for n, want := range map[int]string{old1: "closed", old2: "closed", current: "open", 4: "open", 5: "open"} {
		if got := f.get(n); got.State != want {
			t.Errorf("pull request %d (%s) is %s, want %s", n, got.Head, got.State, want)
		}
	}
	if len(f.get(old1).Comments) != 1 {
		t.Errorf("pull request %d has %d comments, want 1", old1, len(f.get(old1).Comments))
	}
}

func TestGitHubMerged(t *testing.T) {
	f, srv := newFakeGitHub(t)
	f.add(fakePR{Head: "rollgate/approve/demo/echo/r2-step-1", Base: "main", State: "closed"})
	f.add(fakePR{Head: "rollgate/approve/demo/echo/r2-step-1", Base: "main", State: "merged"})
	c := newClient(t, GitHub, srv.URL, "acme/app", testToken)
	ctx := context.Background()

	merged, url, err := c.MergedPullRequest(ctx, "rollgate/approve/demo/echo/r2-step-1")
	if err != nil || !merged || url != "https://github.example/acme/app/pull/2" {
		t.Errorf("MergedPullRequest = %v, %q, %v", merged, url, err)
	}
	sameCalls(t, f.takeCalls(), []string{
		"GET /repos/acme/app/pulls?head=acme%3Arollgate%2Fapprove%2Fdemo%2Fecho%2Fr2-step-1&per_page=100&state=closed",
	})
	if merged, url, err := c.MergedPullRequest(ctx, "rollgate/approve/demo/echo/r2-step-2"); err != nil || merged || url != "" {
		t.Errorf("MergedPullRequest of an unmerged head = %v, %q, %v", merged, url, err)
	}
}

func TestGitHubUnauthorized(t *testing.T) {
	f, srv := newFakeGitHub(t)
	f.token = "the-right-one"
	c := newClient(t, GitHub, srv.URL, "acme/app", testToken)

	_, err := c.EnsurePullRequest(context.Background(), approvePR("t", "b"))
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("error = %v, want ErrAuth", err)
	}
	want := `forge github: GET /repos/acme/app/pulls: 401 Unauthorized: {"message":"401 Unauthorized: bad credentials Bearer [redacted]"}`
	if err.Error() != want {
		t.Errorf("error = %q\nwant    %q", err, want)
	}
}

func TestGitHubPullRequestReviews(t *testing.T) {
	f, srv := newFakeGitHub(t)
	head := "rollgate/approve/demo/echo/r2-step-1"
	f.add(fakePR{Head: head, Base: "main", State: "closed", Author: "bob"})
	f.add(fakePR{Head: head, Base: "main", State: "merged", Author: "bob", HeadSHA: "h2", MergeSHA: "m2", Reviews: []fakeReview{
		{"alice", "APPROVED", "h1"}, {"carol", "CHANGES_REQUESTED", "h2"}, {"dave", "DISMISSED", "h2"}, {"erin", "COMMENTED", "h2"}, {"alice", "APPROVED", "h2"},
	}})
	c := newClient(t, GitHub, srv.URL, "acme/app", testToken)
	ctx := context.Background()

	rec, err := c.PullRequestReviews(ctx, head)
	if err != nil {
		t.Fatal(err)
	}
	want := PullRequestRecord{Number: 2, URL: "https://github.example/acme/app/pull/2", Author: "bob", Head: head, Base: "main",
		State: StateMerged, HeadSHA: "h2", MergeCommit: "m2", Reviews: []Review{
			{Login: "alice", State: ReviewApproved, CommitSHA: "h1"}, {Login: "carol", State: ReviewChangesRequested, CommitSHA: "h2"},
			{Login: "dave", State: ReviewDismissed, CommitSHA: "h2", Dismissed: true}, {Login: "erin", State: ReviewCommented, CommitSHA: "h2"},
			{Login: "alice", State: ReviewApproved, CommitSHA: "h2"},
		}}
	if !reflect.DeepEqual(rec, want) {
		t.Errorf("PullRequestReviews =\n%+v\nwant\n%+v", rec, want)
	}
	sameCalls(t, f.takeCalls(), []string{
		"GET /repos/acme/app/pulls?head=acme%3Arollgate%2Fapprove%2Fdemo%2Fecho%2Fr2-step-1&per_page=100&state=all",
		"GET /repos/acme/app/pulls/2/reviews?per_page=100",
	})
	if _, err := c.PullRequestReviews(ctx, "rollgate/approve/demo/echo/none"); !errors.Is(err, ErrNotFound) {
		t.Errorf("PullRequestReviews of a head without pull request: %v, want ErrNotFound", err)
	}
}

func TestGitHubPullRequestReviewsClosed(t *testing.T) {
	f, srv := newFakeGitHub(t)
	head := "rollgate/approve/demo/echo/r2-step-1"
	f.add(fakePR{Head: head, Base: "main", State: "closed", Author: "bob", HeadSHA: "h1"})
	c := newClient(t, GitHub, srv.URL, "acme/app", testToken)
	rec, err := c.PullRequestReviews(context.Background(), head)
	if err != nil || rec.State != StateClosed || rec.MergeCommit != "" || rec.Number != 1 {
		t.Errorf("PullRequestReviews = %+v, %v; want the closed pull request 1", rec, err)
	}
}

// TestRateLimitRetryAfter: a 429 with Retry-After is ErrRateLimited with
// the wait, and says it.
func TestRateLimitRetryAfter(t *testing.T) {
	c := answeredBy(t, GitHub, "acme/app", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "120")
		http.Error(w, `{"message":"slow down"}`, http.StatusTooManyRequests)
	})
	_, err := c.PullRequestReviews(context.Background(), "rollgate/approve/demo/echo/r2-step-1")
	var fe *Error
	if !errors.Is(err, ErrRateLimited) || !errors.As(err, &fe) || fe.RetryAfter != 2*time.Minute || !strings.Contains(err.Error(), "retry after 2m0s") {
		t.Errorf("error = %v, want ErrRateLimited with RetryAfter 2m", err)
	}
}

// TestForgeDown: no answer, or a 5xx, is ErrUnavailable.
func TestForgeDown(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "bad gateway", http.StatusBadGateway)
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, Gitea, srv.URL, "acme/app", testToken)
	if _, err := c.PullRequestReviews(context.Background(), "b"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("502: error = %v, want ErrUnavailable", err)
	}
	srv.Close()
	if _, err := c.PullRequestReviews(context.Background(), "b"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("closed server: error = %v, want ErrUnavailable", err)
	}
}
