// Package budget gives places in the budgets of releases in flight
// (docs/coordination.md): at most N releases at once among the Rollouts a
// budget covers, the others queued first come, first served.
package budget

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// ReservationTTL bounds how long a place given to a release counts while
// the cache does not show the release in flight yet (its status write is
// on its way, or its reconcile stopped before writing it).
const ReservationTTL = 30 * time.Second

// Ledger gives places in the budgets of the release rules. It
// decides under one lock and counts the places it gave until the cache
// shows them, so two Rollouts reconciled at once never both take the last
// place. It lives in the leader's memory only: the releases in flight and
// the queue (status.queue, with the time each began to wait) are read
// from the Rollouts, so a new leader decides the same.
type Ledger struct {
	mu sync.Mutex
	// reserved is, per budget, the Rollouts given a place and when.
	reserved map[string]map[types.NamespacedName]time.Time
}

// Member is a Rollout a budget covers, as the cache shows it.
type Member struct {
	// Key names the Rollout.
	Key types.NamespacedName
	// InFlight: its status records a release under way.
	InFlight bool
	// Queue is its status.queue.
	Queue *v1alpha1.QueueStatus
}

// Admit decides whether key may start a release under budget id (named
// name, limit places), given the members the budget covers. When it may,
// the place is reserved. It returns key's position among those waiting
// and what is in flight.
func (l *Ledger) Admit(id, name string, limit int, key types.NamespacedName, members []Member, now time.Time) (bool, int32, []types.NamespacedName) {
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
	byKey := map[types.NamespacedName]Member{}
	for _, m := range members {
		byKey[m.Key] = m
	}
	var flying []types.NamespacedName
	for _, m := range members {
		if m.InFlight && m.Key != key {
			flying = append(flying, m.Key)
		}
	}
	reserved := map[types.NamespacedName]bool{}
	for k, at := range res {
		m, member := byKey[k]
		switch {
		case now.Sub(at) > ReservationTTL || !member || m.InFlight || k == key:
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
		if m.Queue == nil || m.Queue.Budget != name || m.InFlight || reserved[m.Key] {
			continue
		}
		if m.Key == key {
			waiting[0].since = m.Queue.Since.Time
			continue
		}
		waiting = append(waiting, waiter{key: m.Key, since: m.Queue.Since.Time})
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

// Release gives back a place reserved for key (another budget refused it).
func (l *Ledger) Release(id string, key types.NamespacedName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.reserved[id], key)
	if len(l.reserved[id]) == 0 {
		delete(l.reserved, id)
	}
}
