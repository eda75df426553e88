package forge

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// newFakeGitea serves the part of the Gitea REST API v1 the client uses
// for repository acme/app (repository ID 3; forks have ID 9), which has
// the labels rollgate (ID 1) and team (ID 2). With noTotal it omits
// X-Total-Count, as some proxies strip it.
func newFakeGitea(t *testing.T, noTotal bool) (*fakeForge, *httptest.Server) {
	f := newFakeForge(t)
	return f, f.serveAPI(t, "Authorization", "token ", func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		f.gitea(w, r, body, noTotal)
	})
}

var giteaLabels = []map[string]any{{"id": 1, "name": "rollgate"}, {"id": 2, "name": "team"}}

func (f *fakeForge) gitea(w http.ResponseWriter, r *http.Request, body map[string]any, noTotal bool) {
	rest, found := strings.CutPrefix(r.URL.Path, "/api/v1/repos/acme/app/")
	parts := strings.Split(rest, "/")
	switch {
	case found && rest == "pulls" && r.Method == http.MethodGet:
		var match []map[string]any
		for _, p := range f.listable(r.URL.Query().Get("state")) {
			match = append(match, f.gtJSON(p))
		}
		f.gtPage(w, r, match, noTotal)
	case found && len(parts) == 2 && parts[0] == "statuses" && r.Method == http.MethodPost:
		f.postStatus(w, parts[1], body)
	case found && rest == "labels" && r.Method == http.MethodGet:
		f.gtPage(w, r, giteaLabels, noTotal)
	case found && rest == "pulls" && r.Method == http.MethodPost:
		f.gtCreate(w, body)
	case found && len(parts) == 2 && parts[0] == "pulls" && r.Method == http.MethodPatch && f.pr(parts[1]) != nil:
		p := f.pr(parts[1])
		for k, dst := range map[string]*string{"title": &p.Title, "body": &p.Body, "state": &p.State} {
			if s, ok := str(body, k); ok {
				*dst = s
			}
		}
		writeJSON(w, http.StatusCreated, f.gtJSON(p))
	case found && len(parts) == 3 && parts[0] == "issues" && r.Method == http.MethodPost && f.pr(parts[1]) != nil:
		f.gtIssue(w, parts[2], f.pr(parts[1]), body)
	default:
		writeJSON(w, http.StatusNotFound, map[string]any{"message": "The target couldn't be found."})
	}
}

func (f *fakeForge) gtJSON(p *fakePR) map[string]any {
	head, state := 3, "open"
	if p.Fork {
		head = 9
	}
	if p.State != "open" {
		state = "closed"
	}
	labels := []map[string]any{}
	for _, l := range p.Labels {
		labels = append(labels, map[string]any{"name": l})
	}
	return map[string]any{
		"number": p.Num, "html_url": "https://gitea.example/acme/app/pulls/" + strconv.Itoa(p.Num),
		"title": p.Title, "body": p.Body, "state": state, "merged": p.State == "merged", "labels": labels,
		"head": map[string]any{"ref": p.Head, "repo_id": head, "sha": p.HeadSHA}, "base": map[string]any{"ref": p.Base, "repo_id": 3},
	}
}

// gtPage answers one page (page, limit) with X-Total-Count unless noTotal.
func (f *fakeForge) gtPage(w http.ResponseWriter, r *http.Request, items []map[string]any, noTotal bool) {
	if l := r.URL.Query().Get("limit"); l != "50" {
		f.t.Errorf("%s: limit=%q, want 50", r.URL, l)
	}
	if !noTotal {
		w.Header().Set("X-Total-Count", strconv.Itoa(len(items)))
	}
	out, _, _ := page(f, r, items)
	writeJSON(w, http.StatusOK, out)
}

func (f *fakeForge) gtCreate(w http.ResponseWriter, body map[string]any) {
	head, _ := str(body, "head")
	base, _ := str(body, "base")
	switch p := f.open(head, base); {
	case p != nil:
		writeJSON(w, http.StatusConflict, map[string]any{"message": "pull request already exists for these targets [id: " +
			strconv.Itoa(p.Num) + ", head_branch: " + head + ", base_branch: " + base + "]"})
	case f.empty[head]:
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"message": "Invalid PullRequest: There are no changes between the head and the base"})
	default:
		title, _ := str(body, "title")
		text, _ := str(body, "body")
		writeJSON(w, http.StatusCreated, f.gtJSON(f.addLocked(fakePR{Head: head, Base: base, Title: title, Body: text})))
	}
}

