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
)

// glMRs is the escaped path of the merge requests of group/sub/app.
const glMRs = "/api/v4/projects/group%2Fsub%2Fapp/merge_requests"

// newFakeGitLab serves the part of the GitLab REST API v4 the client uses
// for project group/sub/app (ID 7; forks have ID 99).
func newFakeGitLab(t *testing.T) (*fakeForge, *httptest.Server) {
	f := newFakeForge(t)
	return f, f.serveAPI(t, "PRIVATE-TOKEN", "", f.gitlab)
}

func (f *fakeForge) gitlab(w http.ResponseWriter, r *http.Request, body map[string]any) {
	if a := r.Header.Get("Accept"); a != "application/json" {
		f.t.Errorf("%s %s: Accept %q", r.Method, r.URL.Path, a)
	}
	path := r.URL.EscapedPath()
	rest, found := strings.CutPrefix(path, glMRs)
	parts := strings.Split(strings.TrimPrefix(rest, "/"), "/")
	switch sha, isStatus := strings.CutPrefix(path, strings.TrimSuffix(glMRs, "/merge_requests")+"/statuses/"); {
	case isStatus && r.Method == http.MethodPost:
		f.postStatus(w, sha, body)
	case !found:
		writeJSON(w, http.StatusNotFound, map[string]any{"message": "404 Project Not Found"})
	case rest == "" && r.Method == http.MethodGet:
		f.glList(w, r)
	case rest == "" && r.Method == http.MethodPost:
		f.glCreate(w, body)
	case len(parts) == 1 && r.Method == http.MethodPut && f.pr(parts[0]) != nil:
		f.glUpdate(w, f.pr(parts[0]), body)
	case len(parts) == 2 && parts[1] == "approvals" && r.Method == http.MethodGet && f.pr(parts[0]) != nil:
		by := []map[string]any{}
		for _, rv := range f.pr(parts[0]).Reviews {
			by = append(by, map[string]any{"user": map[string]any{"username": rv.Login}})
		}
		writeJSON(w, http.StatusOK, map[string]any{"approved_by": by})
	case len(parts) == 2 && parts[1] == "notes" && r.Method == http.MethodPost && f.pr(parts[0]) != nil:
		p := f.pr(parts[0])
		s, _ := str(body, "body")
		p.Comments = append(p.Comments, s)
		writeJSON(w, http.StatusCreated, map[string]any{"id": len(p.Comments), "body": s})
	default:
		writeJSON(w, http.StatusNotFound, map[string]any{"message": "404 Not found"})
	}
}

func (f *fakeForge) glJSON(p *fakePR) map[string]any {
	state, source := "opened", 7
	if p.State != "open" {
		state = p.State
	}
	if p.Fork {
		source = 99
	}
	return map[string]any{
		"iid": p.Num, "web_url": "https://gitlab.example/group/sub/app/-/merge_requests/" + strconv.Itoa(p.Num),
		"title": p.Title, "description": p.Body, "state": state, "labels": append([]string{}, p.Labels...),
		"source_branch": p.Head, "target_branch": p.Base, "source_project_id": source, "target_project_id": 7,
		"author": map[string]any{"username": p.Author}, "sha": p.HeadSHA, "merge_commit_sha": p.MergeSHA,
	}
}

func (f *fakeForge) glList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	state := q.Get("state")
	if state == "opened" {
		state = "open"
	}
	var match []map[string]any
	for _, p := range f.listable(state) {
		if p.State != state && state != "all" {
			continue // "closed" includes "merged" for GitHub only
		}
		if s := q.Get("source_branch"); s != "" && s != p.Head {
			continue
		}
		if b := q.Get("target_branch"); b != "" && b != p.Base {
			continue
		}
		match = append(match, f.glJSON(p))
	}
	items, n, last := page(f, r, match)
	w.Header().Set("X-Page", strconv.Itoa(n))
	w.Header().Set("X-Next-Page", "")
	if n < last {
		w.Header().Set("X-Next-Page", strconv.Itoa(n+1))
	}
	writeJSON(w, http.StatusOK, items)
}

func (f *fakeForge) glCreate(w http.ResponseWriter, body map[string]any) {
	head, _ := str(body, "source_branch")
	base, _ := str(body, "target_branch")
	if p := f.open(head, base); p != nil {
		writeJSON(w, http.StatusConflict, map[string]any{"message": []string{
			"Another open merge request already exists for this source branch: !" + strconv.Itoa(p.Num)}})
		return
	}
	title, _ := str(body, "title")
	text, _ := str(body, "description")
	p := f.addLocked(fakePR{Head: head, Base: base, Title: title, Body: text})
	if l, _ := str(body, "labels"); l != "" {
		p.Labels = strings.Split(l, ",")
	}
	writeJSON(w, http.StatusCreated, f.glJSON(p))
}

func (f *fakeForge) glUpdate(w http.ResponseWriter, p *fakePR, body map[string]any) {
	if s, ok := str(body, "title"); ok {
		p.Title = s
	}
	if s, ok := str(body, "description"); ok {
		p.Body = s
	}
	if s, ok := str(body, "add_labels"); ok {
		p.Labels = append(p.Labels, strings.Split(s, ",")...)
	}
	if s, _ := str(body, "state_event"); s == "close" {
		p.State = "closed"
	}
	writeJSON(w, http.StatusOK, f.glJSON(p))
}

const glListApprove2 = "GET " + glMRs + "?per_page=100&source_branch=rollgate%2Fapprove%2Fdemo%2Fecho%2Fr2-step-2&state=opened&target_branch=main"

