package reconciler

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/strategy"
	"github.com/rollgate/rollgate/strategy/rules"
)

// reservationTTL bounds how long a place given to a release counts while
// the cache does not show the release in flight yet (its status write is
// on its way, or its reconcile stopped before writing it).
const reservationTTL = 30 * time.Second

// budgetLedger gives places in the budgets of the release rules. It
// decides under one lock and counts the places it gave until the cache
// shows them, so two Rollouts reconciled at once never both take the last
// place. It lives in the leader's memory only: the releases in flight and
// the queue (status.queue, with the time each began to wait) are read
// from the Rollouts, so a new leader decides the same.
type budgetLedger struct {
	mu sync.Mutex
	// reserved is, per budget, the Rollouts given a place and when.
	reserved map[string]map[types.NamespacedName]time.Time
}

// budgetMember is a Rollout a budget covers, as the cache shows it.
type budgetMember struct {
	key      types.NamespacedName
	inFlight bool
	queue    *v1alpha1.QueueStatus
}

// admit decides whether key may start a release under budget id (named
// name, limit places), given the members the budget covers. When it may,
// the place is reserved. It returns key's position among those waiting
// and what is in flight.
func (l *budgetLedger) admit(id, name string, limit int, key types.NamespacedName, members []budgetMember, now time.Time) (bool, int32, []types.NamespacedName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.reserved == nil {
		l.reserved = map[string]map[types.NamespacedName]time.Time{}
	}
	res := l.reserved[id]
	if res == nil {
		res = map[types.NamespacedName]time.Time{}
		l.reserved[id] = res
	}
	byKey := map[types.NamespacedName]budgetMember{}
	for _, m := range members {
		byKey[m.key] = m
	}
	var flying []types.NamespacedName
	for _, m := range members {
		if m.inFlight && m.key != key {
			flying = append(flying, m.key)
		}
	}
	reserved := map[types.NamespacedName]bool{}
	for k, at := range res {
		m, member := byKey[k]
		switch {
		case now.Sub(at) > reservationTTL || !member || m.inFlight || k == key:
			delete(res, k) // expired, gone, or shown by the cache
		default:
			flying = append(flying, k)
			reserved[k] = true
		}
	}
	type waiter struct {
		key   types.NamespacedName
		since time.Time
	}
	waiting := []waiter{{key: key, since: now}}
	for _, m := range members {
		if m.queue == nil || m.queue.Budget != name || m.inFlight || reserved[m.key] {
			continue
		}
		if m.key == key {
			waiting[0].since = m.queue.Since.Time
			continue
		}
		waiting = append(waiting, waiter{key: m.key, since: m.queue.Since.Time})
	}
	slices.SortFunc(waiting, func(a, b waiter) int {
		return cmp.Or(a.since.Compare(b.since), strings.Compare(a.key.String(), b.key.String()))
	})
	position := int32(slices.IndexFunc(waiting, func(w waiter) bool { return w.key == key }) + 1)
	slices.SortFunc(flying, func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) })
	if int(position) > limit-len(flying) {
		return false, position, flying
	}
	res[key] = now
	return true, position, flying
}

// release gives back a place reserved for key (another budget refused it).
func (l *budgetLedger) release(id string, key types.NamespacedName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.reserved[id], key)
	if len(l.reserved[id]) == 0 {
		delete(l.reserved, id)
	}
}

// budget is a budget covering the Rollout: one of the release rules, or
// the cluster's (--max-releases-in-flight).
type budget struct {
	id string // <namespace>/<repository>/<name>, or "cluster"
	rules.Budget
}

// clusterBudget is the name of the budget of --max-releases-in-flight.
const clusterBudget = "cluster"

// budgetsOf are the budgets covering the Rollout: the release rules'
// and the cluster's.
func (r *RolloutReconciler) budgetsOf(sc *scope) []budget {
	out := sc.budgets
	if n := r.Options.MaxReleasesInFlight; n > 0 {
		out = append(out, budget{id: clusterBudget, Budget: rules.Budget{Name: clusterBudget, MaxInFlight: n}})
	}
	return out
}

// members are the Rollouts of list that budget b covers: for the
// cluster's, every one; for a budget of the release rules, those of the
// same Repository its selector picks.
func (sc *scope) members(b budget, list []v1alpha1.Rollout) []budgetMember {
	var out []budgetMember
	for i := range list {
		ro := &list[i]
		if b.id != clusterBudget && (ro.Namespace != sc.ro.Namespace || ro.Spec.Git == nil || sc.ro.Spec.Git == nil ||
			ro.Spec.Git.Repository != sc.ro.Spec.Git.Repository || !b.Rollouts.Covers(ro.Namespace, ro.Labels)) {
			continue
		}
		out = append(out, budgetMember{key: client.ObjectKeyFromObject(ro), inFlight: strategy.InFlight(&ro.Status), queue: ro.Status.Queue})
	}
	return out
}

// queueTicket asks the ledger for a place in every budget covering the
// Rollout, for a plan that starts a release; nil when each gave one.
func (r *RolloutReconciler) queueTicket(ctx context.Context, sc *scope) *strategy.QueueTicket {
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
		ok, pos, flying := r.budgets.admit(b.id, b.Name, b.MaxInFlight, key, sc.members(b, list.Items), sc.now)
		if ok {
			given = append(given, b.id)
			continue
		}
		for _, id := range given {
			r.budgets.release(id, key)
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
