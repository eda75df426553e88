// Package gitpush serves the endpoint that forges (GitHub, GitLab, Gitea)
// call on a push, so that rollgate fetches a Repository at once instead of
// at its next interval and a merged approval is seen within a second.
package gitpush

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

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
	s.Stale(key)
	select {
	case s.Pushed <- key:
	default: // a burst of pushes: one pending event is enough
	}
	w.WriteHeader(http.StatusAccepted)
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

// NeedLeaderElection is false: every replica answers the forge (202), and
// only the leader, which holds the repositories, fetches at once; on the
// others the call changes nothing and the leader sees the push at its next
// fetch interval.
func (s *Server) NeedLeaderElection() bool { return false }