func (f *fakeForge) gtIssue(w http.ResponseWriter, kind string, p *fakePR, body map[string]any) {
	switch kind {
	case "labels":
		for _, id := range body["labels"].([]any) {
			p.Labels = append(p.Labels, giteaLabels[int(id.(float64))-1]["name"].(string))
		}
		writeJSON(w, http.StatusOK, f.gtJSON(p)["labels"])
	case "comments":
		s, _ := str(body, "body")
		p.Comments = append(p.Comments, s)
		writeJSON(w, http.StatusCreated, map[string]any{"id": len(p.Comments), "body": s})
	default:
		writeJSON(w, http.StatusNotFound, map[string]any{"message": "The target couldn't be found."})
	}
}

const (
	gtPulls     = "/api/v1/repos/acme/app/pulls"
	gtListOpen  = "GET " + gtPulls + "?limit=50&page=1&state=open"
	gtListLabel = "GET /api/v1/repos/acme/app/labels?limit=50&page=1"
)

func TestGiteaEnsureCreatesOnce(t *testing.T) {
	f, srv := newFakeGitea(t, false)
	c := newClient(t, Gitea, srv.URL, "acme/app", testToken)
	ctx := context.Background()

	url, err := c.EnsurePullRequest(ctx, approvePR("Approve step 2", "Body"))
	if err != nil || url != "https://gitea.example/acme/app/pulls/1" {
		t.Fatalf("first EnsurePullRequest = %q, %v", url, err)
	}
	sameCalls(t, f.takeCalls(), []string{
		gtListOpen,
		"POST " + gtPulls + ` {"base":"main","body":"Body","head":"rollgate/approve/demo/echo/r2-step-2","title":"Approve step 2"}`,
		gtListLabel,
		`POST /api/v1/repos/acme/app/issues/1/labels {"labels":[1]}`,
	})

	again, err := c.EnsurePullRequest(ctx, approvePR("Approve step 2", "Body"))
	if err != nil || again != url {
		t.Fatalf("second EnsurePullRequest = %q, %v; want %q", again, err, url)
	}
	sameCalls(t, f.takeCalls(), []string{gtListOpen})
	if n := f.count(); n != 1 {
		t.Errorf("the forge holds %d pull requests, want 1", n)
	}
}

func TestGiteaEnsureUpdatesBodySkipsUnknownLabels(t *testing.T) {
	f, srv := newFakeGitea(t, false)
	f.add(fakePR{Head: "rollgate/approve/demo/echo/r2-step-2", Base: "other", Title: "Approve step 2"})
	n := f.add(fakePR{Head: "rollgate/approve/demo/echo/r2-step-2", Base: "main", Title: "Approve step 2", Body: "old"})
	c := newClient(t, Gitea, srv.URL+"/api/v1", "acme/app", testToken)
	pr := approvePR("Approve step 2", "new")
	pr.Labels = []string{"Rollgate", "no-such-label"}

	url, err := c.EnsurePullRequest(context.Background(), pr)
	if err != nil || url != "https://gitea.example/acme/app/pulls/2" {
		t.Fatalf("EnsurePullRequest = %q, %v", url, err)
	}
	sameCalls(t, f.takeCalls(), []string{
		gtListOpen,
		"PATCH " + gtPulls + `/2 {"body":"new","title":"Approve step 2"}`,
		gtListLabel,
		`POST /api/v1/repos/acme/app/issues/2/labels {"labels":[1]}`,
	})
	if got := f.get(n); got.Body != "new" || strings.Join(got.Labels, ",") != "rollgate" {
		t.Errorf("pull request after update: %+v", got)
	}
}

func TestGiteaEnsureConflictAndRejection(t *testing.T) {
	f, srv := newFakeGitea(t, false)
	f.add(fakePR{Head: "rollgate/approve/demo/echo/r2-step-2", Base: "main", Title: "Approve step 2", Body: "Body", Labels: []string{"rollgate"}})
	f.hideOpen = 1
	f.empty = map[string]bool{"rollgate/revert/demo/echo/r2": true}
	c := newClient(t, Gitea, srv.URL, "acme/app", testToken)
	ctx := context.Background()

	url, err := c.EnsurePullRequest(ctx, approvePR("Approve step 2", "Body"))
	if err != nil || url != "https://gitea.example/acme/app/pulls/1" {
		t.Fatalf("EnsurePullRequest after a 409 = %q, %v", url, err)
	}
	if n := f.count(); n != 1 {
		t.Errorf("the forge holds %d pull requests, want 1", n)
	}

	_, err = c.EnsurePullRequest(ctx, PullRequest{Head: "rollgate/revert/demo/echo/r2", Base: "main", Title: "Revert"})
	if !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "POST "+gtPulls+": 422 Unprocessable Entity: ") {
		t.Errorf("EnsurePullRequest of an empty branch: %v, want a 422 ErrRejected", err)
	}
}

