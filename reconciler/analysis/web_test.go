package analysis

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/strategy/verdict"
)

const testToken = "s3cr3t-t0ken-value"

// jsonServer serves body at every path, and echoes the Authorization
// header in a 401 when it is not the test token.
func jsonServer(t *testing.T, body string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got := r.Header.Get("Authorization"); got != "" && got != "Bearer "+testToken {
			http.Error(w, "bad Authorization: "+got, http.StatusUnauthorized)
			return
		}
		if r.URL.Path == "/fail" {
			http.Error(w, "upstream broken, you sent "+r.Header.Get("Authorization"), http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func webQuery(url, path string) Query {
	return Query{Web: &v1alpha1.WebMetric{URL: url, JSONPath: path, Timeout: &metav1.Duration{Duration: 5 * time.Second}}}
}

func TestWebProvider(t *testing.T) {
	srv := jsonServer(t, `{"data":{"successRate":0.995,"text":"0.42","rates":[0.1,"0.2"],"name":"x","nested":[[1]],"nothing":null}}`)
	for _, tc := range []struct {
		name, path, want, err string
	}{
		{"number", "{.data.successRate}", "0.995", ""},
		{"braces optional", ".data.successRate", "0.995", ""},
		{"numeric string", "{.data.text}", "0.42", ""},
		{"array", "{.data.rates}", "[0.1, 0.2]", ""},
		{"not a number", "{.data.name}", "", `value "x" is not a number`},
		{"nested arrays", "{.data.nested}", "", "nested arrays"},
		{"null", "{.data.nothing}", "", "null"},
		{"missing key", "{.data.missing}", "", "missing is not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := (&WebProvider{}).Measure(context.Background(), webQuery(srv.URL, tc.path))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Measure = %v, %v; want error with %q", v, err, tc.err)
				}
				return
			}
			if err != nil || v.String() != tc.want {
				t.Fatalf("Measure = %v, %v; want %s", v, err, tc.want)
			}
		})
	}
}

func TestWebProviderScalarIsScalar(t *testing.T) {
	srv := jsonServer(t, `{"rate":0.5}`)
	v, err := (&WebProvider{}).Measure(context.Background(), webQuery(srv.URL, "{.rate}"))
	if err != nil || v.Kind() != verdict.KindScalar {
		t.Fatalf("Measure = %v (kind %v), %v; want a scalar so that `result > 0.4` works", v, v.Kind(), err)
	}
}

func TestWebProviderStatusError(t *testing.T) {
	srv := jsonServer(t, `{}`)
	_, err := (&WebProvider{}).Measure(context.Background(), webQuery(srv.URL+"/fail", "{.x}"))
	if err == nil || !strings.Contains(err.Error(), "502 Bad Gateway") {
		t.Fatalf("err = %v, want the HTTP status", err)
	}
}

// The bearer token reaches the server, and when the server echoes it back
// in an error the error text does not carry it.
func TestBearerTokenSentNeverShown(t *testing.T) {
	var seen string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = r.Header.Get("Authorization")
		http.Error(w, "denied for "+seen+" (token "+testToken+")", http.StatusForbidden)
	}))
	defer srv.Close()
	secret := SecretData{"token": []byte(testToken + "\n")}

	q := webQuery(srv.URL, "{.x}")
	q.Secret = secret
	_, webErr := (&WebProvider{}).Measure(context.Background(), q)

	pq := Query{Secret: secret, Prometheus: &v1alpha1.PrometheusMetric{Address: srv.URL, Query: "up"}}
	_, promErr := (&PrometheusProvider{}).Measure(context.Background(), pq)

	if seen != "Bearer "+testToken {
		t.Fatalf("server saw Authorization %q, want the bearer token", seen)
	}
	for name, err := range map[string]error{"web": webErr, "prometheus": promErr} {
		if err == nil {
			t.Fatalf("%s: no error from a 403", name)
		}
		if strings.Contains(err.Error(), testToken) {
			t.Fatalf("%s error carries the token: %v", name, err)
		}
		t.Logf("%s error: %v", name, err)
	}
}

func TestWebProviderTrustsCAFromSecret(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"x":1}`))
	}))
	defer srv.Close()
	q := webQuery(srv.URL, "{.x}")
	if _, err := (&WebProvider{}).Measure(context.Background(), q); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without the CA: err = %v, want a certificate error", err)
	}
	q.Secret = SecretData{"ca.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})}
	if v, err := (&WebProvider{}).Measure(context.Background(), q); err != nil || v.String() != "1" {
		t.Fatalf("with the CA: %v, %v; want 1", v, err)
	}
}

func TestWebProviderHeadersAndTimeout(t *testing.T) {
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Org") == "slow" {
			<-block
		}
		_, _ = w.Write([]byte(`{"org":"` + r.Header.Get("X-Org") + `"}`))
	}))
	defer srv.Close()
	defer close(block) // before srv.Close, which waits for the handler
	q := webQuery(srv.URL, "{.org}")
	q.Web.Headers = []v1alpha1.HTTPHeader{{Name: "X-Org", Value: "42"}}
	if v, err := (&WebProvider{}).Measure(context.Background(), q); err != nil || v.String() != "42" {
		t.Fatalf("header: %v, %v; want 42", v, err)
	}
	q.Web.Headers[0].Value = "slow"
	q.Web.Timeout = &metav1.Duration{Duration: 200 * time.Millisecond}
	start := time.Now()
	_, err := (&WebProvider{}).Measure(context.Background(), q)
	if err == nil || time.Since(start) > 2*time.Second {
		t.Fatalf("timeout: err = %v after %v, want an error after about 200ms", err, time.Since(start))
	}
}
