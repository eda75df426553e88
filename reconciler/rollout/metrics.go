package rollout

import (
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/metrics"
	"github.com/rollgate/rollgate/strategy"
)

// recordMetrics sets the Rollout's gauges from the status a reconcile
// leaves, or removes its series once the finalizer is gone.
func (r *Reconciler) recordMetrics(ro *v1alpha1.Rollout) {
	if !ro.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(ro, Finalizer) {
		r.Options.Metrics.Forget(ro.Namespace, ro.Name)
		return
	}
	r.Options.Metrics.SetRollout(ro)
}

// recordTransition hands the planner's move from before to the Rollout's
// new status to the metrics (steps and releases that ended, gates
// approved).
func (r *Reconciler) recordTransition(sc *scope, before *v1alpha1.RolloutStatus, obs strategy.Observed) {
	ro := sc.ro
	r.Options.Metrics.Transition(metrics.Transition{
		Namespace: ro.Namespace, Name: ro.Name,
		Old: before, New: &ro.Status,
		Spec: ro.Spec.Approvals, Seen: obs.Approvals,
		Now: sc.now,
	})
}
