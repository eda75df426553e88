package forge

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"unicode/utf8"
)

func TestNewValidation(t *testing.T) {
	for _, tc := range []struct {
		name, provider, url, project, token string
		field                               string // named in the error; "" = valid
	}{
		{"github", "github", "https://api.github.com", "acme/app", testToken, ""},
		{"github default URL", "GitHub", "", "acme/app", testToken, ""},
		{"gitlab subgroup", "gitlab", "https://gitlab.example", "group/sub/app", testToken, ""},
		{"gitlab numeric ID", "gitlab", "https://gitlab.example", "42", testToken, ""},
		{"gitea", "gitea", "https://gitea.example:3000/", "acme/app", " " + testToken + "\n", ""},
		{"token over plain http", "gitea", "http://gitea.example:3000/", "acme/app", testToken, "url"},
		{"no provider", "", "https://x.example", "acme/app", testToken, "provider"},
		{"unknown provider", "bitbucket", "https://x.example", "acme/app", testToken, "provider"},
		{"gitea needs a URL", "gitea", "", "acme/app", testToken, "url"},
		{"bad scheme", "gitea", "ftp://gitea.example", "acme/app", testToken, "url"},
		{"no host", "gitlab", "https://", "acme/app", testToken, "url"},
		{"userinfo", "gitea", "https://user:" + testToken + "@gitea.example", "acme/app", testToken, "url"},
		{"query", "github", "https://api.github.com?x=1", "acme/app", testToken, "url"},
		{"no project", "github", "", "", testToken, "project"},
		{"github project needs owner", "github", "", "app", testToken, "project"},
		{"gitea project too deep", "gitea", "https://gitea.example", "a/b/c", testToken, "project"},
		{"relative segment", "gitlab", "", "group/../app", testToken, "project"},
		{"space in project", "gitlab", "", "group/my app", testToken, "project"},
		{"no token", "github", "", "acme/app", "  ", "token"},
		{"token with a line break", "gitea", "https://gitea.example", "acme/app", "abc\ndef", "token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(tc.provider, tc.url, tc.project, tc.token, nil)
			if tc.field == "" {
				if err != nil || c == nil {
					t.Fatalf("New = %v, %v", c, err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), ": "+tc.field+": ") {
				t.Fatalf("New error = %v, want ErrInvalidConfig naming %q", err, tc.field)
			}
			checkErr(t, err, testToken)
		})
	}
}

// TestAllowHTTP: with AllowHTTP (the controller's
// --git-allow-insecure-http), an http:// API URL is accepted.
func TestAllowHTTP(t *testing.T) {
	c, err := New(Gitea, "http://gitea.example:3000/", "acme/app", testToken, nil, AllowHTTP())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(c), "forge gitea client for acme/app at http://gitea.example:3000/api/v1"; got != want {
		t.Errorf("client = %q, want %q", got, want)
	}
}

func TestNewAPIRoot(t *testing.T) {
	for _, tc := range []struct{ provider, url, project, want string }{
		{"github", "", "acme/app", "forge github client for acme/app at https://api.github.com"},
		{"github", "https://github.com/", "acme/app", "forge github client for acme/app at https://api.github.com"},
		{"github", "https://ghe.example/api/v3/", "acme/app", "forge github client for acme/app at https://ghe.example/api/v3"},
		{"gitlab", "", "/group/app/", "forge gitlab client for group/app at https://gitlab.com/api/v4"},
		{"gitlab", "https://git.example/gitlab/api/v4", "group/app", "forge gitlab client for group/app at https://git.example/gitlab/api/v4"},
		{"gitea", "https://gitea.example/", "acme/app", "forge gitea client for acme/app at https://gitea.example/api/v1"},
	} {
		c, err := New(tc.provider, tc.url, tc.project, testToken, nil)
		if err != nil {
			t.Fatalf("New(%s, %q): %v", tc.provider, tc.url, err)
		}
		if got := fmt.Sprint(c); got != tc.want {
			t.Errorf("New(%s, %q) = %q, want %q", tc.provider, tc.url, got, tc.want)
		}
	}
}

func TestClientNeverPrintsToken(t *testing.T) {
	for _, p := range []string{GitHub, GitLab, Gitea} {
		c, err := New(p, "https://forge.example", "acme/app", testToken, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q"} {
			if s := fmt.Sprintf(verb, c); strings.Contains(s, testToken) || strings.Contains(s, url.QueryEscape(testToken)) {
				t.Errorf("%s: %s prints the token: %s", p, verb, s)
			}
		}
	}
}

