package rollout

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/workload"
	"github.com/rollgate/rollgate/strategy"
	"github.com/rollgate/rollgate/traffic"
)

// actOnWorkload carries out the plan's workload action and records the
// adapter's answer (done: nothing left to move for this action).
func (r *Reconciler) actOnWorkload(ctx context.Context, sc *scope) error {
	ro, p := sc.ro, sc.plan
	done, err := true, error(nil)
	switch p.Workload {
	case strategy.WorkloadScale:
		mu := intstr.FromInt32(p.MaxUnavailable)
		done, err = sc.adapter.EnsureBatch(ctx, workload.Batch{
			CanaryReplicas: p.CanaryReplicas,
			MaxUnavailable: &mu,
			RolloutID:      workload.RolloutID(ro.Name, p.Status.CanaryRevision),
			BatchID:        p.Status.CurrentStepIndex,
		})
		if errors.Is(err, workload.ErrNotHeld) {
			// The webhook has not frozen the workload (yet): nothing to scale.
			done, err = true, nil
		}
	case strategy.WorkloadRollback:
		done, err = sc.adapter.Rollback(ctx)
	case strategy.WorkloadLeaveHeld:
		done, err = sc.adapter.LeaveHeld(ctx)
	case strategy.WorkloadRelease:
		if sc.workload.Rollback {
			done, err = sc.adapter.Rollback(ctx)
		} else if sc.workload.Held {
			done, err = sc.adapter.HandBack(ctx)
		}
	}
	sc.workloadDone = done
	if err != nil {
		return fmt.Errorf("%s %s: %w", ro.Spec.WorkloadRef.Kind, ro.Spec.WorkloadRef.Name, err)
	}
	return nil
}

// actOnTraffic sends the plan's traffic to the routers when it differs from
// what this reconcile already asked for.
func (r *Reconciler) actOnTraffic(ctx context.Context, sc *scope) error {
	if sc.router == nil {
		if sc.routerErr != nil && hasRouting(sc.ro) {
			return sc.routerErr
		}
		return nil
	}
	if !sc.traffic.sent || !sc.plan.Traffic.Equal(sc.traffic.asked) {
		r.sendTraffic(ctx, sc, sc.plan.Traffic)
	}
	return sc.traffic.err
}

// sendTraffic makes the routers carry t and records their answer. A grace
// period is not an error.
func (r *Reconciler) sendTraffic(ctx context.Context, sc *scope, t strategy.Traffic) {
	ro := sc.ro
	var done bool
	var err error
	if t.Mode == strategy.TrafficOriginal {
		done, err = sc.router.Restore(ctx)
		if err != nil && deleting(ro) && nothingToRestore(err) {
			done, err = true, nil // the routes went first (a prune): none to restore
		}
	} else {
		stable := ro.Status.StableRevision
		if t.Mode == strategy.TrafficPromoted {
			// The stable Service selects the new revision too: the old
			// pods shut down with no request on them.
			stable = ro.Status.CanaryRevision
		}
		if p := sc.workload.LabelPending; p != "" && (p == stable || p == ro.Status.CanaryRevision) {
			// The value its pods carry is not known yet (a new
			// ControllerRevision not in the cache yet): a Service narrowed
			// now would select no pod, and be written again in a moment.
			sc.traffic = trafficAnswer{asked: t, sent: true, wait: cacheLagPoll}
			return
		}
		done, err = sc.router.EnsureRoutes(ctx, traffic.Desired{
			CanaryWeight:          weightOf(t),
			Matches:               t.Matches,
			RequestHeaderModifier: t.RequestHeaderModifier,
			MirrorPercent:         mirrorOf(t),
			StableRevision:        sc.workload.LabelValue(stable),
			CanaryRevision:        sc.workload.LabelValue(ro.Status.CanaryRevision),
			PatchPodMetadata:      ro.Spec.Strategy.PatchPodTemplateMetadata(),
		})
	}
	a := trafficAnswer{asked: t, sent: true}
	if d, ok := traffic.RetryAfter(err); ok {
		a.wait = d
	} else {
		a.done, a.err = done && err == nil, err
	}
	sc.traffic = a
}

func weightOf(t strategy.Traffic) int32 {
	if t.Mode == strategy.TrafficCanary || t.Mode == strategy.TrafficPromoted {
		return t.Weight
	}
	return 0
}

// mirrorOf is the percentage of requests t copies to the canary.
func mirrorOf(t strategy.Traffic) int32 {
	if t.Mode == strategy.TrafficCanary {
		return t.Mirror
	}
	return 0
}

func hasRouting(ro *v1alpha1.Rollout) bool {
	return len(ro.Spec.Strategy.TrafficRoutings()) > 0
}
