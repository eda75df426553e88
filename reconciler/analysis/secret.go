package analysis

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Secret keys read from a metric's secretRef.
const (
	// SecretToken is a bearer token.
	SecretToken = "token"
	// SecretUsername and SecretPassword are basic-auth credentials.
	SecretUsername = "username"
	// SecretPassword goes with SecretUsername.
	SecretPassword = "password"
	// SecretCA is a PEM bundle of CA certificates trusted for TLS, in
	// addition to the system roots.
	SecretCA = "ca.crt"
)

// SecretData is the data of a Secret. It prints as "[redacted]" so that it
// cannot leak through a log line or %v.
type SecretData map[string][]byte

// String hides the contents.
func (SecretData) String() string { return "[redacted]" }

// GoString hides the contents.
func (SecretData) GoString() string { return "[redacted]" }

// ErrSecret marks a Secret that cannot be used as metric credentials.
var ErrSecret = errors.New("unusable metric secret")

// clientOptions say how to build the HTTP client of one query.
type clientOptions struct {
	target   string // URL of the server; credentials go only to its host
	secret   SecretData
	headers  map[string]string
	insecure bool
	timeout  time.Duration
	maxBody  int64
}

// newClient builds an HTTP client for one query: TLS roots from ca.crt,
// bearer or basic auth from the secret, extra headers, a timeout and a cap
// on the response size. The caller closes idle connections when done.
func newClient(o clientOptions) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: o.insecure} //nolint:gosec // opt-in per metric
	if ca, ok := o.secret[SecretCA]; ok {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(ca) {
			return nil, fmt.Errorf("%w: key %q holds no PEM certificate", ErrSecret, SecretCA)
		}
		tr.TLSClientConfig.RootCAs = pool
	}
	authz, err := authorization(o.secret)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(o.target)
	if err != nil {
		return nil, fmt.Errorf("parsing URL: %w", err)
	}
	rt := &headerTransport{next: tr, host: u.Host, authz: authz, headers: o.headers, maxBody: o.maxBody}
	return &http.Client{Transport: rt, Timeout: o.timeout}, nil
}

// authorization returns the Authorization header value from the secret:
// "Bearer <token>" or basic auth; empty without credentials.
func authorization(s SecretData) (string, error) {
	token, hasToken := s[SecretToken]
	user, hasUser := s[SecretUsername]
	pass, hasPass := s[SecretPassword]
	switch {
	case hasToken && hasUser:
		return "", fmt.Errorf("%w: set %q or %q, not both", ErrSecret, SecretToken, SecretUsername)
	case hasToken:
		t := strings.TrimSpace(string(token))
		if t == "" {
			return "", fmt.Errorf("%w: key %q is empty", ErrSecret, SecretToken)
		}
		return "Bearer " + t, nil
	case hasUser != hasPass:
		return "", fmt.Errorf("%w: %q and %q go together", ErrSecret, SecretUsername, SecretPassword)
	case hasUser:
		r := http.Request{Header: http.Header{}}
		r.SetBasicAuth(string(user), string(pass))
		return r.Header.Get("Authorization"), nil
	}
	return "", nil
}

// headerTransport adds the metric's headers and the Authorization header
// to requests for the configured host only (a redirect elsewhere carries
// neither), and caps response bodies.
type headerTransport struct {
	next    http.RoundTripper
	host    string
	authz   string
	headers map[string]string
	maxBody int64
}

// RoundTrip implements http.RoundTripper.
func (t *headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("User-Agent", "rollgate-analysis")
	if req.URL.Host == t.host {
		for k, v := range t.headers {
			req.Header.Set(k, v)
		}
		if t.authz != "" {
			req.Header.Set("Authorization", t.authz)
		}
	}
	resp, err := t.next.RoundTrip(req)
	if err != nil || t.maxBody <= 0 {
		return resp, err
	}
	resp.Body = &cappedBody{rc: resp.Body, left: t.maxBody}
	return resp, nil
}

// cappedBody fails a read past its limit instead of silently truncating.
type cappedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
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

// closeIdle releases the client's pooled connections.
func closeIdle(c *http.Client) {
	if t, ok := c.Transport.(*headerTransport); ok {
		if tr, ok := t.next.(*http.Transport); ok {
			tr.CloseIdleConnections()
		}
	}
}

// redact replaces every credential from s found in err's text (the token,
// the password and the encoded basic-auth pair) by "[redacted]". Errors
// carry what servers echo back; this keeps credentials out of status,
// events and logs whatever a server says.
func redact(err error, s SecretData) error {
	if err == nil || len(s) == 0 {
		return err
	}
	msg := err.Error()
	clean := msg
	for _, v := range sensitive(s) {
		clean = strings.ReplaceAll(clean, v, "[redacted]")
	}
	if clean == msg {
		return err
	}
	return errors.New(clean)
}

// sensitive lists the strings of s that must never be shown.
func sensitive(s SecretData) []string {
	var out []string
	for _, k := range []string{SecretToken, SecretPassword} {
		if v := strings.TrimSpace(string(s[k])); v != "" {
			out = append(out, v)
		}
	}
	if authz, err := authorization(s); err == nil && authz != "" {
		_, cred, _ := strings.Cut(authz, " ")
		out = append(out, cred)
	}
	return out
}
