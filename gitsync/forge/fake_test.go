package forge

// The forge APIs are stood in for by httptest servers (github_test.go,
// gitlab_test.go, gitea_test.go) that keep pull requests in memory and
// implement just enough of each API: no GitHub, GitLab or Gitea server can
// run on this machine. They check the exact method, path, query, headers
// and JSON the client sends; the Git side (branches, merges) is tested
// against a real Git server in gitsync.

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// testToken holds characters that URL escaping changes, so redaction of
// every form is exercised.
const testToken = "s3cr3t/t0k+en=value"

// fakePR is a pull request kept by a fake forge.
type fakePR struct {
	Num      int
	Head     string
	Base     string
	Fork     bool // the head branch lives in a fork
	Title    string
	Body     string
	State    string // open, closed or merged
	Labels   []string
	Comments []string
	// Author, HeadSHA, MergeSHA and Reviews serve PullRequestReviews.
	Author   string
	HeadSHA  string
	MergeSHA string
	Reviews  []fakeReview
}

// fakeReview is a review in the forge's own spelling of its state.
type fakeReview struct {
	Login, State, Commit string
}

// fakeForge is the state and request log shared by the fake servers.
type fakeForge struct {
	t        *testing.T
	token    string
	pageSize int
	// hideOpen hides open pull requests from this many listings, as when
	// another writer opened one a moment ago.
	hideOpen int
	// status, when set, answers every request with that status and a body
	// echoing the Authorization headers.
	status int
	// deny answers 403 to requests whose path contains it, as a token
	// lacking a scope gets.
	deny string
	// empty lists head branches with nothing to merge: creating a pull
	// request from one is rejected.
	empty map[string]bool

	mu    sync.Mutex
	prs   []*fakePR
	calls []string
	// statuses are the commit statuses posted, by commit.
	statuses map[string][]map[string]any
}

func newFakeForge(t *testing.T) *fakeForge {
	return &fakeForge{t: t, token: testToken, pageSize: 100}
}

// add stores a pull request and returns its number.
func (f *fakeForge) add(pr fakePR) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.addLocked(pr).Num
}

// addLocked is add with f.mu held.
func (f *fakeForge) addLocked(pr fakePR) *fakePR {
	pr.Num = len(f.prs) + 1
	if pr.State == "" {
		pr.State = "open"
	}
	f.prs = append(f.prs, &pr)
	return &pr
}

// get returns a copy of the pull request numbered n.
func (f *fakeForge) get(n int) fakePR {
	f.mu.Lock()
	defer f.mu.Unlock()
	return *f.prs[n-1]
}

// count returns how many pull requests the forge holds.
func (f *fakeForge) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.prs)
}

// pr returns the pull request numbered n, or nil.
func (f *fakeForge) pr(n string) *fakePR {
	i, err := strconv.Atoi(n)
	if err != nil || i < 1 || i > len(f.prs) {
		return nil
	}
	return f.prs[i-1]
}

// open returns the open pull request from head to base, or nil.
func (f *fakeForge) open(head, base string) *fakePR {
	for _, p := range f.prs {
		if p.State == "open" && p.Head == head && p.Base == base && !p.Fork {
			return p
		}
	}
	return nil
}

// takeCalls returns the requests logged so far and clears the log.
func (f *fakeForge) takeCalls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.calls
	f.calls = nil
	return out
}

// begin (called with f.mu held) logs r as "METHOD /path?query {json}" (JSON with sorted keys),
// checks the headers common to all forges, and decodes the JSON body.
// It answers and returns false when the request must not go on.
func (f *fakeForge) begin(w http.ResponseWriter, r *http.Request, authHeader, authValue string) (map[string]any, bool) {
	f.t.Helper()
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	line := r.Method + " " + r.URL.RequestURI()
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &body); err != nil {
			f.t.Errorf("%s: body is not a JSON object: %s", line, raw)
		}
		canon, _ := json.Marshal(body)
		line += " " + string(canon)
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			f.t.Errorf("%s: Content-Type %q", line, ct)
		}
	}
	f.calls = append(f.calls, line)
	if ua := r.Header.Get("User-Agent"); ua != "rollgate" {
		f.t.Errorf("%s: User-Agent %q", line, ua)
	}
	if f.status != 0 {
		writeJSON(w, f.status, map[string]any{"message": "failing as told; you sent " +
			r.Header.Get(authHeader) + " " + url.QueryEscape(r.Header.Get(authHeader)) + strings.Repeat(" and more", 40)})
		return nil, false
	}
	if f.deny != "" && strings.Contains(r.URL.Path, f.deny) {
		writeJSON(w, http.StatusForbidden, map[string]any{"message": "token does not have at least one of required scope(s): [write:issue]"})
		return nil, false
	}
	if got := r.Header.Get(authHeader); got != authValue {
		// Real forges do not echo credentials; this one does, so the
		// test proves the client redacts them.
		writeJSON(w, http.StatusUnauthorized, map[string]any{"message": "401 Unauthorized: bad credentials " + got})
		return nil, false
	}
	return body, true
}

