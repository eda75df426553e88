package luascripts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	lua "github.com/yuin/gopher-lua"
)

// Limits bound one script run. Zero fields take the defaults of
// DefaultLimits. See the README for what is and is not bounded.
type Limits struct {
	// Time is the wall-clock limit of one run. The Lua VM stops at the
	// first instruction after it; a library function that is already
	// running (a pattern match, bounded by PatternSteps) finishes first.
	Time time.Duration
	// MaxStringBytes caps every string built by string.rep, string.format,
	// string.gsub and table.concat, and the total print output.
	MaxStringBytes int
	// HeapGrowthBytes stops a run once the live Go heap has grown by this
	// many bytes since the run's first heap sample (taken after a few
	// milliseconds, so short runs are never sampled), or the heap outran
	// the garbage collector's goal by as much; garbage does not count
	// (see watch.heapGrew). The measure is process-wide: memory other
	// goroutines keep counts too.
	HeapGrowthBytes uint64
	// CallStackSize is the deepest Lua call nesting allowed.
	CallStackSize int
	// RegistrySlots caps the Lua value stack (locals, arguments, results).
	RegistrySlots int
	// PatternSteps caps the estimated backtracking work of one Lua pattern
	// match (string.find, match, gmatch, gsub): a pattern whose worst case
	// on its subject exceeds it is refused before it runs.
	PatternSteps float64
	// ResultValues caps the number of values in a script's result.
	ResultValues int
}

// DefaultLimits returns the limits used for zero fields of Limits: 1s,
// 1 MiB strings, 64 MiB heap growth, 200 nested calls, 64k stack slots,
// 1e7 pattern steps and 200k result values.
func DefaultLimits() Limits {
	return Limits{
		Time:            time.Second,
		MaxStringBytes:  1 << 20,
		HeapGrowthBytes: 64 << 20,
		CallStackSize:   200,
		RegistrySlots:   64 * 1024,
		PatternSteps:    1e7,
		ResultValues:    200_000,
	}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.Time > 0 {
		d.Time = l.Time
	}
	if l.MaxStringBytes > 0 {
		d.MaxStringBytes = l.MaxStringBytes
	}
	if l.HeapGrowthBytes > 0 {
		d.HeapGrowthBytes = l.HeapGrowthBytes
	}
	if l.CallStackSize > 0 {
		d.CallStackSize = l.CallStackSize
	}
	if l.RegistrySlots > 0 {
		d.RegistrySlots = l.RegistrySlots
	}
	if l.PatternSteps > 0 {
		d.PatternSteps = l.PatternSteps
	}
	if l.ResultValues > 0 {
		d.ResultValues = l.ResultValues
	}
	return d
}

// Runner runs scripts in the sandbox. The zero value is ready to use with
// DefaultLimits. Runs never see each other and may happen concurrently:
// every run gets a fresh Lua state, or with Pool a pooled one reset to
// what it was when it was built.
type Runner struct {
	// Limits of each run.
	Limits Limits
	// Pool, when set, lends prepared states (see Pool); nil builds one per
	// run.
	Pool *Pool
	// Print receives what scripts print(), one line per call, after the run
	// ends. Nil discards it.
	Print io.Writer
	// Observe, when set, is told about every run (metrics). Nil observes
	// nothing.
	Observe ObserveFunc
	// Memo, when set, answers an Ingress script's repeated question
	// without a run (see Memo). Nil runs the script every time.
	Memo *Memo
}

// ObserveFunc receives the script of one run, how long the run took and
// its error (nil on success, else the *ScriptError the run returned). It
// must return quickly.
type ObserveFunc func(s Script, d time.Duration, err error)

// decodeFunc turns a script's return value into the Go result.
type decodeFunc func(d *decoder, ret lua.LValue) (any, error)

// encodeFunc builds the obj global.
type encodeFunc func(e *encoder) (lua.LValue, error)

type outcome struct {
	value  any
	prints []byte
	err    error
}

