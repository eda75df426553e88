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
//   - at the time limit, and when the heap grew by more than the limit:
//     a timer samples the clock and the process heap every
//     heapSampleEvery while the run lasts (its first heap sample is the
//     base), so a run shorter than that costs one timer and no sample.
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
	over    bool

	// Only the timer's goroutine touches these.
	sample []metrics.Sample
	base   uint64
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
	if w.sample == nil {
		w.sample = []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		metrics.Read(w.sample)
		if w.sample[0].Value.Kind() != metrics.KindUint64 {
			return
		}
		w.base = w.sample[0].Value.Uint64()
	} else {
		metrics.Read(w.sample)
		if now := w.sample[0].Value.Uint64(); now > w.base && now-w.base > w.limit {
			w.stop(errHeapLimit)
			return
		}
	}
	w.mu.Lock()
	if !w.over {
		w.timer.Reset(min(heapSampleEvery, w.deadline.Sub(now)))
	}
	w.mu.Unlock()
}

// stop ends the run at its next instruction with cause, unless it has
// ended already.
func (w *watch) stop(cause error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.over || w.cause != nil {
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
	w.over = true
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
