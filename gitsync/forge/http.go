package forge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

const (
	// maxPages bounds every listing, so a misbehaving server cannot keep
	// a reconcile busy forever.
	maxPages = 20
	// maxBodyExcerpt is the most of a response body an error quotes.
	maxBodyExcerpt = 200
	// maxErrorRead is how much of an error response is read.
	maxErrorRead = 4 << 10
	// maxResponse bounds a successful response.
	maxResponse = 8 << 20
	// maxRedirects bounds redirects within the API host.
	maxRedirects = 5
	// redacted replaces the token in error messages.
	redacted = "[redacted]"
	// userAgent identifies rollgate to the forge.
	userAgent = "rollgate"
)

// Error is a failed forge API call. Its message names the provider, the
// method, the URL path and the HTTP status, and quotes at most 200 bytes of
// the response body; the token is never part of it. It unwraps to ErrAuth,
// ErrNotFound, ErrRejected or ErrRateLimited according to the status, or
// to context.Canceled or context.DeadlineExceeded.
type Error struct {
	// Provider is github, gitlab or gitea.
	Provider string
	// Method is the HTTP method.
	Method string
	// Path is the escaped URL path, without query.
	Path string
	// StatusCode is the HTTP status; 0 when no response arrived.
	StatusCode int
	// Body is the start of the response body (at most 200 bytes, white
	// space collapsed, token redacted), or what went wrong without a
	// response.
	Body string
	// RetryAfter is how long the forge asked to wait (its Retry-After
	// header, in seconds or as a date), when it answered 429 or 403 with
	// one; 0 otherwise.
	RetryAfter time.Duration

	kind error
}

// Error returns "forge <provider>: <method> <path>: <status>: <body>".
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "forge %s: %s %s", e.Provider, e.Method, e.Path)
	if e.StatusCode != 0 {
		fmt.Fprintf(&b, ": %d %s", e.StatusCode, http.StatusText(e.StatusCode))
	}
	if e.Body != "" {
		b.WriteString(": " + e.Body)
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %s)", e.RetryAfter)
	}
	return b.String()
}

// Unwrap returns the sentinel matching the failure, or nil.
func (e *Error) Unwrap() error { return e.kind }

// api is the HTTP side shared by the providers: one API root, one token.
type api struct {
	provider string
	base     *url.URL
	client   http.Client
	token    string
	secrets  []string
}

// newAPI returns the api for base. The HTTP client is a copy of hc (or a
// new one) that follows redirects only within base's scheme and host.
func newAPI(provider string, base *url.URL, token string, hc *http.Client) *api {
	a := &api{provider: provider, base: base, token: token}
	if hc != nil {
		a.client = *hc
	} else {
		a.client.Timeout = defaultTimeout
	}
	next := a.client.CheckRedirect
	a.client.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if !a.under(req.URL) {
			return errors.New("refusing a redirect away from the API host")
		}
		if len(via) >= maxRedirects {
			return fmt.Errorf("stopped after %d redirects", maxRedirects)
		}
		if next != nil {
			return next(req, via)
		}
		return nil
	}
	for _, s := range []string{token, url.QueryEscape(token), url.PathEscape(token)} {
		if !containsString(a.secrets, s) {
			a.secrets = append(a.secrets, s)
		}
	}
	return a
}

func containsString(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

// String describes the api without its token.
func (a *api) String() string {
	return a.provider + " API at " + a.base.String()
}

// under reports whether u lies within the API root, so the token is only
// ever sent there.
func (a *api) under(u *url.URL) bool {
	return u.Scheme == a.base.Scheme && u.Host == a.base.Host &&
		(u.Path == a.base.Path || strings.HasPrefix(u.Path, a.base.Path+"/"))
}

// url returns the absolute URL of an escaped API path and query.
func (a *api) url(escapedPath string, q url.Values) string {
	u := a.base.String() + escapedPath
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// setHeaders adds authentication and content negotiation for the
// provider.
func (a *api) setHeaders(h http.Header) {
	h.Set("User-Agent", userAgent)
	switch a.provider {
	case GitHub:
		h.Set("Authorization", "Bearer "+a.token)
		h.Set("Accept", "application/vnd.github+json")
		h.Set("X-GitHub-Api-Version", "2022-11-28")
	case GitLab:
		h.Set("PRIVATE-TOKEN", a.token)
		h.Set("Accept", "application/json")
	default:
		h.Set("Authorization", "token "+a.token)
		h.Set("Accept", "application/json")
	}
}

// redact removes the token from s.
func (a *api) redact(s string) string {
	for _, secret := range a.secrets {
		s = strings.ReplaceAll(s, secret, redacted)
	}
	return s
}

// call sends method to rawURL (which must lie within the API root) with in
// as its JSON body (nil for none), decodes a successful JSON response into
// out (nil to discard it) and returns the response header.
func (a *api) call(ctx context.Context, method, rawURL string, in, out any) (http.Header, error) {
	u, err := url.Parse(rawURL)
	if err != nil || !a.under(u) {
		return nil, &Error{Provider: a.provider, Method: method, Path: a.redact(pathOf(rawURL)),
			Body: "refusing a URL outside the API root " + a.base.String()}
	}
	fail := func(status int, body string, kind error) error {
		return &Error{Provider: a.provider, Method: method, Path: a.redact(u.EscapedPath()),
			StatusCode: status, Body: a.excerpt(body), kind: kind}
	}
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return nil, fail(0, "encoding the request: "+err.Error(), nil)
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, fail(0, err.Error(), nil)
	}
	a.setHeaders(req.Header)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.client.Do(req)
	if err != nil {
		kind := contextError(ctx, err)
		if kind == nil {
			kind = ErrUnavailable
		}
		return nil, fail(0, err.Error(), kind)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorRead))
		e := fail(resp.StatusCode, string(data), statusKind(resp))
		if errors.Is(e, ErrRateLimited) {
			e.(*Error).RetryAfter = retryAfter(resp.Header.Get("Retry-After"), time.Now())
		}
		return nil, e
	}
	if out != nil {
		if err := json.NewDecoder(io.LimitReader(resp.Body, maxResponse)).Decode(out); err != nil {
			return nil, fail(resp.StatusCode, "decoding the response: "+err.Error(), nil)
		}
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorRead))
	return resp.Header, nil
}

