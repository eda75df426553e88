package budget

import (
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

func member(name string, inFlight bool, since time.Time) Member {
	m := Member{Key: types.NamespacedName{Namespace: "shop", Name: name}, InFlight: inFlight}
	if !since.IsZero() {
		m.Queue = &v1alpha1.QueueStatus{Budget: "shop", Since: metav1.NewTime(since)}
	}
	return m
}

// The queue is first come, first served: with one place free, only the
// release that began to wait first gets it; the others learn their
// position and what is in flight.
func TestBudgetLedgerIsFirstComeFirstServed(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	var l Ledger
	members := []Member{
		member("cart", true, time.Time{}),
		member("search", false, t0.Add(2*time.Second)),
		member("web", false, t0.Add(time.Second)),
	}
	key := func(n string) types.NamespacedName { return types.NamespacedName{Namespace: "shop", Name: n} }
	now := t0.Add(time.Minute)

	ok, pos, flying := l.Admit("shop/repo/shop", "shop", 1, key("search"), members, now)
	if ok || pos != 2 || fmt.Sprint(flying) != "[shop/cart]" {
		t.Fatalf("search with cart in flight: ok %v position %d flying %v, want queued second behind web", ok, pos, flying)
	}
	// cart is done: one place, web waited first.
	members[0].InFlight = false
	if ok, pos, _ := l.Admit("shop/repo/shop", "shop", 1, key("search"), members, now); ok || pos != 2 {
		t.Fatalf("search: ok %v position %d, want still behind web", ok, pos)
	}
	if ok, pos, _ := l.Admit("shop/repo/shop", "shop", 1, key("web"), members, now); !ok || pos != 1 {
		t.Fatalf("web: ok %v position %d, want the place", ok, pos)
	}
	// web's place counts before the cache shows web in flight.
	members[2].Queue = nil
	if ok, pos, flying := l.Admit("shop/repo/shop", "shop", 1, key("search"), members, now); ok || pos != 1 || fmt.Sprint(flying) != "[shop/web]" {
		t.Fatalf("search after web was given the place: ok %v position %d flying %v", ok, pos, flying)
	}
	// ... until its reservation expires without web ever starting.
	if ok, _, _ := l.Admit("shop/repo/shop", "shop", 1, key("search"), members, now.Add(ReservationTTL+time.Second)); !ok {
		t.Fatal("search: the place reserved for web never came back")
	}
	// A new comer without a queue entry goes after those waiting; search,
	// given its place, counts as in flight and no longer waits.
	later := now.Add(ReservationTTL + 2*time.Second)
	ok, pos, flying = l.Admit("shop/repo/shop", "shop", 2, key("new"), append(members, member("x", false, t0.Add(3*time.Second))), later)
	if ok || pos != 2 || fmt.Sprint(flying) != "[shop/search]" {
		t.Fatalf("a new comer: ok %v position %d flying %v, want second behind x with search in flight", ok, pos, flying)
	}
}

// Rollouts asking at once never get more places than the budget has.
func TestBudgetLedgerNeverGivesMorePlacesThanItHas(t *testing.T) {
	var l Ledger
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	var members []Member
	for i := range 50 {
		members = append(members, member(fmt.Sprintf("app-%02d", i), false, time.Time{}))
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	given := 0
	for _, m := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if ok, _, _ := l.Admit("shop/repo/shop", "shop", 3, m.Key, members, now); ok {
				mu.Lock()
				given++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if given != 3 {
		t.Fatalf("%d places given by a budget of 3 to 50 Rollouts asking at once", given)
	}
	l.Release("shop/repo/shop", members[0].Key)
}
