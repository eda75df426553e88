package reconciler

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// pushSource turns push events into reconciles of the Rollouts that use the
// Repository.
func pushSource(in <-chan types.NamespacedName, r *RolloutReconciler) source.Source {
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
