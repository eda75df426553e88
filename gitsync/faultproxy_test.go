package gitsync_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollgate/rollgate/test/gitserver"
)

// proxyMode is how a faultProxy treats requests.
type proxyMode int

const (
	// proxyUp forwards every request to the Git server.
	proxyUp proxyMode = iota
	// proxyUnavailable answers every request with 503, like a Git host in
	// maintenance or a load balancer without backends.
	proxyUnavailable
	// proxyHang accepts requests and never answers them (until the mode
	// changes or the proxy closes), like a wedged Git host.
	proxyHang
)

// faultProxy sits between gitsync and a gitserver.Server on a fixed
// loopback address, so a test can take "the Git server" down and bring it
// back on the same URL, make it answer 503, hang, or run a hook before a
// request is forwarded (to land a foreign push between a fetch and a push).
type faultProxy struct {
	t      testing.TB
	addr   string
	target *url.URL
	rp     *httputil.ReverseProxy

	mu       sync.Mutex
	mode     proxyMode
	hook     func(r *http.Request)
	released chan struct{} // closed when proxyHang ends
	srv      *http.Server  // nil while down
	requests int
}

func newFaultProxy(t testing.TB, backend string) *faultProxy {
	t.Helper()
	target, err := url.Parse(backend)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{t: t, addr: ln.Addr().String(), target: target, released: make(chan struct{})}
	p.rp = &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(target) },
		FlushInterval: -1,
		ErrorLog:      nil,
	}
	p.serve(ln)
	t.Cleanup(func() {
		p.setMode(proxyUp) // release hung requests
		p.down()
	})
	return p
}

// URL is the base URL of the proxy; it stays the same across down/up.
func (p *faultProxy) URL() string { return "http://" + p.addr }

func (p *faultProxy) serve(ln net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(p.handle), ReadHeaderTimeout: 10 * time.Second}
	p.mu.Lock()
	p.srv = srv
	p.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

func (p *faultProxy) handle(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	mode, hook, released := p.mode, p.hook, p.released
	p.requests++
	p.mu.Unlock()
	switch mode {
	case proxyUnavailable:
		http.Error(w, "git host under maintenance", http.StatusServiceUnavailable)
		return
	case proxyHang:
		select {
		case <-released:
		case <-r.Context().Done():
			return
		}
		http.Error(w, "git host was wedged", http.StatusBadGateway)
		return
	}
	if hook != nil {
		hook(r)
	}
	p.rp.ServeHTTP(w, r)
}

// setMode switches the proxy; leaving proxyHang releases hung requests
// (with 502).
func (p *faultProxy) setMode(m proxyMode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mode == proxyHang && m != proxyHang {
		close(p.released)
		p.released = make(chan struct{})
	}
	p.mode = m
}

// setHook runs hook before forwarding each request (nil to remove).
func (p *faultProxy) setHook(hook func(r *http.Request)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hook = hook
}

// down stops listening and drops every connection: clients get
// "connection refused" until up.
func (p *faultProxy) down() {
	p.mu.Lock()
	srv := p.srv
	p.srv = nil
	p.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// up listens again on the same address.
func (p *faultProxy) up() {
	p.t.Helper()
	var ln net.Listener
	var err error
	for range 50 { // the port is ours, but give the kernel a moment
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		p.t.Fatalf("re-listen on %s: %v", p.addr, err)
	}
	p.serve(ln)
}

// isReceivePack reports whether r is the POST carrying a push.
func isReceivePack(r *http.Request) bool {
	return r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-receive-pack")
}

// isUploadPack reports whether r is the POST carrying a fetch.
func isUploadPack(r *http.Request) bool {
	return r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-upload-pack")
}

// bareGit runs git in the server's bare repository app.git.
func bareGit(t testing.TB, srv *gitserver.Server, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", srv.Root + "/app.git"}, args...)...)
	cmd.Env = append(cmd.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=Force Pusher", "GIT_AUTHOR_EMAIL=force@rollgate.invalid",
		"GIT_COMMITTER_NAME=Force Pusher", "GIT_COMMITTER_EMAIL=force@rollgate.invalid")
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// mustBareGit is bareGit failing the test on error.
func mustBareGit(t testing.TB, srv *gitserver.Server, args ...string) string {
	t.Helper()
	out, err := bareGit(t, srv, args...)
	if err != nil {
		t.Fatalf("git %v: %v: %s", args, err, out)
	}
	return out
}

// isAncestor reports whether commit is an ancestor of (or equal to) the
// head of branch in the server's repository.
func isAncestor(t testing.TB, srv *gitserver.Server, commit, branch string) bool {
	t.Helper()
	_, err := bareGit(t, srv, "merge-base", "--is-ancestor", commit, "refs/heads/"+branch)
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("merge-base: %v", err)
	}
	return err == nil
}

// commitRetrying is srv.Commit retried while a concurrent push moves the
// branch under it (its update-ref is a compare-and-swap).
func commitRetrying(ctx context.Context, srv *gitserver.Server, branch, msg string, files map[string]string) (string, error) {
	for {
		h, err := srv.Commit("app", branch, msg, files)
		if err == nil {
			return h, nil
		}
		if ctx.Err() != nil || !strings.Contains(err.Error(), "update-ref") {
			return "", err
		}
		time.Sleep(time.Millisecond)
	}
}
