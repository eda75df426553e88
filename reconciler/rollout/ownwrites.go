package rollout

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// cacheLagPoll is how soon a reconcile that read a Rollout older than this
// controller's last write of it is tried again.
const cacheLagPoll = 100 * time.Millisecond

// ownWrites remembers, per Rollout, the resource versions that the last
// reconcile's writes replaced. A reconcile that reads one of them from the
// cache, which has not shown the last write yet, would plan from an older
// status: act on the traffic or the pods of a state the release has left,
// then have its status patch refused by the optimistic lock. It waits for
// the cache instead. In a wave of releases the watch events of a release
// in motion come right after its last reconcile (priorityInMotion), often
// before the cache has caught up. The zero value is ready to use.
type ownWrites struct {
	mu       sync.Mutex
	replaced map[types.NamespacedName]map[string]struct{}
}

// wrote records that a reconcile of key replaced the versions of the
// Rollout it read or wrote before its last write.
func (w *ownWrites) wrote(key types.NamespacedName, versions []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.replaced == nil {
		w.replaced = map[types.NamespacedName]map[string]struct{}{}
	}
	set := make(map[string]struct{}, len(versions))
	for _, v := range versions {
		set[v] = struct{}{}
	}
	w.replaced[key] = set
}

// behind reports whether version of key is one that its last reconcile
// replaced. Any other version (the last write, or a newer one of someone
// else) means the cache caught up: key is forgotten.
func (w *ownWrites) behind(key types.NamespacedName, version string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	set, ok := w.replaced[key]
	if !ok {
		return false
	}
	if _, old := set[version]; old {
		return true
	}
	delete(w.replaced, key)
	return false
}

// forget drops a deleted Rollout.
func (w *ownWrites) forget(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.replaced, key)
}