// pathOf returns the path of a URL that may not parse, without query.
func pathOf(rawURL string) string {
	if u, err := url.Parse(rawURL); err == nil {
		return u.EscapedPath()
	}
	p, _, _ := strings.Cut(rawURL, "?")
	return p
}

// excerpt redacts s, collapses its white space and cuts it to at most
// maxBodyExcerpt bytes on a rune boundary. Redaction comes first, so a
// cut never leaves part of the token behind.
func (a *api) excerpt(s string) string {
	s = strings.Join(strings.Fields(a.redact(s)), " ")
	if len(s) <= maxBodyExcerpt {
		return s
	}
	cut := maxBodyExcerpt
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// contextError returns the context error behind a failed request, if any.
func contextError(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, context.Canceled):
		return context.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return context.DeadlineExceeded
	}
	return ctx.Err()
}

// statusKind maps an error response to a sentinel.
func statusKind(resp *http.Response) error {
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		return ErrAuth
	case http.StatusForbidden:
		if resp.Header.Get("Retry-After") != "" || resp.Header.Get("X-RateLimit-Remaining") == "0" {
			return ErrRateLimited
		}
		return ErrAuth
	case http.StatusNotFound:
		return ErrNotFound
	case http.StatusConflict, http.StatusUnprocessableEntity:
		return ErrRejected
	case http.StatusTooManyRequests:
		return ErrRateLimited
	}
	if resp.StatusCode >= 500 {
		return ErrUnavailable
	}
	return nil
}

// maxRetryAfter caps the wait a forge may ask for.
const maxRetryAfter = time.Hour

// retryAfter parses a Retry-After header (delay-seconds or an HTTP date);
// 0 when it is missing or unreadable.
func retryAfter(h string, now time.Time) time.Duration {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0
	}
	var d time.Duration
	if n, err := strconv.Atoi(h); err == nil {
		d = time.Duration(n) * time.Second
	} else if t, err := http.ParseTime(h); err == nil {
		d = t.Sub(now).Round(time.Second)
	}
	return max(0, min(d, maxRetryAfter))
}

// nextPage returns the URL of the page after cur, given the response
// header and the number of items seen so far; "" at the end.
type nextPage func(cur *url.URL, h http.Header, seen int) string

// each calls visit on every item of the listing starting at first,
// following next for at most maxPages pages; visit returns false to stop.
func each[T any](ctx context.Context, a *api, first string, next nextPage, visit func(T) bool) error {
	seen := 0
	for n, u := 0, first; u != ""; n++ {
		if n == maxPages {
			return &Error{Provider: a.provider, Method: http.MethodGet, Path: pathOf(first),
				Body: fmt.Sprintf("more than %d pages of results", maxPages)}
		}
		var items []T
		h, err := a.call(ctx, http.MethodGet, u, nil, &items)
		if err != nil {
			return err
		}
		for _, it := range items {
			if !visit(it) {
				return nil
			}
		}
		if len(items) == 0 {
			return nil
		}
		seen += len(items)
		cur, _ := url.Parse(u)
		u = next(cur, h, seen)
	}
	return nil
}

// withPage returns cur with its page query parameter set to page.
func withPage(cur *url.URL, page int) string {
	u := *cur
	q := u.Query()
	q.Set("page", strconv.Itoa(page))
	u.RawQuery = q.Encode()
	return u.String()
}

// linkNext returns the rel="next" target of an RFC 8288 Link header.
func linkNext(h http.Header) string {
	for _, line := range h.Values("Link") {
		for _, link := range strings.Split(line, ",") {
			target, params, ok := strings.Cut(link, ";")
			target = strings.TrimSpace(target)
			if !ok || !strings.HasPrefix(target, "<") || !strings.HasSuffix(target, ">") {
				continue
			}
			for _, p := range strings.Split(params, ";") {
				k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
				if strings.EqualFold(k, "rel") && containsString(strings.Fields(strings.Trim(v, `"`)), "next") {
					return target[1 : len(target)-1]
				}
			}
		}
	}
	return ""
}

// pageNumber returns the page query parameter of cur (1 when absent).
func pageNumber(cur *url.URL) int {
	if n, err := strconv.Atoi(cur.Query().Get("page")); err == nil && n > 0 {
		return n
	}
	return 1
}
