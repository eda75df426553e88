// Package gitpush serves the endpoint that forges (GitHub, GitLab, Gitea)
// call on a push, so that rollgate fetches a Repository at once instead of
// at its next interval and a merged approval is seen within a second.
package gitpush

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// MaxBody is the largest request body read; a larger one is answered 413.
const MaxBody = 1 << 20

// DefaultInterval is the least time between two calls for one Repository
// that Setup serves with; calls in between are answered 429.
const DefaultInterval = 100 * time.Millisecond

// Server serves POST /hook/<namespace>/<repository>.
//
// A call names an existing Repository (else 404). When the Repository has
// spec.webhook.secretRef, the call must carry a signature of its body made
// with the Secret's token, or the token itself for GitLab (see verify),
// else 401 and nothing is fetched. Without it, unsigned calls are
// accepted: the worst such a caller can do is make rollgate fetch, with
// credentials it already uses, a branch it fetches anyway. Either way
// calls for one Repository are limited to one per Interval (429 with
// Retry-After), so a POST loop cannot keep a fetch running, and a burst
// leaves at most one fetch pending (Stale coalesces).
type Server struct {
	// Addr is the listen address.
	Addr string
	// Repositories gets the Repository a call names (the manager's cache).
	// Nil accepts every call as for a Repository without a webhook secret;
	// Setup always sets it.
	Repositories client.Reader
	// Secrets gets the Secret a Repository's spec.webhook.secretRef names
	// (uncached: rollgate may get Secrets, not list or watch them).
	Secrets client.Reader
	// Stale is called with the Repository a push names: fetch it at once.
	Stale func(types.NamespacedName)
	// Pushed, when set, receives the Repository too (without blocking: one pending
	// event is enough), to reconcile the Rollouts that use it.
	Pushed chan<- types.NamespacedName
	// Interval is the least time between two calls for one Repository;
	// zero sets no limit (Setup sets DefaultInterval).
	Interval time.Duration
	// Elected is closed once this process leads (the manager's Elected);
	// nil means it always leads. Only the leader holds the repositories:
	// another replica forwards a call it accepted to the leader's endpoint
	// (Leader), so that a push reaching any replica is fetched at once.
	Elected <-chan struct{}
	// Leader returns the base URL of the leader's endpoint, such as
	// "http://10.1.2.3:9292".
	Leader func(context.Context) (string, error)
	// Forwarder sends forwarded calls; nil uses a client with a 10 s
	// timeout.
	Forwarder *http.Client

	mu   sync.Mutex
	last map[types.NamespacedName]time.Time
}

// Handler returns the handler of the hook path.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /hook/{namespace}/{repository}", s.serveHook)
	return mux
}

// Start serves until ctx ends.
func (s *Server) Start(ctx context.Context) error {
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, MaxHeaderBytes: 64 << 10,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return err
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.FromContext(ctx).Info("serving Git push webhooks", "address", ln.Addr().String(), "path", "/hook/<namespace>/<repository>")
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// serveHook answers one call: Repository, rate, body, signature, in that
// order, so that neither a flood nor a large body costs a Secret read.
func (s *Server) serveHook(w http.ResponseWriter, req *http.Request) {
	key := types.NamespacedName{Namespace: req.PathValue("namespace"), Name: req.PathValue("repository")}
	logger := log.FromContext(req.Context()).WithValues("repository", key)
	var repo v1alpha1.Repository
	if s.Repositories != nil {
		if err := s.Repositories.Get(req.Context(), key, &repo); err != nil {
			if apierrors.IsNotFound(err) {
				http.Error(w, "no such Repository", http.StatusNotFound)
				return
			}
			logger.Error(err, "push webhook: getting the Repository")
			http.Error(w, "Repository not readable", http.StatusServiceUnavailable)
			return
		}
	}
	if wait := s.reserve(key, time.Now()); wait > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((wait+time.Second-1)/time.Second)))
		http.Error(w, "too many calls for this Repository", http.StatusTooManyRequests)
		return
	}
	body, err := readBody(w, req)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "reading the body", http.StatusBadRequest)
		return
	}
	if ref := webhookSecret(&repo); ref != "" {
		token, err := s.token(req.Context(), key.Namespace, ref)
		if err != nil {
			// Said in the log, not to the caller, who is not yet trusted.
			logger.Error(err, "push webhook: call refused, spec.webhook.secretRef not usable")
			http.Error(w, "signature not verified", http.StatusUnauthorized)
			return
		}
		if !verify(req.Header, body, token) {
			logger.V(1).Info("push webhook: call refused, no valid signature")
			http.Error(w, "signature not verified", http.StatusUnauthorized)
			return
		}
	}
	if !s.leads() {
		s.forward(w, req, body, logger)
		return
	}
	s.Stale(key)
	select {
	case s.Pushed <- key:
	default: // a burst of pushes: one pending event is enough
	}
	w.WriteHeader(http.StatusAccepted)
}

