package reconciler

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/notify"
)

// notifySnapshots takes the Rollout's notification snapshot as the
// reconcile read it, both ways: whether its Repository has a forge is
// known only once the reconcile observed it.
func notifySnapshots(ro *v1alpha1.Rollout) [2]notify.Snapshot {
	return [2]notify.Snapshot{notify.SnapshotOf(ro, false), notify.SnapshotOf(ro, true)}
}

// notify queues the notifications of what this reconcile changed. It runs
// once the status that records the change is stored, so a transition is
// notified at most once; a controller stopped between the two sends
// none for it (docs/notifications.md).
func (r *RolloutReconciler) notify(sc *scope, before [2]notify.Snapshot) {
	if r.Notifier == nil {
		return
	}
	forge := sc.repository != nil && sc.repository.Spec.Forge != nil
	i := 0
	if forge {
		i = 1
	}
	r.Notifier.Notify(sc.ro, notify.Fired(before[i], notify.SnapshotOf(sc.ro, forge)))
}

// notificationEvent records a notification that could not be sent on its
// Rollout.
func (r *RolloutReconciler) notificationEvent(ro *v1alpha1.Rollout, reason, message string) {
	if r.Recorder != nil {
		r.Recorder.Event(ro, corev1.EventTypeWarning, reason, message)
	}
}
