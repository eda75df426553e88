package forge

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"
)

// Providers accepted by New; they match ForgeSpec.Provider.
const (
	// GitHub is github.com or GitHub Enterprise Server (REST API v3).
	GitHub = "github"
	// GitLab is gitlab.com or a self-managed GitLab (REST API v4).
	GitLab = "gitlab"
	// Gitea is Gitea or Forgejo (REST API v1).
	Gitea = "gitea"
)

// Sentinel errors. Test with errors.Is.
var (
	// ErrInvalidConfig means New was given an unusable provider, URL,
	// project or token: a configuration error, not worth retrying.
	ErrInvalidConfig = errors.New("invalid forge configuration")
	// ErrInvalidRequest means a method was called with missing or
	// contradictory arguments (a bug in the caller).
	ErrInvalidRequest = errors.New("invalid forge request")
	// ErrAuth means the forge rejected the token (HTTP 401) or denied the
	// operation to it (HTTP 403 other than a rate limit).
	ErrAuth = errors.New("forge authentication failed")
	// ErrNotFound means the project or pull request does not exist, or is
	// hidden from the token (HTTP 404).
	ErrNotFound = errors.New("forge resource not found")
	// ErrRejected means the forge refused the request as invalid or
	// conflicting (HTTP 409 or 422), for example because the head branch
	// is not pushed yet or has no commit that the base lacks.
	ErrRejected = errors.New("forge rejected the request")
	// ErrRateLimited means the forge asked to slow down (HTTP 429, or 403
	// with an exhausted rate limit). Retry later.
	ErrRateLimited = errors.New("forge rate limit exceeded")
	// ErrUnavailable means the forge could not be reached or failed
	// (no response, or HTTP 5xx). Retry later.
	ErrUnavailable = errors.New("forge unavailable")
)

// PullRequest is the pull request EnsurePullRequest wants open.
type PullRequest struct {
	// Head is the branch with the changes, in the project itself (not a
	// fork), such as rollgate/approve/demo/echo/abc123-step-2.
	Head string
	// Base is the branch to merge into: the tracked branch.
	Base string
	// Title of the pull request. Required.
	Title string
	// Body is its Markdown description (see ApprovalBody and RevertBody).
	Body string
	// Labels are added when missing; labels someone else added are kept.
	// On Gitea, labels that do not exist in the repository are skipped.
	Labels []string
}

// Client manages the pull requests of one repository on one forge. Its
// methods are idempotent and safe for concurrent use.
type Client interface {
	// EnsurePullRequest makes sure one open pull request goes from pr.Head
	// to pr.Base and returns its web URL. An open one is reused, with its
	// title and body updated when they differ and missing labels added;
	// otherwise one is created. When the pull request exists but updating
	// it or adding labels fails, the URL comes back with the error.
	// ErrRejected usually means pr.Head is not pushed yet or has nothing
	// to merge. A pull request someone closed unmerged is not reopened: a
	// new one is opened, so call this only while approval is wanted.
	EnsurePullRequest(ctx context.Context, pr PullRequest) (url string, err error)
	// ClosePullRequests closes the open pull requests whose head branch (in
	// the project itself) starts with headPrefix and that keep rejects
	// (nil keep rejects all), leaving a comment that says why. It returns
	// the head branches of the pull requests it closed, sorted, also when
	// err reports that closing or commenting on others failed. headPrefix
	// must not be empty.
	ClosePullRequests(ctx context.Context, headPrefix string, keep func(head string) bool) (closed []string, err error)
	// MergedPullRequest reports whether a pull request from head (in the
	// project itself) has been merged, and its URL (the first one the forge
	// lists, normally the newest). Approvals are detected from Git; this
	// serves messages and events.
	MergedPullRequest(ctx context.Context, head string) (merged bool, url string, err error)
	// FileURL is the web page of a file on a branch of the project, for
	// links in pull request bodies.
	FileURL(branch, path string) string
	// PullRequestReviews returns the pull request from head (in the project
	// itself) and its reviews: the merged one (the first the forge lists,
	// normally the newest), or else the newest one in any state. An error
	// wrapping ErrNotFound means no pull request comes from head; a *Error
	// wrapping ErrRateLimited (with RetryAfter) or ErrUnavailable means the
	// forge could not answer now.
	PullRequestReviews(ctx context.Context, head string) (PullRequestRecord, error)
	// ReportStatus sets a commit status on the head commit of the pull
	// request from head (the merged one, or else the newest in any state)
	// and returns that commit. A status of the same context replaces the
	// earlier one. An error wrapping ErrNotFound means no pull request
	// comes from head.
	ReportStatus(ctx context.Context, head string, st CommitStatus) (sha string, err error)
}