// HeaderForwarded marks a call one replica forwarded to the leader; such
// a call is never forwarded again.
const HeaderForwarded = "X-Rollgate-Forwarded"

// leads says whether this process holds the repositories.
func (s *Server) leads() bool {
	if s.Elected == nil {
		return true
	}
	select {
	case <-s.Elected:
		return true
	default:
		return false
	}
}

// forward sends a call this replica accepted to the leader, with its body
// and the headers the leader checks, and answers with the leader's
// answer. The leader checks the call again (its own rate, the signature).
// A call already forwarded, or a leader that cannot be reached, is
// answered 503: the forge shows a failed delivery, and the leader sees the
// push at its next fetch.
func (s *Server) forward(w http.ResponseWriter, req *http.Request, body []byte, logger logr.Logger) {
	if req.Header.Get(HeaderForwarded) != "" || s.Leader == nil {
		http.Error(w, "not the leader", http.StatusServiceUnavailable)
		return
	}
	base, err := s.Leader(req.Context())
	if err != nil {
		logger.Error(err, "push webhook: this replica does not lead and cannot forward the call to the leader")
		http.Error(w, "the leader cannot be reached", http.StatusServiceUnavailable)
		return
	}
	out, err := http.NewRequestWithContext(req.Context(), http.MethodPost, base+req.URL.EscapedPath(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, "the leader cannot be reached", http.StatusServiceUnavailable)
		return
	}
	for _, name := range []string{"Content-Type", HeaderGitHub, HeaderGitea, HeaderForgejo, HeaderGitLab} {
		if v := req.Header.Get(name); v != "" {
			out.Header.Set(name, v)
		}
	}
	out.Header.Set(HeaderForwarded, "1")
	c := s.Forwarder
	if c == nil {
		c = &http.Client{Timeout: 10 * time.Second}
	}
	resp, err := c.Do(out)
	if err != nil {
		logger.Error(err, "push webhook: forwarding the call to the leader", "leader", base)
		http.Error(w, "the leader cannot be reached", http.StatusServiceUnavailable)
		return
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if v := resp.Header.Get("Retry-After"); v != "" {
		w.Header().Set("Retry-After", v)
	}
	logger.V(1).Info("push webhook: call forwarded to the leader", "leader", base, "status", resp.StatusCode)
	w.WriteHeader(resp.StatusCode)
}

// reserve takes the call slot of key at now: 0 when the call may go on,
// else how long until the next slot.
func (s *Server) reserve(key types.NamespacedName, now time.Time) time.Duration {
	every := s.Interval
	if every <= 0 {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		s.last = map[types.NamespacedName]time.Time{}
	}
	if next := s.last[key].Add(every); now.Before(next) {
		return next.Sub(now)
	}
	s.last[key] = now
	// Forget Repositories not called for a while (and deleted ones).
	if len(s.last) > 1024 {
		for k, t := range s.last {
			if now.Sub(t) > every {
				delete(s.last, k)
			}
		}
	}
	return 0
}

// NeedLeaderElection is false: every replica answers the forge; the
// leader fetches at once, and the others forward the call to it.
func (s *Server) NeedLeaderElection() bool { return false }
