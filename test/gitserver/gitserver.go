// Package gitserver runs a real smart-HTTP Git server on loopback for tests
// and the demo: `git http-backend` behind Go's net/http/cgi handler, serving
// bare repositories from a temporary folder. Clients (go-git, the git CLI,
// Flux's source-controller) clone, fetch and push over it exactly as they do
// against a hosted Git service.
//
// Besides serving, a Server acts as "another user" on the server side:
// CreateRepo seeds a repository, Commit adds a commit to a branch and Merge
// merges one branch into another the way a pull request is merged.
package gitserver

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Options configures a Server.
type Options struct {
	// Username and Password enable HTTP basic auth on every request when
	// either is set; both empty means anonymous read and write.
	Username, Password string
	// Host is the address to listen on; empty means 127.0.0.1. A pod of a
	// real node (test/realnode) reaches the host at the node's address.
	Host string
}

// Server is a running Git server.
type Server struct {
	// URL is the base URL, http://<Host>:<port>; repository <name> is
	// served at URL + "/" + name + ".git".
	URL string
	// Root is the folder holding the bare repositories (<name>.git).
	Root string

	srv     *http.Server
	done    chan error
	ownRoot bool
	// adverts and packs count the fetches served: each read of a
	// repository's branch heads (GET info/refs, as ls-remote and every
	// fetch begin) and each pack sent (POST git-upload-pack).
	adverts, packs atomic.Int64
}

// Fetches returns how many times the server advertised a repository's
// branch heads to a reader (ls-remote, and the start of every fetch) and
// how many packs it sent (fetches that downloaded objects).
func (s *Server) Fetches() (adverts, packs int64) { return s.adverts.Load(), s.packs.Load() }

// count counts the fetches next serves.
func (s *Server) count(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/info/refs") && r.URL.Query().Get("service") == "git-upload-pack":
			s.adverts.Add(1)
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-upload-pack"):
			s.packs.Add(1)
		}
		next.ServeHTTP(w, r)
	})
}

// Start starts a Server for the length of a test: it fails the test when the
// server cannot start, and closes it and removes its repositories on cleanup.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	s, err := newServer(opts, t.TempDir(), false)
	if err != nil {
		t.Fatalf("start git server: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("stop git server: %v", err)
		}
	})
	return s
}

// New starts a Server outside a test (the demo). Close stops it and removes
// its repositories.
func New(opts Options) (*Server, error) {
	root, err := os.MkdirTemp("", "rollgate-git-")
	if err != nil {
		return nil, err
	}
	s, err := newServer(opts, root, true)
	if err != nil {
		_ = os.RemoveAll(root)
		return nil, err
	}
	return s, nil
}

func newServer(opts Options, root string, ownRoot bool) (*Server, error) {
	backend, err := httpBackend()
	if err != nil {
		return nil, err
	}
	host := opts.Host
	if host == "" {
		host = "127.0.0.1"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, err
	}
	var h http.Handler = &cgi.Handler{
		Path: backend,
		Root: "/",
		Dir:  root,
		Env: append(gitEnv(),
			"GIT_PROJECT_ROOT="+root,
			"GIT_HTTP_EXPORT_ALL=1",
			// http-backend allows pushes only for authenticated users unless
			// http.receivepack is set; set it for every repository.
			"GIT_CONFIG_COUNT=1",
			"GIT_CONFIG_KEY_0=http.receivepack",
			"GIT_CONFIG_VALUE_0=true",
		),
	}
	h = unchunk(h)
	if opts.Username != "" || opts.Password != "" {
		h = basicAuth(h, opts.Username, opts.Password)
	}
	s := &Server{
		URL:     "http://" + ln.Addr().String(),
		Root:    root,
		done:    make(chan error, 1),
		ownRoot: ownRoot,
	}
	s.srv = &http.Server{Handler: s.count(h), ReadHeaderTimeout: 10 * time.Second}
	go func() { s.done <- s.srv.Serve(ln) }()
	return s, nil
}

// Close stops the server, waiting up to 10 s for requests in flight, and
// removes the repositories when New created their folder.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = s.srv.Close()
	}
	if serveErr := <-s.done; !errors.Is(serveErr, http.ErrServerClosed) && err == nil {
		err = serveErr
	}
	if s.ownRoot {
		if rmErr := os.RemoveAll(s.Root); err == nil {
			err = rmErr
		}
	}
	return err
}

// httpBackend returns the path of git-http-backend, which lives in git's exec
// path rather than on PATH.
func httpBackend() (string, error) {
	out, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		return "", fmt.Errorf("git is required: %w", err)
	}
	p := filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("git http-backend: %w", err)
	}
	return p, nil
}

// basicAuth rejects requests without the expected credentials.
func basicAuth(next http.Handler, user, password string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || subtle.ConstantTimeCompare([]byte(u), []byte(user)) != 1 ||
			subtle.ConstantTimeCompare([]byte(p), []byte(password)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="rollgate-git"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// unchunk buffers chunked request bodies: net/http/cgi refuses them, and the
// git CLI sends large pushes chunked.
func unchunk(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TransferEncoding) > 0 {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
			r.TransferEncoding = nil
		}
		next.ServeHTTP(w, r)
	})
}