func TestRequestValidation(t *testing.T) {
	c := newClient(t, GitHub, "", "acme/app", testToken) // never reached
	ctx := context.Background()
	for _, pr := range []PullRequest{
		{Base: "main", Title: "t"},
		{Head: "h", Title: "t"},
		{Head: "main", Base: "main", Title: "t"},
		{Head: "h", Base: "main", Title: " "},
	} {
		if _, err := c.EnsurePullRequest(ctx, pr); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("EnsurePullRequest(%+v) error = %v, want ErrInvalidRequest", pr, err)
		}
	}
	if _, err := c.ClosePullRequests(ctx, "", nil); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("ClosePullRequests with no prefix: %v, want ErrInvalidRequest", err)
	}
	if _, _, err := c.MergedPullRequest(ctx, ""); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("MergedPullRequest with no head: %v, want ErrInvalidRequest", err)
	}
}

// TestErrorsNeverHoldToken fails every call of every provider with each
// status, the body echoing the token raw and URL-escaped, and greps the
// errors (newClient's guard greps every error of every test too).
func TestErrorsNeverHoldToken(t *testing.T) {
	servers := map[string]func(*testing.T) (*fakeForge, *httptest.Server){
		GitHub: newFakeGitHub, GitLab: newFakeGitLab,
		Gitea: func(t *testing.T) (*fakeForge, *httptest.Server) { return newFakeGitea(t, false) },
	}
	statuses := map[int]error{401: ErrAuth, 403: ErrAuth, 404: ErrNotFound, 409: ErrRejected, 422: ErrRejected, 429: ErrRateLimited, 500: nil, 502: nil}
	for provider, newServer := range servers {
		for status, kind := range statuses {
			f, srv := newServer(t)
			f.status = status
			project := "acme/app"
			if provider == GitLab {
				project = "group/sub/app"
			}
			c := newClient(t, provider, srv.URL, project, testToken)
			_, err := c.EnsurePullRequest(context.Background(), approvePR("t", "b"))
			var fe *Error
			if !errors.As(err, &fe) || fe.StatusCode != status || fe.Method != http.MethodGet || fe.Provider != provider {
				t.Fatalf("%s %d: error = %#v", provider, status, err)
			}
			if kind != nil && !errors.Is(err, kind) {
				t.Errorf("%s %d: error %v does not wrap %v", provider, status, err, kind)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf(" GET %s: %d ", fe.Path, status)) || !strings.Contains(fe.Body, redacted) {
				t.Errorf("%s %d: error %q lacks the path, status or redaction", provider, status, err)
			}
			if len(fe.Body) != maxBodyExcerpt {
				t.Errorf("%s %d: body excerpt is %d bytes, want %d", provider, status, len(fe.Body), maxBodyExcerpt)
			}
		}
	}
}

func TestRateLimitedForbidden(t *testing.T) {
	c := answeredBy(t, GitHub, "acme/app", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-RateLimit-Remaining", "0")
		http.Error(w, `{"message":"API rate limit exceeded"}`, http.StatusForbidden)
	})
	_, err := c.EnsurePullRequest(context.Background(), approvePR("t", "b"))
	if !errors.Is(err, ErrRateLimited) || errors.Is(err, ErrAuth) {
		t.Errorf("error = %v, want ErrRateLimited and not ErrAuth", err)
	}
}