func TestGiteaCloseStalePages(t *testing.T) {
	for _, noTotal := range []bool{false, true} {
		t.Run("noTotal="+strconv.FormatBool(noTotal), func(t *testing.T) {
			f, srv := newFakeGitea(t, noTotal)
			f.pageSize = 2
			prefix := "rollgate/approve/demo/echo/"
			f.add(fakePR{Head: "feature/x", Base: "main"})
			f.add(fakePR{Head: prefix + "r1-step-1", Base: "main", Fork: true})
			f.add(fakePR{Head: prefix + "r2-step-1", Base: "main"})
			f.add(fakePR{Head: prefix + "r2-step-2", Base: "main"})
			old := f.add(fakePR{Head: prefix + "r1-step-2", Base: "main"})
			c := newClient(t, Gitea, srv.URL, "acme/app", testToken)

			closed, err := c.ClosePullRequests(context.Background(), prefix, func(h string) bool { return strings.Contains(h, "/r2-") })
			if err != nil || strings.Join(closed, " ") != prefix+"r1-step-2" {
				t.Fatalf("ClosePullRequests = %q, %v", closed, err)
			}
			want := []string{
				gtListOpen,
				"GET " + gtPulls + "?limit=50&page=2&state=open",
				"GET " + gtPulls + "?limit=50&page=3&state=open",
			}
			if noTotal {
				want = append(want, "GET "+gtPulls+"?limit=50&page=4&state=open")
			}
			want = append(want,
				"PATCH "+gtPulls+`/5 {"state":"closed"}`,
				`POST /api/v1/repos/acme/app/issues/5/comments {"body":"rollgate closed this pull request: branch `+"`"+prefix+"r1-step-2`"+` is stale, superseded by a newer revision or step of the rollout."}`,
			)
			sameCalls(t, f.takeCalls(), want)
			if f.get(old).State != "closed" || f.get(2).State != "open" {
				t.Errorf("states after closing: %s, fork %s", f.get(old).State, f.get(2).State)
			}
		})
	}
}

func TestGiteaMerged(t *testing.T) {
	f, srv := newFakeGitea(t, false)
	f.add(fakePR{Head: "rollgate/approve/demo/echo/r2-step-1", Base: "main", State: "closed"})
	f.add(fakePR{Head: "rollgate/approve/demo/echo/r2-step-1", Base: "main", State: "merged", Fork: true})
	c := newClient(t, Gitea, srv.URL, "acme/app", testToken)
	ctx := context.Background()

	if merged, url, err := c.MergedPullRequest(ctx, "rollgate/approve/demo/echo/r2-step-1"); err != nil || merged || url != "" {
		t.Errorf("MergedPullRequest with only a closed and a fork's merged one = %v, %q, %v", merged, url, err)
	}
	f.add(fakePR{Head: "rollgate/approve/demo/echo/r2-step-1", Base: "main", State: "merged"})
	if merged, url, err := c.MergedPullRequest(ctx, "rollgate/approve/demo/echo/r2-step-1"); err != nil || !merged || url != "https://gitea.example/acme/app/pulls/3" {
		t.Errorf("MergedPullRequest = %v, %q, %v", merged, url, err)
	}
	sameCalls(t, f.takeCalls(), []string{"GET " + gtPulls + "?limit=50&page=1&state=closed", "GET " + gtPulls + "?limit=50&page=1&state=closed"})
}

func TestGiteaUnauthorized(t *testing.T) {
	f, srv := newFakeGitea(t, false)
	f.token = "the-right-one"
	c := newClient(t, Gitea, srv.URL, "acme/app", testToken)

	_, _, err := c.MergedPullRequest(context.Background(), "rollgate/revert/demo/echo/r2")
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("error = %v, want ErrAuth", err)
	}
	want := `forge gitea: GET ` + gtPulls + `: 401 Unauthorized: {"message":"401 Unauthorized: bad credentials token [redacted]"}`
	if err.Error() != want {
		t.Errorf("error = %q\nwant    %q", err, want)
	}
}

