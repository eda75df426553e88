package analysis

import (
	"context"
	"crypto/tls"
	"crypto/x509"
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

	"github.com/prometheus/common/config"
)

// clientName is the User-Agent of metric queries and the name of the
// client in prometheus/common.
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

// newClient builds the HTTP client of one query with prometheus/common's
// config package: bearer or basic auth, CA and client certificate from the
// secret, the metric's headers, a timeout, and a cap on the response size.
// It follows redirects only within the target's origin, so credentials and
// headers never reach another host. The caller closes idle connections
// when done.
func newClient(o clientOptions) (*http.Client, error) {
	target, err := url.Parse(o.target)
	if err != nil {
		return nil, fmt.Errorf("parsing URL: %w", err)
	}
	cfg, opts, err := httpClientConfig(o)
	if err != nil {
		return nil, err
	}
	client, err := config.NewClientFromConfig(cfg, clientName, opts...)
	if err != nil {
		return nil, fmt.Errorf("HTTP client: %w", err)
	}
	client.Timeout = o.timeout
	client.CheckRedirect = sameOrigin(target)
	if o.maxBody > 0 {
		client.Transport = &limitTransport{next: client.Transport, max: o.maxBody}
	}
	return client, nil
}

// httpClientConfig maps the options onto prometheus/common's client
// configuration and validates it.
func httpClientConfig(o clientOptions) (config.HTTPClientConfig, []config.HTTPClientOption, error) {
	cfg := config.DefaultHTTPClientConfig
	cfg.ProxyConfig = config.ProxyConfig{ProxyFromEnvironment: true}
	cfg.TLSConfig = config.TLSConfig{InsecureSkipVerify: o.insecure, MinVersion: config.TLSVersion(tls.VersionTLS12)}
	if err := applyCredentials(&cfg, o.secret); err != nil {
		return cfg, nil, err
	}
	if err := applyTLS(&cfg.TLSConfig, o.secret); err != nil {
		return cfg, nil, err
	}
	opts, err := applyHeaders(&cfg, o.headers)
	if err != nil {
		return cfg, nil, err
	}
	if err := cfg.Validate(); err != nil {
		return cfg, nil, fmt.Errorf("HTTP client config: %w", err)
	}
	return cfg, append(opts, config.WithNewTLSConfigFunc(tlsWithSystemRoots)), nil
}

// applyHeaders puts the metric's headers on cfg. prometheus/common
// reserves some names; three of them keep their meaning:
//   - User-Agent replaces rollgate-analysis;
//   - Host sets the request's Host;
//   - Authorization is ignored when the Secret has credentials (they win),
//     and otherwise becomes the client's authorization.
//
// Any other reserved name (Content-Type, Accept-Encoding, Connection, ...)
// is an error naming it.
func applyHeaders(cfg *config.HTTPClientConfig, headers map[string]string) ([]config.HTTPClientOption, error) {
	ua := clientName
	var opts []config.HTTPClientOption
	for _, name := range slices.Sorted(maps.Keys(headers)) {
		value := headers[name]
		if _, reserved := config.ReservedHeaders[name]; !reserved {
			if cfg.HTTPHeaders == nil {
				cfg.HTTPHeaders = &config.Headers{Headers: map[string]config.Header{}}
			}
			cfg.HTTPHeaders.Headers[name] = config.Header{Values: []string{value}}
			continue
		}
		switch name {
		case "User-Agent":
			ua = value
		case "Host":
			opts = append(opts, config.WithHost(value))
		case "Authorization":
			if cfg.Authorization != nil || cfg.BasicAuth != nil {
				continue
			}
			if err := headerAuthorization(cfg, value); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("header %q is reserved and cannot be set on a metric query", name)
		}
	}
	return append(opts, config.WithUserAgent(ua)), nil
}

// headerAuthorization maps an Authorization header value onto cfg: Basic
// credentials to basic auth (prometheus/common refuses a "Basic"
// authorization type), anything else to its type and credentials.
func headerAuthorization(cfg *config.HTTPClientConfig, value string) error {
	typ, cred, _ := strings.Cut(strings.TrimSpace(value), " ")
	cred = strings.TrimSpace(cred)
	if !strings.EqualFold(typ, "Basic") {
		cfg.Authorization = &config.Authorization{Type: typ, Credentials: config.Secret(cred)}
		return nil
	}
	raw, err := base64.StdEncoding.DecodeString(cred)
	user, pass, ok := strings.Cut(string(raw), ":")
	if err != nil || !ok {
		return errors.New(`header "Authorization": Basic credentials are not base64 of user:password`)
	}
	cfg.BasicAuth = &config.BasicAuth{Username: user, Password: config.Secret(pass)}
	return nil
}

// tlsWithSystemRoots builds the TLS configuration with prometheus/common,
// then trusts the system roots besides the Secret's CA bundle (the library
// trusts the bundle alone).
func tlsWithSystemRoots(ctx context.Context, c *config.TLSConfig, opts ...config.TLSConfigOption) (*tls.Config, error) {
	tc, err := config.NewTLSConfigWithContext(ctx, c, opts...)
	if err != nil || c.CA == "" {
		return tc, err
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	pool.AppendCertsFromPEM([]byte(c.CA))
	tc.RootCAs = pool
	return tc, nil
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
