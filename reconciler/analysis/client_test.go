package analysis

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// promAnswer is a Prometheus API answer: a one-series vector of 0.5.
const promAnswer = `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"0.5"]}]}}`

// recorder answers like Prometheus on /api/v1/ and with {"x":1} elsewhere,
// and keeps the headers and Host of the last request.
type recorder struct {
	mu     sync.Mutex
	header http.Header
	host   string
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec.mu.Lock()
	rec.header, rec.host = r.Header.Clone(), r.Host
	rec.mu.Unlock()
	if strings.HasPrefix(r.URL.Path, "/api/v1/") {
		_, _ = io.WriteString(w, promAnswer)
		return
	}
	_, _ = io.WriteString(w, `{"x":1}`)
}

func (rec *recorder) last() (http.Header, string) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.header, rec.host
}

// measure measures url with the named provider ("web" or "prometheus"),
// the secret, the headers and the timeout.
func measure(provider, url string, secret SecretData, headers []v1alpha1.HTTPHeader, timeout time.Duration) error {
	d := &metav1.Duration{Duration: timeout}
	q := Query{Secret: secret}
	var p Provider = &WebProvider{}
	if provider == "prometheus" {
		p = &PrometheusProvider{}
		q.Prometheus = &v1alpha1.PrometheusMetric{Address: url, Query: "up", Headers: headers, Timeout: d}
	} else {
		q.Web = &v1alpha1.WebMetric{URL: url, JSONPath: "{.x}", Headers: headers, Timeout: d}
	}
	_, err := p.Measure(context.Background(), q)
	return err
}

// measureBoth measures url with both providers and returns their errors
// by provider.
func measureBoth(url string, secret SecretData, headers []v1alpha1.HTTPHeader, timeout time.Duration) map[string]error {
	out := map[string]error{}
	for _, p := range []string{"web", "prometheus"} {
		out[p] = measure(p, url, secret, headers, timeout)
	}
	return out
}

// What the server sees, for each provider: credentials from the Secret,
// the metric's headers, and which of the two wins.
func TestServerSeesCredentialsAndHeaders(t *testing.T) {
	rec := &recorder{}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	basic := func(u, p string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte(u+":"+p)) }
	for _, tc := range []struct {
		name    string
		secret  SecretData
		headers []v1alpha1.HTTPHeader
		want    map[string]string // header name -> value ("" for absent)
		host    string            // want r.Host, when set
	}{
		{name: "bearer", secret: SecretData{"token": []byte("tok-1\n")},
			want: map[string]string{"Authorization": "Bearer tok-1", "User-Agent": clientName}},
		{name: "basic", secret: SecretData{"username": []byte("alice"), "password": []byte("hunter22")},
			want: map[string]string{"Authorization": basic("alice", "hunter22")}},
		{name: "no credentials", want: map[string]string{"Authorization": ""}},
		{name: "headers", headers: []v1alpha1.HTTPHeader{{Name: "x-org", Value: "42"}, {Name: "X-Scope-OrgID", Value: "team-a"}},
			want: map[string]string{"X-Org": "42", "X-Scope-Orgid": "team-a", "User-Agent": clientName}},
		{name: "the Secret's credentials win over an Authorization header", secret: SecretData{"token": []byte("tok-1")},
			headers: []v1alpha1.HTTPHeader{{Name: "Authorization", Value: "Bearer from-header"}},
			want:    map[string]string{"Authorization": "Bearer tok-1"}},
		{name: "Authorization header without a Secret", headers: []v1alpha1.HTTPHeader{{Name: "authorization", Value: "Token abc"}},
			want: map[string]string{"Authorization": "Token abc"}},
		{name: "Basic Authorization header", headers: []v1alpha1.HTTPHeader{{Name: "Authorization", Value: basic("bob", "pw")}},
			want: map[string]string{"Authorization": basic("bob", "pw")}},
		{name: "User-Agent and Host headers", headers: []v1alpha1.HTTPHeader{{Name: "User-Agent", Value: "probe/1"}, {Name: "Host", Value: "prom.example"}},
			want: map[string]string{"User-Agent": "probe/1"}, host: "prom.example"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, provider := range []string{"web", "prometheus"} {
				if err := measure(provider, srv.URL, tc.secret, tc.headers, 5*time.Second); err != nil {
					t.Fatalf("%s: %v", provider, err)
				}
				h, host := rec.last()
				for name, want := range tc.want {
					if got := h.Get(name); got != want {
						t.Errorf("%s: server saw %s %q, want %q", provider, name, got, want)
					}
				}
				if tc.host != "" && host != tc.host {
					t.Errorf("%s: server saw Host %q, want %q", provider, host, tc.host)
				}
			}
		})
	}
}

