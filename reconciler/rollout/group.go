package rollout

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/metrics"
	"github.com/rollgate/rollgate/strategy"
)

// groupIndex indexes Rollouts by spec.group.name.
const groupIndex = "spec.group.name"

// indexGroups registers groupIndex.
func indexGroups(ctx context.Context, idx client.FieldIndexer) error {
	return idx.IndexField(ctx, &v1alpha1.Rollout{}, groupIndex, func(o client.Object) []string {
		if g := o.(*v1alpha1.Rollout).Spec.Group; g != nil {
			return []string{g.Name}
		}
		return nil
	})
}

// observeGroup reads the other members of the Rollout's lockstep group
// (spec.group) from the cache: Rollouts of the same namespace naming the
// same group, neither disabled nor being deleted. The planner judges
// from their specs and statuses.
func (r *Reconciler) observeGroup(ctx context.Context, sc *scope) error {
	ro := sc.ro
	g := ro.Spec.Group
	if g == nil || ro.Spec.Disabled || !ro.DeletionTimestamp.IsZero() {
		return nil
	}
	var list v1alpha1.RolloutList
	if err := r.List(ctx, &list, client.InNamespace(ro.Namespace), client.MatchingFields{groupIndex: g.Name}); err != nil {
		return fmt.Errorf("listing the members of group %s: %w", g.Name, err)
	}
	if err := r.groupInOneShard(ctx, sc); err != nil {
		return err
	}
	sc.group = &strategy.Group{Name: g.Name, Self: ro.Name}
	for i := range list.Items {
		m := &list.Items[i]
		if m.Name == ro.Name || m.Spec.Disabled || !m.DeletionTimestamp.IsZero() {
			continue
		}
		sc.group.Members = append(sc.group.Members, strategy.GroupMember{Name: m.Name, Spec: &m.Spec, Status: &m.Status})
	}
	return nil
}

// groupInOneShard refuses a group with a member another shard releases
// (its labels do not match this shard's selector): this shard would not
// see that member and would release the others without it. The spec
// error holds the release (sc.groupInvalid) and names the member and the
// fix; the member in the other shard reports the same of this one.
func (r *Reconciler) groupInOneShard(ctx context.Context, sc *scope) error {
	shard, all := r.Options.Shard, r.Options.AllRollouts
	if shard == nil || all == nil {
		return nil
	}
	ro := sc.ro
	var list v1alpha1.RolloutList
	if err := all.List(ctx, &list, client.InNamespace(ro.Namespace)); err != nil {
		return fmt.Errorf("listing the members of group %s in every shard: %w", ro.Spec.Group.Name, err)
	}
	for i := range list.Items {
		m := &list.Items[i]
		if m.Name == ro.Name || m.Spec.Group == nil || m.Spec.Group.Name != ro.Spec.Group.Name || shard.Matches(labels.Set(m.Labels)) {
			continue
		}
		sc.groupInvalid = &strategy.SpecError{Field: "spec.group.name", Detail: fmt.Sprintf(
			"member %s of group %s is released by another shard (its labels do not match %q): the members of a group "+
				"must be released by one controller; give them the same sharding label", m.Name, ro.Spec.Group.Name, shard.String())}
		return nil
	}
	return nil
}

// groupMembers maps a change of a member's status to the other members of
// its group: a member finishing a step, passing a gate or failing is what
// the others wait for.
func (r *Reconciler) groupMembers() handler.EventHandler {
	return r.eventsOf(metrics.SourceGroup, func(ctx context.Context, o client.Object) []reconcile.Request {
		ro, ok := o.(*v1alpha1.Rollout)
		if !ok || ro.Spec.Group == nil {
			return nil
		}
		var out []reconcile.Request
		for _, req := range r.rolloutsBy(ctx, ro.Namespace, groupIndex, ro.Spec.Group.Name) {
			if req.Name != ro.Name {
				out = append(out, req)
			}
		}
		return out
	})
}

// groupStatusChanged passes the updates of a grouped Rollout that change
// what its members judge: its step, state, phase or revisions.
func groupStatusChanged() predicate.Funcs {
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return grouped(e.Object) },
		DeleteFunc:  func(e event.DeleteEvent) bool { return grouped(e.Object) },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			a, okA := e.ObjectOld.(*v1alpha1.Rollout)
			b, okB := e.ObjectNew.(*v1alpha1.Rollout)
			if !okA || !okB || (a.Spec.Group == nil && b.Spec.Group == nil) {
				return false
			}
			x, y := &a.Status, &b.Status
			return x.Phase != y.Phase || x.CurrentStepIndex != y.CurrentStepIndex || x.CurrentStepState != y.CurrentStepState ||
				x.CanaryRevision != y.CanaryRevision || x.StableRevision != y.StableRevision ||
				(x.Queue == nil) != (y.Queue == nil) || a.Generation != b.Generation
		},
	}
}

func grouped(o client.Object) bool {
	ro, ok := o.(*v1alpha1.Rollout)
	return ok && ro.Spec.Group != nil
}

// groupNote tells the reviewer of a group's gate that the merge lets every
// member of the group pass it.
func groupNote(g *strategy.Group, step int) string {
	if g == nil {
		return ""
	}
	names := []string{g.Self}
	for _, m := range g.Members {
		names = append(names, m.Name)
	}
	slices.Sort(names)
	return fmt.Sprintf("\n\nThis is the gate of lockstep group `%s`: merging it lets step %d of every member go: %s.\n",
		g.Name, step, strings.Join(names, ", "))
}