func TestTransportErrors(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close() // nothing listens any more
	c := newClient(t, Gitea, srv.URL, "acme/app", testToken)
	_, err := c.EnsurePullRequest(context.Background(), approvePR("t", "b"))
	var fe *Error
	if !errors.As(err, &fe) || fe.StatusCode != 0 || !strings.HasPrefix(err.Error(), "forge gitea: GET /api/v1/repos/acme/app/pulls: ") {
		t.Errorf("error = %v, want a gitea GET error without status", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.EnsurePullRequest(ctx, approvePR("t", "b")); !errors.Is(err, context.Canceled) {
		t.Errorf("error with a cancelled context = %v, want context.Canceled", err)
	}
}

// TestTokenStaysOnAPIHost checks that neither a redirect nor a Link header
// sends the token to another host.
func TestTokenStaysOnAPIHost(t *testing.T) {
	var leaked atomic.Bool
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("PRIVATE-TOKEN") != "" || r.Header.Get("Authorization") != "" {
			leaked.Store(true)
		}
		writeJSON(w, http.StatusOK, []any{})
	}))
	t.Cleanup(other.Close)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/api/v4/") {
			http.Redirect(w, r, other.URL+r.URL.RequestURI(), http.StatusFound)
			return
		}
		w.Header().Set("Link", `<`+other.URL+`/repos/acme/app/pulls?page=2>; rel="next"`)
		writeJSON(w, http.StatusOK, []map[string]any{{"number": 1, "head": map[string]any{"ref": "x"}}})
	}))
	t.Cleanup(api.Close)

	gl := newClient(t, GitLab, api.URL, "group/app", testToken)
	if _, err := gl.ClosePullRequests(context.Background(), "rollgate/", nil); err == nil || !strings.Contains(err.Error(), "redirect away from the API host") {
		t.Errorf("GitLab redirect to another host: error = %v", err)
	}
	gh := newClient(t, GitHub, api.URL, "acme/app", testToken)
	if _, err := gh.ClosePullRequests(context.Background(), "rollgate/", nil); err == nil || !strings.Contains(err.Error(), "outside the API root") {
		t.Errorf("GitHub Link to another host: error = %v", err)
	}
	if leaked.Load() {
		t.Error("the other host received a token")
	}
}

func TestPagingIsBounded(t *testing.T) {
	var requests atomic.Int32
	c := answeredBy(t, GitLab, "group/app", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Next-Page", strconv.Itoa(int(requests.Add(1))+1))
		writeJSON(w, http.StatusOK, []map[string]any{{"iid": 1, "source_branch": "feature"}})
	})
	_, err := c.ClosePullRequests(context.Background(), "rollgate/", nil)
	if err == nil || !strings.Contains(err.Error(), "more than 20 pages") || requests.Load() != maxPages {
		t.Errorf("endless listing: error = %v after %d requests, want a bound of %d", err, requests.Load(), maxPages)
	}
}

func TestExcerpt(t *testing.T) {
	a := newAPI(GitHub, &url.URL{Scheme: "https", Host: "x"}, testToken, nil)
	long := strings.Repeat("é", 150) + testToken
	got := a.excerpt("prefix " + testToken + "\n\t" + long)
	if len(got) > maxBodyExcerpt || !utf8.ValidString(got) || !strings.HasPrefix(got, "prefix [redacted] éé") {
		t.Errorf("excerpt = %q (%d bytes)", got, len(got))
	}
	if got := a.excerpt(strings.Repeat("a", maxBodyExcerpt-3) + testToken); strings.Contains(got, "s3c") {
		t.Errorf("a cut left part of the token: %q", got)
	}
}

func TestLinkNext(t *testing.T) {
	h := http.Header{}
	h.Add("Link", `<https://api.github.com/repositories/1/pulls?page=1>; rel="prev", <https://api.github.com/repositories/1/pulls?page=3>; rel="next"`)
	if got := linkNext(h); got != "https://api.github.com/repositories/1/pulls?page=3" {
		t.Errorf("linkNext = %q", got)
	}
	if got := linkNext(http.Header{"Link": {`<https://x/last>; rel="last"`}}); got != "" {
		t.Errorf("linkNext without next = %q", got)
	}
}

// TestFileURL: the web link of a file on a branch, per forge, from the API
// URL a Repository gives.
func TestFileURL(t *testing.T) {
	for _, tc := range []struct{ provider, api, project, want string }{
		{GitHub, "", "acme/shop", "https://github.com/acme/shop/blob/rollgate/status/prod/demo/web.yaml"},
		{GitHub, "https://ghe.example.com/api/v3", "acme/shop", "https://ghe.example.com/acme/shop/blob/rollgate/status/prod/demo/web.yaml"},
		{GitLab, "https://gitlab.example.com", "acme/apps/shop", "https://gitlab.example.com/acme/apps/shop/-/blob/rollgate/status/prod/demo/web.yaml"},
		{Gitea, "https://git.example.com:3000/api/v1", "acme/shop", "https://git.example.com:3000/acme/shop/src/branch/rollgate/status/prod/demo/web.yaml"},
	} {
		c, err := New(tc.provider, tc.api, tc.project, "token-0123456789", nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.FileURL("rollgate/status", "prod/demo/web.yaml"); got != tc.want {
			t.Errorf("%s %s: FileURL = %s, want %s", tc.provider, tc.api, got, tc.want)
		}
	}
}
