package reconciler

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// statusPatcher writes a Rollout's finalizers and status, each only when
// changed since the last write. The status (conditions included) goes in
// one merge patch, so a reader never sees a phase without the conditions
// that explain it: the planner reads a failed release's reason back from
// the Stalled condition.
type statusPatcher struct {
	c      client.Client
	before *v1alpha1.Rollout
}

func newStatusPatcher(c client.Client, ro *v1alpha1.Rollout) *statusPatcher {
	return &statusPatcher{c: c, before: ro.DeepCopy()}
}

// patch writes what changed; observedGeneration records the generation this
// reconcile acted on.
func (p *statusPatcher) patch(ctx context.Context, ro *v1alpha1.Rollout) error {
	if !equality.Semantic.DeepEqual(p.before.Finalizers, ro.Finalizers) {
		base := p.before.DeepCopy()
		if err := p.c.Patch(ctx, ro, client.MergeFrom(base)); err != nil {
			return err
		}
	}
	ro.Status.ObservedGeneration = ro.Generation
	if !equality.Semantic.DeepEqual(p.before.Status, ro.Status) {
		base := p.before.DeepCopy()
		base.ResourceVersion = ""
		if err := p.c.Status().Patch(ctx, ro, client.MergeFrom(base), client.FieldOwner("rollgate")); err != nil {
			return err
		}
	}
	p.before = ro.DeepCopy()
	return nil
}
