package gitpush

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

const (
	ns     = "team"
	token  = "s3cret-token"
	body   = `{"ref":"refs/heads/main"}`
	signed = "signed"   // a Repository with spec.webhook.secretRef
	open   = "unsigned" // a Repository without
)

// stale records the Repositories the server marked stale.
type stale struct {
	mu   sync.Mutex
	keys []types.NamespacedName
}

func (s *stale) mark(k types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = append(s.keys, k)
}

func (s *stale) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys)
}

// newServer returns a push server over a fake API holding the Repositories
// signed (its webhook Secret holds token) and open, and what it marked stale.
func newServer(t *testing.T, interval time.Duration) (*httptest.Server, *stale) {
	t.Helper()
	return newServerWith(t, interval, nil)
}

// newServerWith is newServer with set changing the Server before it
// serves.
func newServerWith(t *testing.T, interval time.Duration, set func(*Server)) (*httptest.Server, *stale) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		&v1alpha1.Repository{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: signed},
			Spec: v1alpha1.RepositorySpec{
				URL:     "https://git.example/app.git",
				Webhook: &v1alpha1.WebhookSpec{SecretRef: &v1alpha1.LocalObjectReference{Name: "hook"}},
			},
		},
		&v1alpha1.Repository{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: open},
			Spec:       v1alpha1.RepositorySpec{URL: "https://git.example/other.git"},
		},
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hook"},
			Data:       map[string][]byte{"token": []byte(token)},
		},
	).Build()
	st := &stale{}
	s := &Server{Repositories: c, Secrets: c, Stale: st.mark, Interval: interval}
	if set != nil {
		set(s)
	}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return srv, st
}

// call posts payload to the hook of repo with headers h and returns the
// answer's status code and Retry-After.
func call(t *testing.T, srv *httptest.Server, repo, payload string, h map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/hook/"+ns+"/"+repo, strings.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After")
}

// hmacHex is the hex HMAC-SHA256 of payload with key.
func hmacHex(key, payload string) string {
	mac := hmac.New(sha256.New, []byte(key))
	mac.Write([]byte(payload))
	return hex.EncodeToString(mac.Sum(nil))
}

func TestCalls(t *testing.T) {
	for _, tc := range []struct {
		name    string
		repo    string
		payload string
		headers map[string]string
		want    int
	}{
		{"GitHub signature", signed, body, map[string]string{HeaderGitHub: "sha256=" + hmacHex(token, body)}, http.StatusAccepted},
		{"Gitea signature", signed, body, map[string]string{HeaderGitea: hmacHex(token, body)}, http.StatusAccepted},
		{"Forgejo signature", signed, body, map[string]string{HeaderForgejo: hmacHex(token, body)}, http.StatusAccepted},
		{"GitLab token", signed, body, map[string]string{HeaderGitLab: token}, http.StatusAccepted},
		{"unsigned, no secret set", open, body, nil, http.StatusAccepted},
		{"no signature", signed, body, nil, http.StatusUnauthorized},
		{"GitHub signature by another secret", signed, body, map[string]string{HeaderGitHub: "sha256=" + hmacHex("other", body)}, http.StatusUnauthorized},
		{"GitHub signature of another body", signed, body, map[string]string{HeaderGitHub: "sha256=" + hmacHex(token, body+" ")}, http.StatusUnauthorized},
		{"GitHub signature without sha256=", signed, body, map[string]string{HeaderGitHub: hmacHex(token, body)}, http.StatusUnauthorized},
		{"Gitea signature not hex", signed, body, map[string]string{HeaderGitea: "zz"}, http.StatusUnauthorized},
		{"GitLab wrong token", signed, body, map[string]string{HeaderGitLab: token + "x"}, http.StatusUnauthorized},
		{"unknown Repository", "nothing", body, nil, http.StatusNotFound},
		{"body over the limit", open, strings.Repeat("x", MaxBody+1), nil, http.StatusRequestEntityTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv, st := newServer(t, 0)
			code, _ := call(t, srv, tc.repo, tc.payload, tc.headers)
			if code != tc.want {
				t.Fatalf("answer %d, want %d", code, tc.want)
			}
			want := 0
			if tc.want == http.StatusAccepted {
				want = 1
			}
			if got := st.count(); got != want {
				t.Errorf("marked stale %d times, want %d", got, want)
			}
		})
	}
}

// A burst of calls for one Repository makes one fetch pending: the first
// call is accepted and the others are answered 429 with a Retry-After,
// while a call for another Repository goes through.
func TestBurst(t *testing.T) {
	srv, st := newServer(t, time.Hour)
	sig := map[string]string{HeaderGitHub: "sha256=" + hmacHex(token, body)}
	if code, _ := call(t, srv, signed, body, sig); code != http.StatusAccepted {
		t.Fatalf("first call answered %d, want 202", code)
	}
	for i := range 20 {
		code, retry := call(t, srv, signed, body, sig)
		if code != http.StatusTooManyRequests {
			t.Fatalf("call %d of the burst answered %d, want 429", i+2, code)
		}
		if retry != "3600" {
			t.Fatalf("call %d of the burst: Retry-After %q, want 3600", i+2, retry)
		}
	}
	if got := st.count(); got != 1 {
		t.Errorf("burst marked stale %d times, want 1", got)
	}
	if code, _ := call(t, srv, open, body, nil); code != http.StatusAccepted {
		t.Errorf("a call for another Repository answered %d, want 202", code)
	}
}

