package rollout

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// countsEvery is how often, at most, a Rollout's status is written for its
// pod counts alone (replicas, stableReplicas, stableReadyReplicas,
// canaryReplicas, canaryReadyReplicas). Every pod created, ready or gone
// changes a count: written each time, they were most of a release's API
// writes (at 4 replicas, 9 of 22 status patches). A change of anything
// else (step, state, phase, traffic, a condition) is written at once, with
// the counts of that moment; counts alone wait until countsEvery has passed
// since the last write, and the reconcile is requeued for then. The
// planner never reads the counts back, so a restart cannot act on them.
// At 2 s, counts alone were still 6 of a release's 17 status patches (P5,
// 4 replicas): pods become ready a few seconds apart. At 10 s they are 2,
// and a step's move, which comes within 10 s of its pods, carries the rest.
const countsEvery = 10 * time.Second

// countsSettle is how long counts must have stayed as they are before they
// are written alone, and countsLatest how long after they first differed
// from the written ones they are written all the same. A count that just
// changed is often followed within a second by a move it made possible
// (the new pod created, then ready, then the step): in P5 at N=200, 1.3
// of a Rollout's 4.7 writes of counts alone came less than a second
// before a write of the next step, which carried the same counts.
const (
	countsSettle = 2 * time.Second
	countsLatest = 20 * time.Second
)

// statusPatcher writes a Rollout's finalizers and status, each only when
// changed since the last write. The status (conditions included) goes in
// one merge patch, so a reader never sees a phase without the conditions
// that explain it: the planner reads a failed release's reason back from
// the Stalled condition.
type statusPatcher struct {
	c      client.Client
	before *v1alpha1.Rollout
	// now is the reconcile's time; lastWrite when the status was last
	// written by this process (zero: not yet, or before a restart).
	now, lastWrite time.Time
	// seen are the pod counts the reconciles observed last, since when,
	// and since when they differ from the written ones.
	seen seenCounts
	// countsDue, when set, is when the counts held back are to be written.
	countsDue time.Time
	// finalizersOnly, set by a reconcile that only adds the finalizer,
	// leaves the status to the next reconcile (requeued at once), which
	// writes it with what it observed: written here too, it would be a
	// second write of a Rollout rollgate has not looked at yet.
	finalizersOnly bool
}

func newStatusPatcher(c client.Client, ro *v1alpha1.Rollout, now time.Time, last statusRecord) *statusPatcher {
	return &statusPatcher{c: c, before: ro.DeepCopy(), now: now, lastWrite: last.wrote, seen: last.seen}
}

// record is what the next reconcile's patcher needs of this one.
func (p *statusPatcher) record() statusRecord {
	return statusRecord{wrote: p.lastWrite, seen: p.seen}
}

// patch writes what changed; observedGeneration records the generation this
// reconcile acted on.
func (p *statusPatcher) patch(ctx context.Context, ro *v1alpha1.Rollout) error {
	if !equality.Semantic.DeepEqual(p.before.Finalizers, ro.Finalizers) {
		// A merge patch replaces the whole list: the optimistic lock
		// keeps it from dropping a finalizer someone else added since
		// this reconcile read the Rollout (a conflict is retried).
		base := p.before.DeepCopy()
		status := ro.Status.DeepCopy()
		if err := p.c.Patch(ctx, ro, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
			return err
		}
		// The answer carries the stored status: keep this reconcile's, and
		// base the status patch on the metadata just written (the answer's
		// managedFields, which the cache strips, included: compared with
		// the cached object's none, the status patch would send them all).
		ro.Status = *status
		p.before.ObjectMeta = *ro.ObjectMeta.DeepCopy()
		if p.finalizersOnly {
			return nil
		}
	}
	ro.Status.ObservedGeneration = ro.Generation
	p.countsDue = time.Time{}
	if c := countsOf(&ro.Status); c != p.seen.counts || p.seen.since.IsZero() {
		p.seen.counts, p.seen.since = c, p.now
	}
	switch unwritten := p.seen.counts != countsOf(&p.before.Status); {
	case !unwritten:
		p.seen.pending = time.Time{}
	case p.seen.pending.IsZero():
		p.seen.pending = p.now
	}
	if equality.Semantic.DeepEqual(p.before.Status, ro.Status) {
		return nil
	}
	if due := p.countsWriteDue(); onlyCounts(&p.before.Status, &ro.Status) && p.now.Before(due) {
		p.countsDue = due
		return nil
	}
	// Optimistic lock: the status is derived from what this reconcile
	// read; written over a newer object it could undo a step.
	patch := client.MergeFromWithOptions(p.before.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if err := p.c.Status().Patch(ctx, ro, patch, client.FieldOwner("rollgate")); err != nil {
		return err
	}
	p.before, p.lastWrite, p.seen.pending = ro.DeepCopy(), p.now, time.Time{}
	return nil
}

// countsWriteDue is when counts alone may be written: countsEvery after the
// last write, once they have settled for countsSettle, and countsLatest
// after they first differed from the written ones at the latest.
func (p *statusPatcher) countsWriteDue() time.Time {
	due := p.lastWrite.Add(countsEvery)
	if settled := p.seen.since.Add(countsSettle); settled.After(due) {
		due = settled
	}
	if latest := p.seen.pending.Add(countsLatest); due.After(latest) {
		due = latest
	}
	return due
}

// podCounts are a status's five pod counts.
type podCounts [5]int32

func countsOf(s *v1alpha1.RolloutStatus) podCounts {
	return podCounts{s.Replicas, s.StableReplicas, s.StableReadyReplicas, s.CanaryReplicas, s.CanaryReadyReplicas}
}

// seenCounts are pod counts observed, since when they have been so, and
// since when the observed counts differ from the written ones (zero: they
// do not).
type seenCounts struct {
	counts  podCounts
	since   time.Time
	pending time.Time
}

// onlyCounts reports whether two statuses differ in their pod counts alone.
func onlyCounts(a, b *v1alpha1.RolloutStatus) bool {
	x, y := *a, *b
	for _, s := range []*v1alpha1.RolloutStatus{&x, &y} {
		s.Replicas, s.StableReplicas, s.StableReadyReplicas, s.CanaryReplicas, s.CanaryReadyReplicas = 0, 0, 0, 0, 0
	}
	return equality.Semantic.DeepEqual(x, y)
}

// statusRecord is when a Rollout's status was last written and the pod
// counts its reconciles saw last.
type statusRecord struct {
	wrote time.Time
	seen  seenCounts
}

// statusWrites remembers each Rollout's statusRecord, for countsEvery and
// countsSettle: one entry per Rollout, dropped when it is deleted. The
// zero value is ready to use.
type statusWrites struct {
	mu sync.Mutex
	at map[types.NamespacedName]statusRecord
}

func (w *statusWrites) last(key types.NamespacedName) statusRecord {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.at[key]
}

func (w *statusWrites) set(key types.NamespacedName, rec statusRecord) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.at == nil {
		w.at = map[types.NamespacedName]statusRecord{}
	}
	w.at[key] = rec
}

// forget drops a deleted Rollout.
func (w *statusWrites) forget(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.at, key)
}
