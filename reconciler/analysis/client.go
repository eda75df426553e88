package analysis

import (
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// clientName is the User-Agent of metric queries.
const clientName = "rollgate-analysis"

// maxRedirects bounds the same-origin redirects one query follows.
const maxRedirects = 10

// clientOptions say how to build the HTTP client of one query.
type clientOptions struct {
	target   string // URL of the server; requests go only to its origin
	secret   SecretData
	headers  map[string]string // canonical names, see headerMap
	insecure bool
	timeout  time.Duration
	maxBody  int64
}

// newClient builds the HTTP client of one query: bearer or basic auth, CA
// and client certificate from the secret, the metric's headers, a timeout,
// and a cap on the response size. It follows redirects only within the
// target's origin, so credentials and headers never reach another host.
// The caller closes idle connections when done.
//
// It is built on net/http alone: prometheus/common's config package, which
// did this before, links golang.org/x/net/trace, whose init makes the
// linker keep every exported method of the controller binary (13 MB;
// docs/benchmarks-history.md, P5, runs A to J).
func newClient(o clientOptions) (*http.Client, error) {
	target, err := url.Parse(o.target)
	if err != nil {
		return nil, fmt.Errorf("parsing URL: %w", err)
	}
	hdr, err := requestHeaders(o)
	if err != nil {
		return nil, err
	}
	tc := &tls.Config{InsecureSkipVerify: o.insecure, MinVersion: tls.VersionTLS12} //nolint:gosec // the metric's insecureSkipVerify asks for it
	if err := applyTLS(tc, o.secret); err != nil {
		return nil, err
	}
	hdr.next = &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       tc,
		ForceAttemptHTTP2:     true,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       5 * time.Minute,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: 1 * time.Second,
	}
	var rt http.RoundTripper = hdr
	if o.maxBody > 0 {
		rt = &limitTransport{next: rt, max: o.maxBody}
	}
	return &http.Client{Transport: rt, Timeout: o.timeout, CheckRedirect: sameOrigin(target)}, nil
}

// reservedHeaders cannot be set by a metric: the client or the transport
// owns them (the names admission refuses, api/v1alpha1 HTTPHeader, and the
// three that keep a meaning, see requestHeaders: Authorization, Host and
// User-Agent).
var reservedHeaders = map[string]bool{
	"Authorization":                       true,
	"Host":                                true,
	"User-Agent":                          true,
	"Content-Encoding":                    true,
	"Content-Length":                      true,
	"Content-Type":                        true,
	"Connection":                          true,
	"Keep-Alive":                          true,
	"Accept-Encoding":                     true,
	"Transfer-Encoding":                   true,
	"Proxy-Authenticate":                  true,
	"Proxy-Authorization":                 true,
	"Www-Authenticate":                    true,
	"X-Prometheus-Remote-Write-Version":   true,
	"X-Prometheus-Remote-Read-Version":    true,
	"X-Prometheus-Scrape-Timeout-Seconds": true,
	"X-Amz-Date":                          true,
	"X-Amz-Security-Token":                true,
	"X-Amz-Content-Sha256":                true,
}

// requestHeaders are the headers of every request of the client: the
// metric's headers, the User-Agent, the Host and the credentials.
//   - User-Agent replaces rollgate-analysis;
//   - Host sets the request's Host;
//   - Authorization is ignored when the Secret has credentials (they win),
//     and is otherwise sent (Basic credentials must be base64 of
//     user:password).
//
// Any other reserved name (Content-Type, Accept-Encoding, Connection, ...)
// is an error naming it.
func requestHeaders(o clientOptions) (*headerTransport, error) {
	auth, err := credentials(o.secret)
	if err != nil {
		return nil, err
	}
	t := &headerTransport{header: http.Header{}, userAgent: clientName}
	if auth != "" {
		t.auth = &auth
	}
	for _, name := range slices.Sorted(maps.Keys(o.headers)) {
		value := o.headers[name]
		if !reservedHeaders[name] {
			t.header.Add(name, value)
			continue
		}
		switch name {
		case "User-Agent":
			t.userAgent = value
		case "Host":
			t.host = value
		case "Authorization":
			if t.auth != nil {
				continue
			}
			a, err := headerAuthorization(value)
			if err != nil {
				return nil, err
			}
			t.auth = &a
		default:
			return nil, fmt.Errorf("header %q is reserved and cannot be set on a metric query", name)
		}
	}
	return t, nil
}

// headerAuthorization checks an Authorization header value: Basic
// credentials must be base64 of user:password.
func headerAuthorization(value string) (secretString, error) {
	typ, cred, _ := strings.Cut(strings.TrimSpace(value), " ")
	cred = strings.TrimSpace(cred)
	if strings.EqualFold(typ, "Basic") {
		raw, err := base64.StdEncoding.DecodeString(cred)
		if _, _, ok := strings.Cut(string(raw), ":"); err != nil || !ok {
			return "", errors.New(`header "Authorization": Basic credentials are not base64 of user:password`)
		}
		typ = "Basic"
	}
	return secretString(typ + " " + cred), nil
}

// secretString is a credential; it prints as <secret>.
type secretString string

// String hides the value.
func (secretString) String() string { return "<secret>" }

// GoString hides the value.
func (secretString) GoString() string { return "<secret>" }

// headerTransport puts the client's headers on every request.
type headerTransport struct {
	next      http.RoundTripper
	header    http.Header
	userAgent string
	host      string
	// auth is the Authorization value, nil for none; a pointer, so that
	// printing the transport shows an address, never the credentials.
	auth *secretString
}

// RoundTrip implements http.RoundTripper.
func (t *headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for name, values := range t.header {
		for _, v := range values {
			req.Header.Add(name, v)
		}
	}
	req.Header.Set("User-Agent", t.userAgent)
	if t.host != "" {
		req.Host = t.host
	}
	if t.auth != nil && req.Header.Get("Authorization") == "" {
		req.Header.Set("Authorization", string(*t.auth))
	}
	return t.next.RoundTrip(req)
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach the
// transport.
func (t *headerTransport) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// sameOrigin follows a redirect only to the scheme, host and port of
// target: requests elsewhere would carry the credentials and headers.
func sameOrigin(target *url.URL) func(*http.Request, []*http.Request) error {
	want := origin(target)
	return func(req *http.Request, via []*http.Request) error {
		if got := origin(req.URL); got != want {
			return fmt.Errorf("redirect to %s not followed: credentials and headers go only to %s", got, want)
		}
		if len(via) >= maxRedirects {
			return fmt.Errorf("stopped after %d redirects", maxRedirects)
		}
		return nil
	}
}

// origin is scheme://host:port of u, with the default port filled in.
func origin(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return u.Scheme + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// limitTransport caps response bodies.
type limitTransport struct {
	next http.RoundTripper
	max  int64
}

// RoundTrip implements http.RoundTripper.
func (t *limitTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	resp.Body = &cappedBody{rc: resp.Body, left: t.max}
	return resp, nil
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach the
// transport.
func (t *limitTransport) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// cappedBody fails a read past its limit instead of silently truncating.
type cappedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// A body of exactly the limit is fine: look for its end.
		if n, err := b.rc.Read(make([]byte, 1)); n == 0 && err != nil {
			return 0, err
		}
		return 0, errors.New("response body too large")
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *cappedBody) Close() error { return b.rc.Close() }