// TestGiteaWithoutIssueScope: Gitea files labels and comments under the
// issue scope. Without it the pull request is still opened or closed, and
// the error says what failed.
func TestGiteaWithoutIssueScope(t *testing.T) {
	f, srv := newFakeGitea(t, false)
	f.deny = "/labels"
	c := newClient(t, Gitea, srv.URL, "acme/app", testToken)
	ctx := context.Background()

	url, err := c.EnsurePullRequest(ctx, approvePR("Approve step 2", "Body"))
	if !errors.Is(err, ErrAuth) || url != "https://gitea.example/acme/app/pulls/1" || !strings.Contains(err.Error(), "GET /api/v1/repos/acme/app/labels: 403 Forbidden") {
		t.Errorf("EnsurePullRequest = %q, %v; want the URL and a 403 on labels", url, err)
	}

	f.deny = "/comments"
	closed, err := c.ClosePullRequests(ctx, "rollgate/approve/", nil)
	if !errors.Is(err, ErrAuth) || strings.Join(closed, " ") != "rollgate/approve/demo/echo/r2-step-2" || f.get(1).State != "closed" {
		t.Errorf("ClosePullRequests = %q, %v; want it closed and a 403 on the comment", closed, err)
	}
}

// TestGiteaMergedAfterBranchDeleted: once a pull request's head branch is
// deleted (rollgate removes approval branches it no longer needs, and
// Gitea's merge button can delete the branch), Gitea lists the pull
// request with head.ref refs/pull/<n>/head and the branch only in
// head.label. The merge is still found by its branch. (Seen against
// Gitea 1.26 in test/gitea.)
func TestGiteaMergedAfterBranchDeleted(t *testing.T) {
	const head = "rollgate/approve/demo/echo/r2-step-1"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != gtPulls || r.URL.Query().Get("state") != "closed" {
			writeJSON(w, http.StatusNotFound, map[string]any{"message": "The target couldn't be found."})
			return
		}
		w.Header().Set("X-Total-Count", "1")
		writeJSON(w, http.StatusOK, []map[string]any{{
			"number": 3, "html_url": "https://gitea.example/acme/app/pulls/3", "state": "closed", "merged": true,
			"head": map[string]any{"ref": "refs/pull/3/head", "label": head, "repo_id": 3},
			"base": map[string]any{"ref": "main", "label": "main", "repo_id": 3},
		}})
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, Gitea, srv.URL, "acme/app", testToken)

	merged, url, err := c.MergedPullRequest(context.Background(), head)
	if err != nil || !merged || url != "https://gitea.example/acme/app/pulls/3" {
		t.Errorf("MergedPullRequest = %v, %q, %v; want the merged pull request 3", merged, url, err)
	}
}

// TestGiteaUnpushedHeadIsRejected: Gitea answers 404 to a pull request
// whose head branch does not exist. When the repository exists, that is
// ErrRejected (the head is not pushed yet), as for the other forges; a
// missing repository stays ErrNotFound. (Seen against Gitea 1.26 in
// test/gitea.)
func TestGiteaUnpushedHeadIsRejected(t *testing.T) {
	for _, repoExists := range []bool{true, false} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch {
			case r.Method == http.MethodGet && r.URL.Path == gtPulls:
				writeJSON(w, http.StatusOK, []any{})
			case r.Method == http.MethodGet && r.URL.Path == "/api/v1/repos/acme/app" && repoExists:
				writeJSON(w, http.StatusOK, map[string]any{"id": 3, "full_name": "acme/app"})
			default:
				writeJSON(w, http.StatusNotFound, map[string]any{"message": "The target couldn't be found."})
			}
		}))
		c := newClient(t, Gitea, srv.URL, "acme/app", testToken)
		url, err := c.EnsurePullRequest(context.Background(), approvePR("Approve step 2", "Body"))
		srv.Close()
		want := ErrNotFound
		if repoExists {
			want = ErrRejected
		}
		if !errors.Is(err, want) || url != "" {
			t.Errorf("repository exists %v: EnsurePullRequest = %q, %v; want %v", repoExists, url, err, want)
		}
		if repoExists && !strings.Contains(err.Error(), "POST "+gtPulls+": 404 Not Found: the head or base branch does not exist (yet)") {
			t.Errorf("error %q does not say that a branch is missing", err)
		}
	}
}
