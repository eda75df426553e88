package reconciler

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// eventTarget names a Repository whose tracked branch moved.
type eventTarget = types.NamespacedName

// pushServer serves POST /hook/<namespace>/<repository>, the URL to give
// GitHub, GitLab or Gitea as a push webhook: rollgate then fetches that
// Repository at once instead of at its next interval, so a merged approval
// is seen within a second. The body is ignored (any forge works); the call
// only triggers a fetch of public information, so it needs no secret.
type pushServer struct {
	addr string
	git  *repoPool
	out  chan<- eventTarget
}

// Start serves until ctx ends.
func (s *pushServer) Start(ctx context.Context) error {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /hook/{namespace}/{repository}", func(w http.ResponseWriter, req *http.Request) {
		key := types.NamespacedName{Namespace: req.PathValue("namespace"), Name: req.PathValue("repository")}
		s.git.markStale(key)
		select {
		case s.out <- key:
		default: // a burst of pushes: one pending event is enough
		}
		w.WriteHeader(http.StatusAccepted)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, MaxHeaderBytes: 64 << 10}
	ln, err := net.Listen("tcp", s.addr)
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
func (s *pushServer) NeedLeaderElection() bool { return false }

// pushSource turns push events into reconciles of the Rollouts that use the
// Repository.
func pushSource(in <-chan eventTarget, r *RolloutReconciler) source.Source {
	return source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case key := <-in:
					for _, req := range r.rolloutsBy(ctx, key.Namespace, repositoryIndex, key.Name) {
						q.Add(req)
					}
				}
			}
		}()
		return nil
	})
}
