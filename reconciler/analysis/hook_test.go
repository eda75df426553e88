package analysis_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/analysis"
	"github.com/rollgate/rollgate/strategy/verdict"
)

// TestCallHook: a hook's answer is judged by its status or its condition
// over the decoded body; a call that fails is a no; the answer's message
// fits status.hooks (512 bytes) even for a long URL, and never holds the
// token.
func TestCallHook(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" || r.Header.Get("Authorization") != "Bearer s3cr3t" {
			http.Error(rw, "bad request", http.StatusBadRequest)
			return
		}
		switch r.URL.Path {
		case "/ok":
			rw.Write([]byte(`{"approved": true}`))
		case "/no":
			rw.Write([]byte(`{"approved": false}`))
		default:
			http.Error(rw, "down", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	secret := analysis.SecretData{"token": []byte("s3cr3t")}
	approved, err := verdict.CompileHookCondition("body.approved == true")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, url string
		cond      verdict.HookCondition
		yes       bool
		msg       string
	}{
		{"2xx is yes", srv.URL + "/ok", verdict.HookCondition{}, true, `HTTP 200: {"approved": true}`},
		{"503 is no", srv.URL + "/down", verdict.HookCondition{}, false, "HTTP 503: down"},
		{"the condition reads the body", srv.URL + "/no", approved, false, `HTTP 200: {"approved": false}`},
		{"the condition says yes", srv.URL + "/ok", approved, true, "HTTP 200"},
		{"no answer is no, cut to fit", "http://127.0.0.1:1/" + strings.Repeat("x", 2000), verdict.HookCondition{}, false, "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := analysis.CallHook(context.Background(), &v1alpha1.Hook{Name: "h", URL: tc.url}, tc.url, secret, []byte(`{}`), tc.cond)
			if a.Yes != tc.yes || len(a.Message) > 512 || strings.Contains(a.Message, "s3cr3t") ||
				(!strings.Contains(a.Message, tc.msg) && !strings.HasSuffix(tc.name, "cut to fit")) {
				t.Fatalf("= %+v (%d bytes), want yes %v with %q", a, len(a.Message), tc.yes, tc.msg)
			}
		})
	}
}
