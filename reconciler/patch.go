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
		// Optimistic lock: the status is derived from what this reconcile
		// read; written over a newer object it could undo a step.
		patch := client.MergeFromWithOptions(p.before.DeepCopy(), client.MergeFromWithOptimisticLock{})
		if err := p.c.Status().Patch(ctx, ro, patch, client.FieldOwner("rollgate")); err != nil {
			return err
		}
	}
	p.before = ro.DeepCopy()
	return nil
}

// repositoryPatcher writes a Repository's status the same way: one merge
// patch, only when it changed since the last write.
type repositoryPatcher struct {
	c      client.Client
	before *v1alpha1.Repository
}

func newRepositoryPatcher(c client.Client, repo *v1alpha1.Repository) *repositoryPatcher {
	return &repositoryPatcher{c: c, before: repo.DeepCopy()}
}

// patch writes the status if it changed; observedGeneration records the
// generation this reconcile acted on.
func (p *repositoryPatcher) patch(ctx context.Context, repo *v1alpha1.Repository) error {
	repo.Status.ObservedGeneration = repo.Generation
	if equality.Semantic.DeepEqual(p.before.Status, repo.Status) {
		return nil
	}
	patch := client.MergeFromWithOptions(p.before.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if err := p.c.Status().Patch(ctx, repo, patch, client.FieldOwner("rollgate")); err != nil {
		return err
	}
	p.before = repo.DeepCopy()
	return nil
}