func TestGitLabEnsureUpdatesBodyAndLabels(t *testing.T) {
	f, srv := newFakeGitLab(t)
	n := f.add(fakePR{Head: "rollgate/approve/demo/echo/r2-step-2", Base: "main", Title: "Approve step 2", Body: "old", Labels: []string{"team"}})
	c := newClient(t, GitLab, srv.URL+"/api/v4/", "group/sub/app", testToken)

	url, err := c.EnsurePullRequest(context.Background(), approvePR("Approve step 2", "new"))
	if err != nil || url != "https://gitlab.example/group/sub/app/-/merge_requests/1" {
		t.Fatalf("EnsurePullRequest = %q, %v", url, err)
	}
	sameCalls(t, f.takeCalls(), []string{
		glListApprove2,
		"PUT " + glMRs + `/1 {"description":"new","title":"Approve step 2"}`,
		"PUT " + glMRs + `/1 {"add_labels":"rollgate"}`,
	})
	if got := f.get(n); got.Body != "new" || strings.Join(got.Labels, ",") != "team,rollgate" {
		t.Errorf("merge request after update: %+v", got)
	}
}

func TestGitLabCloseStale(t *testing.T) {
	f, srv := newFakeGitLab(t)
	f.pageSize = 2
	prefix := "rollgate/approve/demo/echo/"
	old := f.add(fakePR{Head: prefix + "r1-step-1", Base: "main"})
	f.add(fakePR{Head: "feature/x", Base: "main"})
	f.add(fakePR{Head: prefix + "r1-step-2", Base: "main", Fork: true})
	current := f.add(fakePR{Head: prefix + "r2-step-1", Base: "main"})
	f.add(fakePR{Head: prefix + "r0-step-1", Base: "main", State: "merged"})
	c := newClient(t, GitLab, srv.URL, "group/sub/app", testToken)

	closed, err := c.ClosePullRequests(context.Background(), prefix, func(h string) bool { return strings.HasSuffix(h, "/r2-step-1") })
	if err != nil || strings.Join(closed, " ") != prefix+"r1-step-1" {
		t.Fatalf("ClosePullRequests = %q, %v", closed, err)
	}
	sameCalls(t, f.takeCalls(), []string{
		"GET " + glMRs + "?per_page=100&state=opened",
		"GET " + glMRs + "?page=2&per_page=100&state=opened",
		"PUT " + glMRs + `/1 {"state_event":"close"}`,
		"POST " + glMRs + `/1/notes {"body":"rollgate closed this pull request: branch ` + "`" + prefix + "r1-step-1`" + ` is stale, superseded by a newer revision or step of the rollout."}`,
	})
	if f.get(old).State != "closed" || f.get(current).State != "open" || f.get(3).State != "open" {
		t.Errorf("states after closing: %s, %s, fork %s", f.get(old).State, f.get(current).State, f.get(3).State)
	}
}

func TestGitLabMerged(t *testing.T) {
	f, srv := newFakeGitLab(t)
	f.add(fakePR{Head: "rollgate/revert/demo/echo/r2", Base: "main", State: "merged"})
	c := newClient(t, GitLab, srv.URL, "group/sub/app", testToken)

	merged, url, err := c.MergedPullRequest(context.Background(), "rollgate/revert/demo/echo/r2")
	if err != nil || !merged || url != "https://gitlab.example/group/sub/app/-/merge_requests/1" {
		t.Errorf("MergedPullRequest = %v, %q, %v", merged, url, err)
	}
	sameCalls(t, f.takeCalls(), []string{
		"GET " + glMRs + "?per_page=100&source_branch=rollgate%2Frevert%2Fdemo%2Fecho%2Fr2&state=merged",
	})
}

func TestGitLabUnauthorized(t *testing.T) {
	f, srv := newFakeGitLab(t)
	f.token = "the-right-one"
	c := newClient(t, GitLab, srv.URL, "group/sub/app", testToken)

	_, err := c.ClosePullRequests(context.Background(), "rollgate/", nil)
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("error = %v, want ErrAuth", err)
	}
	want := `forge gitlab: GET ` + glMRs + `: 401 Unauthorized: {"message":"401 Unauthorized: bad credentials [redacted]"}`
	if err.Error() != want {
		t.Errorf("error = %q\nwant    %q", err, want)
	}
}

func TestGitLabPullRequestReviews(t *testing.T) {
	f, srv := newFakeGitLab(t)
	head := "rollgate/approve/demo/echo/r2-step-1"
	f.add(fakePR{Head: head, Base: "main", State: "merged", Author: "bob", HeadSHA: "h2", MergeSHA: "m2",
		Reviews: []fakeReview{{Login: "alice"}, {Login: "carol"}}})
	c := newClient(t, GitLab, srv.URL, "group/sub/app", testToken)
	rec, err := c.PullRequestReviews(context.Background(), head)
	if err != nil {
		t.Fatal(err)
	}
	want := PullRequestRecord{Number: 1, URL: "https://gitlab.example/group/sub/app/-/merge_requests/1", Author: "bob", Head: head, Base: "main",
		State: StateMerged, HeadSHA: "h2", MergeCommit: "m2", Reviews: []Review{{Login: "alice", State: ReviewApproved}, {Login: "carol", State: ReviewApproved}}}
	if !reflect.DeepEqual(rec, want) {
		t.Errorf("PullRequestReviews =\n%+v\nwant\n%+v", rec, want)
	}
	sameCalls(t, f.takeCalls(), []string{
		"GET " + glMRs + "?per_page=100&source_branch=rollgate%2Fapprove%2Fdemo%2Fecho%2Fr2-step-1&state=all",
		"GET " + glMRs + "/1/approvals",
	})
}