// After the interval a Repository is accepted again.
func TestAcceptedAfterInterval(t *testing.T) {
	srv, st := newServer(t, 50*time.Millisecond)
	if code, _ := call(t, srv, open, body, nil); code != http.StatusAccepted {
		t.Fatalf("first call answered %d, want 202", code)
	}
	time.Sleep(60 * time.Millisecond) // the interval itself is under test
	if code, _ := call(t, srv, open, body, nil); code != http.StatusAccepted {
		t.Fatalf("call after the interval answered %d, want 202", code)
	}
	if got := st.count(); got != 2 {
		t.Errorf("marked stale %d times, want 2", got)
	}
}

// A Repository whose webhook Secret is missing refuses every call.
func TestMissingSecretRefuses(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(&v1alpha1.Repository{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: signed},
		Spec: v1alpha1.RepositorySpec{URL: "https://git.example/app.git",
			Webhook: &v1alpha1.WebhookSpec{SecretRef: &v1alpha1.LocalObjectReference{Name: "gone"}}},
	}).Build()
	st := &stale{}
	srv := httptest.NewServer((&Server{Repositories: c, Secrets: c, Stale: st.mark}).Handler())
	defer srv.Close()
	if code, _ := call(t, srv, signed, body, map[string]string{HeaderGitLab: token}); code != http.StatusUnauthorized {
		t.Errorf("answer %d, want 401", code)
	}
	if st.count() != 0 {
		t.Error("marked stale without a Secret to verify with")
	}
}

// Start serves the handler on Addr until its context ends.
func TestStart(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	st := &stale{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- (&Server{Addr: addr, Stale: st.mark}).Start(ctx) }()
	var resp *http.Response
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if resp, err = http.Post("http://"+addr+"/hook/"+ns+"/"+open, "application/json", strings.NewReader(body)); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || st.count() != 1 {
		t.Errorf("answer %d and %d marked stale, want 202 and 1", resp.StatusCode, st.count())
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Start: %v", err)
	}
}

// TestFollowerForwardsToTheLeader: a replica that does not lead checks a
// call as the leader would and forwards what it accepts to the leader,
// signature included, which checks it again and fetches; it forwards
// nothing it refused, never forwards a forwarded call again, and says 503
// when the leader cannot be reached. The leader's answer (429 with its
// Retry-After) reaches the forge.
func TestFollowerForwardsToTheLeader(t *testing.T) {
	leader, leaderStale := newServerWith(t, time.Hour, nil)
	var mu sync.Mutex
	leaderURL, leaderErr := leader.URL, error(nil)
	setLeader := func(url string, err error) { mu.Lock(); defer mu.Unlock(); leaderURL, leaderErr = url, err }
	follower, followerStale := newServerWith(t, 0, func(s *Server) {
		s.Elected = make(chan struct{}) // never closed: it never leads
		s.Leader = func(context.Context) (string, error) { mu.Lock(); defer mu.Unlock(); return leaderURL, leaderErr }
	})
	gitea := map[string]string{HeaderGitea: hmacHex(token, body)}

	if code, _ := call(t, follower, signed, body, map[string]string{HeaderGitea: hmacHex("other", body)}); code != http.StatusUnauthorized || leaderStale.count() != 0 {
		t.Fatalf("a call signed with another secret: %d, leader fetched %d times; want 401 and nothing forwarded", code, leaderStale.count())
	}
	if code, _ := call(t, follower, signed, body, gitea); code != http.StatusAccepted || leaderStale.count() != 1 || followerStale.count() != 0 {
		t.Fatalf("a signed call: %d, leader fetched %d times, follower %d; want 202, 1, 0", code, leaderStale.count(), followerStale.count())
	}
	// The leader's own rate: its next call within the hour is refused,
	// and the forge is told when to come back.
	if code, retry := call(t, follower, signed, body, gitea); code != http.StatusTooManyRequests || retry == "" || leaderStale.count() != 1 {
		t.Fatalf("a second call within the leader's interval: %d (Retry-After %q), leader fetched %d times; want 429 with Retry-After, 1", code, retry, leaderStale.count())
	}
	forwarded := map[string]string{HeaderGitea: hmacHex(token, body), HeaderForwarded: "1"}
	if code, _ := call(t, follower, open, body, forwarded); code != http.StatusServiceUnavailable || leaderStale.count() != 1 {
		t.Fatalf("a forwarded call reaching a replica that does not lead: %d, leader fetched %d times; want 503 and no second forward", code, leaderStale.count())
	}
	setLeader("", errors.New("no replica holds the Lease"))
	if code, _ := call(t, follower, open, body, nil); code != http.StatusServiceUnavailable {
		t.Fatalf("with no leader to reach: %d, want 503", code)
	}
	setLeader("http://127.0.0.1:1", nil)
	if code, _ := call(t, follower, open, body, nil); code != http.StatusServiceUnavailable {
		t.Fatalf("with the leader's endpoint refusing connections: %d, want 503", code)
	}
}
