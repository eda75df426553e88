package rollout

import (
	"context"
	"fmt"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/budget"
	"github.com/rollgate/rollgate/strategy"
	"github.com/rollgate/rollgate/strategy/rules"
)

// coveringBudget is a budget covering the Rollout: one of the release
// rules, or the cluster's (--max-releases-in-flight).
type coveringBudget struct {
	id string // <namespace>/<repository>/<name>, or "cluster"
	rules.Budget
}

// clusterBudget is the name of the budget of --max-releases-in-flight.
const clusterBudget = "cluster"

// budgetsOf are the budgets covering the Rollout: the release rules'
// and the cluster's.
func (r *Reconciler) budgetsOf(sc *scope) []coveringBudget {
	out := sc.budgets
	if n := r.Options.MaxReleasesInFlight; n > 0 {
		out = append(out, coveringBudget{id: clusterBudget, Budget: rules.Budget{Name: clusterBudget, MaxInFlight: n}})
	}
	return out
}

// members are the Rollouts of list that budget b covers: for the
// cluster's, every one; for a budget of the release rules, those of the
// same Repository its selector picks.
func (sc *scope) members(b coveringBudget, list []v1alpha1.Rollout) []budget.Member {
	var out []budget.Member
	for i := range list {
		ro := &list[i]
		if b.id != clusterBudget && (ro.Namespace != sc.ro.Namespace || ro.Spec.Git == nil || sc.ro.Spec.Git == nil ||
			ro.Spec.Git.Repository != sc.ro.Spec.Git.Repository || !b.Rollouts.Covers(ro.Namespace, ro.Labels)) {
			continue
		}
		out = append(out, budget.Member{Key: client.ObjectKeyFromObject(ro), InFlight: strategy.InFlight(&ro.Status), Queue: ro.Status.Queue})
	}
	return out
}

// queueTicket asks the ledger for a place in every budget covering the
// Rollout, for a plan that starts a release; nil when each gave one.
func (r *Reconciler) queueTicket(ctx context.Context, sc *scope) *strategy.QueueTicket {
	budgets := r.budgetsOf(sc)
	if len(budgets) == 0 {
		return nil
	}
	var list v1alpha1.RolloutList
	var opts []client.ListOption
	if r.Options.MaxReleasesInFlight == 0 {
		opts = append(opts, client.InNamespace(sc.ro.Namespace)) // budgets of the release rules only
	}
	if err := r.List(ctx, &list, opts...); err != nil {
		return &strategy.QueueTicket{Budget: budgets[0].Name, Why: "cannot count the releases in flight: " + err.Error()}
	}
	key := client.ObjectKeyFromObject(sc.ro)
	var given []string
	for _, b := range budgets {
		ok, pos, flying := r.budgets.Admit(b.id, b.Name, b.MaxInFlight, key, sc.members(b, list.Items), sc.now)
		if ok {
			given = append(given, b.id)
			continue
		}
		for _, id := range given {
			r.budgets.Release(id, key)
		}
		names := make([]string, len(flying))
		for i, k := range flying {
			names[i] = k.String()
			if k.Namespace == sc.ro.Namespace {
				names[i] = k.Name
			}
		}
		if len(names) > 5 {
			names = append(names[:5], fmt.Sprintf("and %d more", len(flying)-5))
		}
		return &strategy.QueueTicket{Budget: b.Name, Position: pos,
			Why: fmt.Sprintf("budget %s allows %d release(s) in flight and %d are (%s)", b.Name, b.MaxInFlight, len(flying), strings.Join(names, ", "))}
	}
	return nil
}