// defaultTimeout bounds each API call when New builds the HTTP client.
const defaultTimeout = 30 * time.Second

// New returns the Client for provider (GitHub, GitLab or Gitea) serving
// project at apiURL, authenticated with token.
//
// apiURL is the API root, such as https://api.github.com (the default for
// GitHub; https://github.com is accepted too), https://ghe.example.com/api/v3,
// https://gitlab.com (the default for GitLab) or https://gitea.example.com;
// "/api/v4" (GitLab) and "/api/v1" (Gitea) are appended when missing.
// project is owner/name on GitHub and Gitea, and the project path
// (group/subgroup/name) or numeric ID on GitLab. Surrounding white space
// in token (a Secret written with echo) is ignored. A nil httpClient means
// a client with a 30s timeout. The client follows redirects only within
// the API's host, so the token never leaves it.
//
// The token is sent over https only, as Git credentials are: an http://
// apiURL is refused unless AllowHTTP is given (the controller's
// --git-allow-insecure-http, for in-cluster forges and tests).
//
// Errors wrap ErrInvalidConfig and name the offending field.
func New(provider, apiURL, project, token string, httpClient *http.Client, opts ...Option) (Client, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	provider = strings.ToLower(strings.TrimSpace(provider))
	base, err := apiBase(provider, strings.TrimSpace(apiURL))
	if err != nil {
		return nil, err
	}
	if base.Scheme == "http" && !o.allowHTTP {
		return nil, invalid("url", "refusing to send the forge token over plain http: use https, or allow it with --git-allow-insecure-http (controller)")
	}
	project = strings.Trim(strings.TrimSpace(project), "/")
	if err := checkProject(provider, project); err != nil {
		return nil, err
	}
	token = strings.TrimSpace(token)
	if err := checkToken(token); err != nil {
		return nil, err
	}
	a := newAPI(provider, base, token, httpClient)
	c := &client{desc: "forge " + provider + " client for " + project + " at " + base.String(), provider: provider,
		web: webBase(provider, base) + "/" + project}
	switch provider {
	case GitHub:
		c.b = newGitHub(a, project)
	case GitLab:
		c.b = newGitLab(a, project)
	default:
		c.b = newGitea(a, project)
	}
	return c, nil
}

// Option changes how New builds a Client.
type Option func(*options)

type options struct {
	allowHTTP bool
}

// AllowHTTP lets the token go to an http:// API URL.
func AllowHTTP() Option {
	return func(o *options) { o.allowHTTP = true }
}

// invalid returns an ErrInvalidConfig error about field.
func invalid(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...))
}

