package reconciler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/workload"
	"github.com/rollgate/rollgate/strategy"
	"github.com/rollgate/rollgate/traffic"
)

// actOnWorkload carries out the plan's workload action.
func (r *RolloutReconciler) actOnWorkload(ctx context.Context, rel *release, plan strategy.Plan) error {
	var err error
	switch plan.Workload {
	case strategy.WorkloadScale:
		mu := intstr.FromInt32(plan.MaxUnavailable)
		_, err = rel.adapter.EnsureBatch(ctx, workload.Batch{
			CanaryReplicas: plan.CanaryReplicas,
			MaxUnavailable: &mu,
			RolloutID:      workload.RolloutID(rel.ro.Name, plan.Status.CanaryRevision),
			BatchID:        plan.Status.CurrentStepIndex,
		})
		if errors.Is(err, workload.ErrNotHeld) {
			// The webhook has not frozen the workload (yet): nothing to scale.
			return nil
		}
	case strategy.WorkloadRollback:
		_, err = rel.adapter.Rollback(ctx)
	case strategy.WorkloadRelease:
		if rel.obs.Rollback {
			_, err = rel.adapter.Rollback(ctx)
		} else if rel.obs.Held {
			_, err = rel.adapter.Finalize(ctx)
		}
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", rel.ro.Spec.WorkloadRef.Kind, rel.ro.Spec.WorkloadRef.Name, err)
	}
	return nil
}

// actOnTraffic sends the plan's traffic to the routers when it differs from
// what this reconcile already asked for. It returns how long to wait for a
// grace period.
func (r *RolloutReconciler) actOnTraffic(ctx context.Context, rel *release, plan strategy.Plan) (time.Duration, error) {
	if rel.router == nil {
		if rel.trafficE != nil && hasRouting(rel.ro) {
			return 0, rel.trafficE
		}
		return 0, nil
	}
	if !plan.Traffic.Equal(rel.applied) {
		rel.applied = plan.Traffic
		done, wait, err := r.applyTraffic(ctx, rel, plan.Traffic)
		rel.trafficDone, rel.trafficWait, rel.trafficE = done && wait == 0 && err == nil, wait, err
	}
	r.markTraffic(rel)
	if rel.trafficE != nil {
		return 0, rel.trafficE
	}
	return rel.trafficWait, nil
}

// applyTraffic makes the routers carry t. A grace period is not an error.
func (r *RolloutReconciler) applyTraffic(ctx context.Context, rel *release, t strategy.Traffic) (done bool, wait time.Duration, err error) {
	if t.Mode == strategy.TrafficOriginal {
		done, err = rel.router.Restore(ctx)
	} else {
		done, err = rel.router.EnsureRoutes(ctx, traffic.Desired{
			CanaryWeight:          weightOf(t),
			Matches:               t.Matches,
			RequestHeaderModifier: t.RequestHeaderModifier,
			StableRevision:        rel.ro.Status.StableRevision,
			CanaryRevision:        rel.ro.Status.CanaryRevision,
			PatchPodMetadata:      patchPodMetadata(rel.ro),
		})
	}
	if d, ok := traffic.RetryAfter(err); ok {
		return false, d, nil
	}
	return done, 0, err
}

func weightOf(t strategy.Traffic) int32 {
	if t.Mode == strategy.TrafficCanary {
		return t.Weight
	}
	return 0
}

func patchPodMetadata(ro *v1alpha1.Rollout) *v1alpha1.PatchPodTemplateMetadata {
	if c := ro.Spec.Strategy.Canary; c != nil {
		return c.PatchPodTemplateMetadata
	}
	return nil
}

func hasRouting(ro *v1alpha1.Rollout) bool {
	if c := ro.Spec.Strategy.Canary; c != nil {
		return len(c.TrafficRoutings) > 0
	}
	if b := ro.Spec.Strategy.BlueGreen; b != nil {
		return len(b.TrafficRoutings) > 0
	}
	return false
}
