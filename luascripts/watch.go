package luascripts

import (
	"context"
	"errors"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

var (
	errTimeLimit = errors.New("time limit")
	errHeapLimit = errors.New("heap limit")
)

// heapSampleEvery is how often a run's heap and clock are sampled.
const heapSampleEvery = 5 * time.Millisecond

// parentCheckEvery is how many Lua instructions run between two looks at
// the caller's context (a power of two).
const parentCheckEvery = 256

// watch is the context of one run's Lua state. gopher-lua calls Done
// before every instruction, on the goroutine running the script, so a
// stop takes effect at the next instruction; the run itself is never
// abandoned and nothing of it keeps running once the caller has its
// answer. It stops the run:
//
//   - when the caller's context ends (looked at every parentCheckEvery
//     instructions);
//   - at the time limit, and when the heap grew by more than the limit
//     (see heapGrew): a timer samples the clock and the process heap
//     every heapSampleEvery while the run lasts (its first heap sample is
//     the base), so a run shorter than that costs one timer and no
//     sample.
//
// A library call that is running (a pattern match) finishes first; the
// sandbox bounds those calls (string sizes, pattern steps, result values).
type watch struct {
	parent   context.Context
	deadline time.Time
	limit    uint64
	timer    *time.Timer
	n        uint32

	stopped atomic.Bool
	mu      sync.Mutex
	cause   error
	done    chan struct{}
	ended   bool

	// Only the timer's goroutine touches these.
	sample                            []metrics.Sample
	baseLive, baseObjects, baseCycles uint64 // at the first sample
}

// startWatch starts watching a run for the caller's ctx and lim.
func startWatch(ctx context.Context, lim Limits) *watch {
	w := &watch{parent: ctx, deadline: time.Now().Add(lim.Time), limit: lim.HeapGrowthBytes}
	// tick resets the timer under mu: it may run before AfterFunc returns.
	w.mu.Lock()
	w.timer = time.AfterFunc(min(heapSampleEvery, lim.Time), w.tick)
	w.mu.Unlock()
	return w
}

// tick samples the clock and the heap; it runs on the timer's goroutine.
func (w *watch) tick() {
	if w.stopped.Load() {
		return
	}
	now := time.Now()
	if !now.Before(w.deadline) {
		w.stop(errTimeLimit)
		return
	}
	if w.heapGrew() {
		w.stop(errHeapLimit)
		return
	}
	w.mu.Lock()
	if !w.ended {
		w.timer.Reset(min(heapSampleEvery, w.deadline.Sub(now)))
	}
	w.mu.Unlock()
}

// The heap metrics a watch reads.
const (
	heapObjects = iota // live and not yet swept dead objects
	heapLive           // live objects, as of the last finished GC
	heapGoal           // the size at which the GC aims to finish
	gcCycles           // GC cycles finished
)

// heapGrew compares the process heap with its first sample (the base).
// Garbage does not count: a loop that drops what it allocates (every Lua
// number beyond a small few is a Go allocation) raises the heap's
// objects until the next GC, as far as the GC's goal, which in a large
// heap is far more than the limit. Memory the run keeps does: the heap
// grew when the live heap measured by a GC that finished during the run
// grew by more than the limit, or when the heap outran the GC, its
// objects over the goal (and over the base) by more than the limit (one
// huge string, before a GC can finish).
func (w *watch) heapGrew() bool {
	if w.sample == nil {
		w.sample = []metrics.Sample{
			heapObjects: {Name: "/memory/classes/heap/objects:bytes"},
			heapLive:    {Name: "/gc/heap/live:bytes"},
			heapGoal:    {Name: "/gc/heap/goal:bytes"},
			gcCycles:    {Name: "/gc/cycles/total:gc-cycles"},
		}
		metrics.Read(w.sample)
		w.baseLive, w.baseObjects, w.baseCycles = w.value(heapLive), w.value(heapObjects), w.value(gcCycles)
		return false
	}
	metrics.Read(w.sample)
	objects, goal := w.value(heapObjects), w.value(heapGoal)
	// A GC that was under way at the base sample counts what was
	// allocated before the run as live: only one that started after it,
	// so finished as the second after the base, measures the run.
	if w.value(gcCycles) >= w.baseCycles+2 && over(w.value(heapLive), w.baseLive, w.limit) {
		return true
	}
	return goal > 0 && over(objects, goal, w.limit) && over(objects, w.baseObjects, w.limit)
}

// value is one sampled metric, 0 when this Go runtime lacks it.
func (w *watch) value(i int) uint64 {
	if w.sample[i].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return w.sample[i].Value.Uint64()
}

// over reports whether now exceeds base by more than limit.
func over(now, base, limit uint64) bool {
	return now > base && now-base > limit
}

// stop ends the run at its next instruction with cause, unless it has
// ended already.
func (w *watch) stop(cause error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended || w.cause != nil {
		return
	}
	w.cause = cause
	w.done = make(chan struct{})
	close(w.done)
	w.stopped.Store(true)
}

// finish ends the watch and returns why the run was stopped (nil if it
// was not).
func (w *watch) finish() error {
	w.mu.Lock()
	w.ended = true
	cause := w.cause
	w.mu.Unlock()
	w.timer.Stop()
	return cause
}

// Done is called by the Lua VM before every instruction: a closed channel
// stops the run, nil lets it go on.
func (w *watch) Done() <-chan struct{} {
	if w.stopped.Load() {
		return w.done
	}
	w.n++
	if w.n%parentCheckEvery == 0 {
		if err := w.parent.Err(); err != nil {
			w.stop(err)
			if w.stopped.Load() {
				return w.done
			}
		}
	}
	return nil
}

// Err is the reason of a stop, which the VM raises as the script's error.
func (w *watch) Err() error {
	if !w.stopped.Load() {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cause
}

// Deadline is the time limit.
func (w *watch) Deadline() (time.Time, bool) { return w.deadline, true }

// Value is the caller's context's value.
func (w *watch) Value(key any) any { return w.parent.Value(key) }