func TestWebAcceptHeaderCanBeOverridden(t *testing.T) {
	rec := &recorder{}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	for _, tc := range []struct {
		headers []v1alpha1.HTTPHeader
		want    []string
	}{
		{nil, []string{"application/json"}},
		{[]v1alpha1.HTTPHeader{{Name: "accept", Value: "application/vnd.api+json"}}, []string{"application/vnd.api+json"}},
	} {
		q := Query{Web: &v1alpha1.WebMetric{URL: srv.URL, JSONPath: "{.x}", Headers: tc.headers}}
		if _, err := (&WebProvider{}).Measure(context.Background(), q); err != nil {
			t.Fatal(err)
		}
		if h, _ := rec.last(); strings.Join(h.Values("Accept"), ",") != strings.Join(tc.want, ",") {
			t.Fatalf("headers %v: server saw Accept %q, want %q", tc.headers, h.Values("Accept"), tc.want)
		}
	}
}

func TestReservedHeaderIsRefused(t *testing.T) {
	headers := []v1alpha1.HTTPHeader{{Name: "content-type", Value: "text/plain"}}
	for provider, err := range measureBoth("http://127.0.0.1:1", nil, headers, time.Second) {
		if err == nil || !strings.Contains(err.Error(), `header "Content-Type" is reserved`) {
			t.Fatalf("%s: err = %v, want one naming the header", provider, err)
		}
	}
}

func TestPrometheusTimeout(t *testing.T) {
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-block
	}))
	defer srv.Close()
	defer close(block) // before srv.Close, which waits for the handler
	start := time.Now()
	q := Query{Prometheus: &v1alpha1.PrometheusMetric{Address: srv.URL, Query: "up", Timeout: &metav1.Duration{Duration: 200 * time.Millisecond}}}
	_, err := (&PrometheusProvider{}).Measure(context.Background(), q)
	if err == nil || time.Since(start) > 2*time.Second {
		t.Fatalf("err = %v after %v, want an error after about 200ms", err, time.Since(start))
	}
}

// A server that requires a client certificate is reached with ca.crt,
// tls.crt and tls.key from the Secret, and refuses the client without them.
func TestMutualTLSFromSecret(t *testing.T) {
	caPEM, caCert, caKey := newCA(t)
	certPEM, keyPEM := issueClientCert(t, caCert, caKey)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	var peer string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		peer = r.TLS.PeerCertificates[0].Subject.CommonName
		if strings.HasPrefix(r.URL.Path, "/api/v1/") {
			_, _ = io.WriteString(w, promAnswer)
			return
		}
		_, _ = io.WriteString(w, `{"x":1}`)
	}))
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool, MinVersion: tls.VersionTLS12}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	srv.StartTLS()
	defer srv.Close()
	serverCA := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})

	for provider, err := range measureBoth(srv.URL, SecretData{"ca.crt": serverCA}, nil, 5*time.Second) {
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("%s without a client certificate: err = %v, want a TLS certificate error", provider, err)
		}
	}
	secret := SecretData{"ca.crt": serverCA, "tls.crt": certPEM, "tls.key": keyPEM}
	for provider, err := range measureBoth(srv.URL, secret, nil, 5*time.Second) {
		if err != nil {
			t.Fatalf("%s with the client certificate: %v", provider, err)
		}
	}
	if peer != "rollgate-analysis-client" {
		t.Fatalf("server saw client certificate %q", peer)
	}
}