// apiBase validates apiURL and returns the API root of provider.
func apiBase(provider, apiURL string) (*url.URL, error) {
	switch provider {
	case GitHub, GitLab, Gitea:
	case "":
		return nil, invalid("provider", "required (github, gitlab or gitea)")
	default:
		return nil, invalid("provider", "%q is not github, gitlab or gitea", provider)
	}
	if apiURL == "" {
		switch provider {
		case GitHub:
			apiURL = "https://api.github.com"
		case GitLab:
			apiURL = "https://gitlab.com"
		default:
			return nil, invalid("url", "required for gitea")
		}
	}
	u, err := url.Parse(apiURL)
	if err != nil {
		return nil, invalid("url", "not a URL")
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, invalid("url", "scheme must be http or https")
	case u.Host == "":
		return nil, invalid("url", "no host")
	case u.User != nil:
		return nil, invalid("url", "must not hold credentials; put the token in the Secret")
	case u.RawQuery != "" || u.Fragment != "":
		return nil, invalid("url", "must not have a query or fragment")
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	switch {
	case provider == GitHub && (u.Host == "github.com" || u.Host == "www.github.com") && u.Path == "":
		u.Host = "api.github.com"
	case provider == GitLab && !strings.HasSuffix(u.Path, "/api/v4"):
		u.Path += "/api/v4"
	case provider == Gitea && !strings.HasSuffix(u.Path, "/api/v1"):
		u.Path += "/api/v1"
	}
	return u, nil
}

// webBase is the forge's web address, from its API base: github.com for
// api.github.com, the API path cut off otherwise (GitHub Enterprise's
// /api/v3, GitLab's /api/v4, Gitea's /api/v1).
func webBase(provider string, api *url.URL) string {
	u := *api
	if provider == GitHub && u.Host == "api.github.com" {
		u.Host = "github.com"
	}
	for _, p := range []string{"/api/v3", "/api/v4", "/api/v1"} {
		u.Path = strings.TrimSuffix(u.Path, p)
	}
	return strings.TrimRight(u.String(), "/")
}

// checkProject validates the project for provider.
func checkProject(provider, project string) error {
	if project == "" {
		return invalid("project", "required")
	}
	if strings.IndexFunc(project, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return invalid("project", "%q holds white space", project)
	}
	parts := strings.Split(project, "/")
	for _, p := range parts {
		if p == "" || p == "." || p == ".." {
			return invalid("project", "%q has an empty or relative segment", project)
		}
	}
	if provider != GitLab && len(parts) != 2 {
		return invalid("project", "%q is not owner/name", project)
	}
	return nil
}

// checkToken validates the token without ever quoting it.
func checkToken(token string) error {
	if token == "" {
		return invalid("token", "required (the Secret's %q key is empty or missing)", "token")
	}
	if strings.IndexFunc(token, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return invalid("token", "holds white space or control characters")
	}
	return nil
}

// checkPullRequest validates the arguments of EnsurePullRequest.
func checkPullRequest(pr PullRequest) error {
	switch {
	case strings.TrimSpace(pr.Head) == "":
		return fmt.Errorf("%w: Head is required", ErrInvalidRequest)
	case strings.TrimSpace(pr.Base) == "":
		return fmt.Errorf("%w: Base is required", ErrInvalidRequest)
	case pr.Head == pr.Base:
		return fmt.Errorf("%w: Head and Base are both %q", ErrInvalidRequest, pr.Head)
	case strings.TrimSpace(pr.Title) == "":
		return fmt.Errorf("%w: Title is required", ErrInvalidRequest)
	}
	return nil
}

// checkPrefix refuses an empty head prefix, which would select every
// branch of the project.
func checkPrefix(headPrefix string) error {
	if headPrefix == "" {
		return fmt.Errorf("%w: headPrefix is required", ErrInvalidRequest)
	}
	return nil
}

// sameText reports whether two titles or bodies read the same once line
// endings and surrounding white space (which forges may normalize) are
// set aside, so an unchanged body is never rewritten.
func sameText(a, b string) bool {
	norm := func(s string) string { return strings.TrimSpace(strings.ReplaceAll(s, "\r\n", "\n")) }
	return norm(a) == norm(b)
}

// missingLabels returns the labels of want not in have (case-insensitive).
func missingLabels(want, have []string) []string {
	var out []string
	for _, w := range want {
		w = strings.TrimSpace(w)
		found := w == ""
		for _, h := range have {
			found = found || strings.EqualFold(w, h)
		}
		for _, o := range out {
			found = found || strings.EqualFold(w, o)
		}
		if !found {
			out = append(out, w)
		}
	}
	return out
}

// staleComment is the comment left on a pull request ClosePullRequests
// closes.
func staleComment(head string) string {
	return "rollgate closed this pull request: branch `" + head + "` is stale, " +
		"superseded by a newer revision or step of the rollout."
}