// page cuts items to the page asked for by the page parameter.
func page[T any](f *fakeForge, r *http.Request, items []T) (out []T, pageNo, last int) {
	pageNo, _ = strconv.Atoi(r.URL.Query().Get("page"))
	if pageNo < 1 {
		pageNo = 1
	}
	last = (len(items) + f.pageSize - 1) / f.pageSize
	lo := min((pageNo-1)*f.pageSize, len(items))
	hi := min(lo+f.pageSize, len(items))
	return items[lo:hi], pageNo, max(last, 1)
}

// listable returns the pull requests a listing of state may show.
func (f *fakeForge) listable(state string) []*fakePR {
	var out []*fakePR
	hide := state == "open" && f.hideOpen > 0
	if hide {
		f.hideOpen--
	}
	for _, p := range f.prs {
		if (p.State == state || state == "all" || state == "closed" && p.State == "merged") && !hide {
			out = append(out, p)
		}
	}
	return out
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func str(m map[string]any, k string) (string, bool) {
	s, ok := m[k].(string)
	return s, ok
}

// guarded wraps a Client and greps every error it returns for the token.
type guarded struct {
	t     *testing.T
	c     Client
	token string
}

func (g guarded) EnsurePullRequest(ctx context.Context, pr PullRequest) (string, error) {
	u, err := g.c.EnsurePullRequest(ctx, pr)
	checkErr(g.t, err, g.token)
	return u, err
}

func (g guarded) FileURL(branch, path string) string { return g.c.FileURL(branch, path) }

func (g guarded) ClosePullRequests(ctx context.Context, prefix string, keep func(string) bool) ([]string, error) {
	closed, err := g.c.ClosePullRequests(ctx, prefix, keep)
	checkErr(g.t, err, g.token)
	return closed, err
}

func (g guarded) PullRequestReviews(ctx context.Context, head string) (PullRequestRecord, error) {
	rec, err := g.c.PullRequestReviews(ctx, head)
	checkErr(g.t, err, g.token)
	return rec, err
}

func (g guarded) ReportStatus(ctx context.Context, head string, st CommitStatus) (string, error) {
	sha, err := g.c.ReportStatus(ctx, head, st)
	checkErr(g.t, err, g.token)
	return sha, err
}

// postStatus records a commit status posted on sha.
func (f *fakeForge) postStatus(w http.ResponseWriter, sha string, body map[string]any) {
	if f.statuses == nil {
		f.statuses = map[string][]map[string]any{}
	}
	f.statuses[sha] = append(f.statuses[sha], body)
	writeJSON(w, http.StatusCreated, body)
}

func (g guarded) MergedPullRequest(ctx context.Context, head string) (bool, string, error) {
	merged, u, err := g.c.MergedPullRequest(ctx, head)
	checkErr(g.t, err, g.token)
	return merged, u, err
}

// checkErr fails when err's message holds token in any form, or quotes
// more than 200 bytes of a response body.
func checkErr(t *testing.T, err error, token string) {
	t.Helper()
	if err == nil {
		return
	}
	msg := err.Error()
	for _, s := range []string{token, url.QueryEscape(token), url.PathEscape(token)} {
		if strings.Contains(msg, s) {
			t.Errorf("error holds the token: %s", msg)
		}
	}
	var fe *Error
	if errors.As(err, &fe) && len(fe.Body) > maxBodyExcerpt {
		t.Errorf("error quotes %d bytes of the body: %s", len(fe.Body), msg)
	}
}

// newClient returns a guarded client of provider for srv.
func newClient(t *testing.T, provider, apiURL, project, token string) Client {
	t.Helper()
	c, err := New(provider, apiURL, project, token, nil, AllowHTTP())
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return guarded{t: t, c: c, token: token}
}

// serveAPI starts the server of a forge's fake: each request, under f's
// lock, goes through begin (credentials in header authHeader, as
// authPrefix and f.token) and then to api with its JSON body.
func (f *fakeForge) serveAPI(t *testing.T, authHeader, authPrefix string, api func(w http.ResponseWriter, r *http.Request, body map[string]any)) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		body, ok := f.begin(w, r, authHeader, authPrefix+f.token)
		if !ok {
			return
		}
		api(w, r, body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// answeredBy is a guarded client of provider for project on a server that
// answers every request with h.
func answeredBy(t *testing.T, provider, project string, h http.HandlerFunc) Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return newClient(t, provider, srv.URL, project, testToken)
}

// sameCalls fails unless got lists exactly want, in order.
func sameCalls(t *testing.T, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests differ\n--- got ---\n%s\n--- want ---\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