// A half-configured client certificate is an error naming the Secret keys,
// without the certificate's or the key's bytes.
func TestClientCertNeedsKey(t *testing.T) {
	cert, key := clientCertPEM(t)
	_, otherKey := clientCertPEM(t)
	for _, tc := range []struct {
		name   string
		secret SecretData
		want   []string
	}{
		{"tls.crt without tls.key", SecretData{"tls.crt": cert}, []string{`"tls.crt" is set without "tls.key"`}},
		{"tls.key without tls.crt", SecretData{"tls.key": key}, []string{`"tls.key" is set without "tls.crt"`}},
		{"key of another certificate", SecretData{"tls.crt": cert, "tls.key": otherKey}, []string{`"tls.crt"`, `"tls.key"`}},
		{"not PEM", SecretData{"tls.crt": []byte("cert-bytes-xyz"), "tls.key": []byte("key-bytes-xyz")}, []string{`"tls.crt"`, `"tls.key"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := measureBoth("https://127.0.0.1:1", tc.secret, nil, time.Second)
			_, errs["newClient"] = newClient(clientOptions{target: "https://x", secret: tc.secret})
			for provider, err := range errs {
				if err == nil {
					t.Fatalf("%s: no error", provider)
				}
				msg := err.Error()
				for _, want := range tc.want {
					if !strings.Contains(msg, want) {
						t.Errorf("%s: error %q does not contain %s", provider, msg, want)
					}
				}
				if provider == "newClient" && !errors.Is(err, ErrSecret) {
					t.Errorf("newClient: error %v is not ErrSecret", err)
				}
				for _, v := range tc.secret {
					if s := strings.TrimSpace(string(v)); strings.Contains(msg, s[len(s)/2:]) || strings.Contains(msg, "PRIVATE KEY") || strings.Contains(msg, "BEGIN") {
						t.Errorf("%s: error shows Secret content: %s", provider, msg)
					}
				}
			}
		})
	}
}

// Credentials and headers go only to the target's origin: a redirect to
// another host (or port) is not followed, and the other host sees nothing.
func TestCredentialsStayOnTheirHost(t *testing.T) {
	var hits int
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		_, _ = w.Write([]byte(`{"x":1}`))
	}))
	defer other.Close()
	origin := httptest.NewServer(http.RedirectHandler(other.URL+"/elsewhere", http.StatusFound))
	defer origin.Close()
	secret := SecretData{"token": []byte(testToken)}
	headers := []v1alpha1.HTTPHeader{{Name: "X-Api-Key", Value: "k"}}
	for provider, err := range measureBoth(origin.URL, secret, headers, 5*time.Second) {
		if err == nil || !strings.Contains(err.Error(), "not followed") {
			t.Fatalf("%s: err = %v, want the redirect refused", provider, err)
		}
	}
	if hits != 0 {
		t.Fatalf("redirect target received %d requests", hits)
	}
}

// A redirect within the origin is followed, with the credentials.
func TestSameOriginRedirectFollowed(t *testing.T) {
	rec := &recorder{}
	mux := http.NewServeMux()
	mux.Handle("/prom/", http.StripPrefix("/prom", rec))
	mux.Handle("/old/", http.RedirectHandler("/prom/", http.StatusMovedPermanently))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	q := Query{Secret: SecretData{"token": []byte(testToken)}, Web: &v1alpha1.WebMetric{URL: srv.URL + "/old/", JSONPath: "{.x}"}}
	if v, err := (&WebProvider{}).Measure(context.Background(), q); err != nil || v.String() != "1" {
		t.Fatalf("Measure = %v, %v; want 1 after the redirect", v, err)
	}
	if h, _ := rec.last(); h.Get("Authorization") != "Bearer "+testToken {
		t.Fatalf("after the redirect the server saw Authorization %q", h.Get("Authorization"))
	}
}

func TestResponseSizeCap(t *testing.T) {
	body := strings.Repeat("x", 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, body)
	}))
	defer srv.Close()
	for _, tc := range []struct {
		max  int64
		fail bool
	}{{10, false}, {9, true}} {
		c, err := newClient(clientOptions{target: srv.URL, timeout: 5 * time.Second, maxBody: tc.max})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		c.CloseIdleConnections()
		if tc.fail != (err != nil) || (!tc.fail && string(got) != body) {
			t.Fatalf("max %d: read %q, %v; want failure %v", tc.max, got, err, tc.fail)
		}
	}
}

// newCA returns a self-signed CA: its PEM, certificate and key.
func newCA(t *testing.T) ([]byte, *x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test client CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), cert, key
}

// issueClientCert returns a client certificate signed by ca, and its key,
// both PEM.
func issueClientCert(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "rollgate-analysis-client"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
}

// clientCertPEM returns a client certificate and its key from a fresh CA.
func clientCertPEM(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	_, ca, caKey := newCA(t)
	return issueClientCert(t, ca, caKey)
}
