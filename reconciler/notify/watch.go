package notify

import (
	"context"
	"fmt"
	"time"

	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// Watch makes the notifier follow every Rollout mgr caches and adds it to
// mgr. Each stored change of a Rollout is compared with the version
// before it (the informer hands both), and the triggers it fires are
// queued; only the leader queues and sends.
//
// The notifier is a process of its own (rollgate-notifier), not a part of
// the controller: the engine renders with text/template and expr, whose
// use of reflection makes the linker keep every exported method of a
// binary (TestControllerBinaryKeepsMethodDeadCode), and a notification
// service that hangs must not share a process with releases.
//
// What a restart costs: the first version of each Rollout a new process
// sees is its baseline, so a transition stored while no notifier ran is
// not told (docs/notifications.md).
func (n *Notifier) Watch(ctx context.Context, mgr ctrl.Manager) error {
	rollouts, err := mgr.GetCache().GetInformer(ctx, &v1alpha1.Rollout{})
	if err != nil {
		return fmt.Errorf("watching Rollouts: %w", err)
	}
	// Whether a Rollout's Repository opens pull requests decides when its
	// gate is told (SnapshotOf); the informer is asked for now so that the
	// first lookup does not start it inside a Rollout's event.
	if _, err := mgr.GetCache().GetInformer(ctx, &v1alpha1.Repository{}); err != nil {
		return fmt.Errorf("watching Repositories: %w", err)
	}
	n.repos = mgr.GetClient()
	n.leading = mgr.Elected()
	if _, err := rollouts.AddEventHandler(toolscache.ResourceEventHandlerFuncs{UpdateFunc: n.changed}); err != nil {
		return fmt.Errorf("watching Rollouts: %w", err)
	}
	return mgr.Add(n)
}

// changed queues the triggers of one stored change of a Rollout.
func (n *Notifier) changed(oldObj, newObj any) {
	before, ok := oldObj.(*v1alpha1.Rollout)
	if !ok {
		return
	}
	after, ok := newObj.(*v1alpha1.Rollout)
	if !ok || !n.isLeading() {
		return
	}
	forge := n.hasForge(after)
	n.Notify(after, Fired(SnapshotOf(before, forge), SnapshotOf(after, forge)))
}

func (n *Notifier) isLeading() bool {
	if n.leading == nil {
		return true
	}
	select {
	case <-n.leading:
		return true
	default:
		return false
	}
}

// hasForge says whether the Rollout's Repository opens pull requests; a
// Repository not (yet) in the cache counts as none. The read is bounded:
// it runs inside the Rollout informer's handler, and a cache that cannot
// sync (Repositories not readable) must not stop every later event.
func (n *Notifier) hasForge(ro *v1alpha1.Rollout) bool {
	if ro.Spec.Git == nil || ro.Spec.Git.Repository == "" || n.repos == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), repositoryRead)
	defer cancel()
	var repo v1alpha1.Repository
	if err := n.repos.Get(ctx, client.ObjectKey{Namespace: ro.Namespace, Name: ro.Spec.Git.Repository}, &repo); err != nil {
		return false
	}
	return repo.Spec.Forge != nil
}

// repositoryRead bounds one read of a Repository from the cache.
const repositoryRead = 5 * time.Second