// run executes s with the global obj built by encode and decodes its
// return value, on the caller's goroutine. It always returns a
// *ScriptError on failure.
func (r Runner) run(ctx context.Context, s Script, encode encodeFunc, decode decodeFunc) (v any, err error) {
	if r.Observe != nil {
		start := time.Now()
		defer func() { r.Observe(s, time.Since(start), err) }()
	}
	if s.proto == nil {
		return nil, scriptErr(s.Name, ErrCompile, 0, "script is not compiled: build it with NewScript or a Library")
	}
	if err := ctx.Err(); err != nil {
		return nil, &ScriptError{Script: s.Name, Kind: err, Reason: "stopped: " + err.Error()}
	}
	lim := r.Limits.withDefaults()
	state := r.Pool.get(lim)
	w := startWatch(ctx, lim)
	o := execute(w, state, s, encode, decode)
	stopped := w.finish()
	// The state goes back (reset) before the result is handed over: the
	// caller's next run finds it in the pool.
	if o.err == nil && stopped == nil {
		r.Pool.put(state)
	} else {
		state.L.Close()
	}
	if r.Print != nil && len(o.prints) > 0 {
		_, _ = r.Print.Write(o.prints)
	}
	if o.err != nil {
		return nil, classify(s.Name, o.err, ctx, stopped, lim)
	}
	return o.value, nil
}

// execute runs one script in the state of v under w; while it runs it is
// the only code that touches that state.
func execute(w *watch, v *vm, s Script, encode encodeFunc, decode decodeFunc) (o outcome) {
	defer func() {
		if p := recover(); p != nil {
			o = outcome{err: scriptErr(s.Name, ErrRuntime, 0, "internal error: %v", p)}
		}
	}()
	L, sb, lim := v.L, v.sb, v.lim
	e := &encoder{L: L, m: sb.marks, keys: sb.keys[:0]}
	obj, err := encode(e)
	sb.keys = e.keys[:0]
	if err != nil {
		return outcome{err: scriptErr(s.Name, ErrInput, 0, "%v", err)}
	}
	L.SetGlobal("obj", obj)
	L.SetContext(w)
	L.Push(L.NewFunctionFromProto(s.proto))
	if err := L.PCall(0, 1, nil); err != nil {
		L.RemoveContext()
		return outcome{prints: sb.printed(), err: err}
	}
	L.RemoveContext()
	val, err := decode(newDecoder(sb.marks, lim.ResultValues), L.Get(-1))
	if err != nil {
		kind := ErrResult
		if errors.Is(err, ErrLimit) {
			kind = ErrLimit
		}
		return outcome{prints: sb.printed(), err: scriptErr(s.Name, kind, 0, "result: %v", err)}
	}
	return outcome{value: val, prints: sb.printed()}
}

// classify maps a failed run to a *ScriptError of the right kind.
func classify(name string, err error, parent context.Context, cause error, lim Limits) error {
	var se *ScriptError
	if errors.As(err, &se) {
		return se
	}
	switch {
	case errors.Is(cause, errHeapLimit):
		out := runtimeError(name, ErrLimit, err)
		out.Reason = fmt.Sprintf("heap grew by more than %d bytes", lim.HeapGrowthBytes)
		return out
	case errors.Is(cause, errTimeLimit):
		out := runtimeError(name, ErrTimeout, err)
		out.Reason = fmt.Sprintf("time limit of %s exceeded", lim.Time)
		return out
	case parent.Err() != nil:
		out := runtimeError(name, parent.Err(), err)
		out.Reason = "stopped: " + parent.Err().Error()
		return out
	}
	out := runtimeError(name, ErrRuntime, err)
	if isResourceError(out.Reason) {
		out.Kind = ErrLimit
	}
	return out
}

// isResourceError reports messages of the guards and of gopher-lua's own
// stack limits.
func isResourceError(msg string) bool {
	for _, s := range []string{limitPhrase, "stack overflow", "registry overflow", "callstack overflow"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
