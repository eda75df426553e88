// Package gitpush serves the endpoint that forges (GitHub, GitLab, Gitea)
// call on a push, so that rollgate fetches a Repository at once instead of
// at its next interval and a merged approval is seen within a second.
package gitpush

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Server serves POST /hook/<namespace>/<repository>. The body is ignored
// (any forge works); the call only makes rollgate fetch a branch it fetches
// anyway, a read of what the Repository already allows, so it needs no
// secret: the worst a caller can do is make rollgate fetch sooner.
type Server struct {
	// Addr is the listen address.
	Addr string
	// Stale is called with the Repository a push names: fetch it at once.
	Stale func(types.NamespacedName)
	// Pushed, when set, receives the Repository too (without blocking: one pending
	// event is enough), to reconcile the Rollouts that use it.
	Pushed chan<- types.NamespacedName
}

// Start serves until ctx ends.
func (s *Server) Start(ctx context.Context) error {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /hook/{namespace}/{repository}", func(w http.ResponseWriter, req *http.Request) {
		key := types.NamespacedName{Namespace: req.PathValue("namespace"), Name: req.PathValue("repository")}
		s.Stale(key)
		select {
		case s.Pushed <- key:
		default: // a burst of pushes: one pending event is enough
		}
		w.WriteHeader(http.StatusAccepted)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, MaxHeaderBytes: 64 << 10}
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

// NeedLeaderElection is false: every replica answers the forge (202), and
// only the leader, which holds the repositories, fetches at once; on the
// others the call changes nothing and the leader sees the push at its next
// fetch interval.
func (s *Server) NeedLeaderElection() bool { return false }
