package luascripts

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Built-in scripts written in Go.
//
// The Istio VirtualService and DestinationRule built-ins also exist as Go
// functions (native_istio.go), which a run of the built-in uses instead of
// the Lua script: same input (CustomInput), same output (ObjectData), same
// errors, six to seven times less CPU (docs/benchmarks-history.md, P4,
// round 2). The Lua script stays the reference:
//
//   - A ConfigMap override never has a Go implementation: Library.Resolve
//     returns the compiled override, which always wins, as before.
//   - The Go function handles the objects the built-in is written for
//     (http, tls and tcp lists of route objects, destinations with a host
//     and a number weight, Istio string matches of strings, ...). On
//     anything else (a field of another type, a value the Lua round trip
//     would refuse, two header names equal but for case, a Lua error with
//     a line number) it returns errFallback before producing anything, and
//     the run goes to the Lua script, which gives exactly what it always
//     gave. Errors the script raises on purpose (error(msg, 0)) come from
//     the Go function with the same text.
//   - Every golden case runs both (RunCases compares them), and
//     TestNativeMatchesLua feeds generated objects to both.
//
// A Go function works on a copy of the input made by normalizer, which
// gives every value the type the Lua round trip gives it back (numbers as
// int64 when integral, else float64; nil map values dropped; []string as
// []any), so an untouched part of the object comes back exactly as from
// the Lua script. The sandbox's limits do not apply to Go code; where the
// Lua run would hit one that depends on the object alone (a result of
// more than Limits.ResultValues values, a string.format result over
// Limits.MaxStringBytes) the Go code falls back, and so it does for
// objects of more than a quarter of Limits.ResultValues values, whose Lua
// run could come near the time or heap limits.

// nativeFunc is a built-in script in Go. spec is the normalized copy of
// in.Data.Spec (an empty map when it is nil), which it may change and
// return.
type nativeFunc func(run *nativeRun, in CustomInput, spec map[string]any) (map[string]any, error)

// nativeRun is what a Go implementation needs of its run.
type nativeRun struct {
	script Script
	lim    Limits
}

// fail is error(string.format(format, args...), 0) in the script: an
// ErrRuntime error without a line. It falls back where string.format
// would refuse the message.
func (r *nativeRun) fail(format string, args ...any) error {
	msg, err := r.format(format, args...)
	if err != nil {
		return err
	}
	return scriptErr(r.script.Name, ErrRuntime, 0, "%s", msg)
}

// format is the script's string.format for %s, %d and %q (which it
// formats as Go does): errFallback where the sandbox's guard would refuse
// it (see formatSize).
func (r *nativeRun) format(format string, args ...any) (string, error) {
	size := int64(len(format))
	for _, a := range args {
		if s, ok := a.(string); ok {
			size += 4 * int64(len(s))
		} else {
			size += 32
		}
	}
	if size > int64(r.lim.MaxStringBytes) {
		return "", errFallback
	}
	return fmt.Sprintf(format, args...), nil
}

// errFallback: the Go function does not handle this input; run the Lua
// script.
var errFallback = errors.New("run the Lua script")

// nativeFor returns the Go implementation of a built-in key, or nil.
func nativeFor(key string) nativeFunc {
	switch key {
	case CustomKey("VirtualService", "networking.istio.io"):
		return istioVirtualService
	case CustomKey("DestinationRule", "networking.istio.io"):
		return istioDestinationRule
	}
	return nil
}

// Implementation says what runs for s: "Go" for a built-in with a Go
// implementation (the Lua script then runs only for inputs the Go code
// leaves to it), else "Lua".
func (s Script) Implementation() string {
	if s.native != nil {
		return "Go"
	}
	return "Lua"
}

// luaOnly returns s without its Go implementation.
func (s Script) luaOnly() Script {
	s.native = nil
	return s
}

// runNative runs the Go implementation of s. It returns errFallback when
// the Lua script must run instead; a panic becomes an ErrRuntime error.
func (r Runner) runNative(ctx context.Context, s Script, in CustomInput) (out ObjectData, err error) {
	if ctx.Err() != nil {
		return ObjectData{}, errFallback // the Lua path reports it
	}
	if r.Observe != nil {
		start := time.Now()
		defer func() {
			if err != errFallback {
				r.Observe(s, time.Since(start), err)
			}
		}()
	}
	return callNative(s, in, r.Limits.withDefaults())
}

// callNative calls s.native on a normalized copy of in.Data.Spec.
func callNative(s Script, in CustomInput, lim Limits) (out ObjectData, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, err = ObjectData{}, scriptErr(s.Name, ErrRuntime, 0,
				"internal error of the Go implementation (report it; a ConfigMap copy of the Lua script avoids it): %v", p)
		}
	}()
	n := normalizer{budget: lim.ResultValues / 4}
	spec := map[string]any{}
	if in.Data.Spec != nil {
		if spec = n.object(in.Data.Spec, 2); n.fallback {
			return ObjectData{}, errFallback
		}
	}
	spec, err = s.native(&nativeRun{script: s, lim: lim}, in, spec)
	if err != nil {
		return ObjectData{}, err
	}
	if mayExceed(in, lim.ResultValues/4-n.budget, lim.ResultValues) && countValues(spec) > lim.ResultValues {
		return ObjectData{}, errFallback // the Lua result would be refused
	}
	return ObjectData{Spec: spec, Labels: in.Data.Labels, Annotations: in.Data.Annotations}, nil
}

// normalizer deep-copies a spec as the Lua round trip (encoder, untouched
// by the script, decoder) gives it back. Anything the round trip would
// refuse or change in another way (types it cannot convert, NaN, nesting
// beyond maxDepth, more than budget values) sets fallback.
type normalizer struct {
	budget   int
	fallback bool
}

// object copies a map at the encoder's depth.
func (n *normalizer) object(m map[string]any, depth int) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if v == nil {
			continue
		}
		out[k] = n.value(v, depth+1)
		if n.fallback {
			return nil
		}
	}
	return out
}

func (n *normalizer) value(v any, depth int) any {
	n.budget--
	if depth > maxDepth || n.budget < 0 {
		n.fallback = true
		return nil
	}
	switch x := v.(type) {
	case nil, string, bool:
		return x
	case int:
		return n.number(float64(x))
	case int32:
		return n.number(float64(x))
	case int64:
		return n.number(float64(x))
	case float64:
		return n.number(x)
	case map[string]any:
		return n.object(x, depth)
	case map[string]string:
		out := make(map[string]any, len(x))
		for k, s := range x {
			out[k] = s
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, item := range x {
			if out[i] = n.value(item, depth+1); n.fallback {
				return nil
			}
		}
		return out
	case []string:
		out := make([]any, len(x))
		for i, s := range x {
			out[i] = s
		}
		return out
	}
	n.fallback = true
	return nil
}

func (n *normalizer) number(f float64) any {
	v, err := decodeNumber(f)
	if err != nil {
		n.fallback = true
	}
	return v
}

// luaNumber is the value a Lua number decodes to, or errFallback for NaN
// and infinities (the Lua script's result would be refused).
func luaNumber(f float64) (any, error) {
	v, err := decodeNumber(f)
	if err != nil {
		return nil, errFallback
	}
	return v, nil
}

// mayExceed reports whether the result of a step on an object of
// inputValues values may hold more than limit values. Without matches a
// built-in adds to each of at most inputValues destinations or subsets a
// copy of it and at most 8 values plus the header modifier's entries;
// with matches the result can grow with the product of route and step
// matches, so it is counted.
func mayExceed(in CustomInput, inputValues, limit int) bool {
	if len(in.Matches) > 0 {
		return true
	}
	perValue := 10
	if m := in.RequestHeaderModifier; m != nil {
		perValue += len(m.Set) + len(m.Add) + len(m.Remove)
	}
	return inputValues*perValue > limit
}

// countValues counts the values of a result as the decoder does: v and
// everything in it.
func countValues(v any) int {
	n := 1
	switch x := v.(type) {
	case map[string]any:
		for _, item := range x {
			n += countValues(item)
		}
	case []any:
		for _, item := range x {
			n += countValues(item)
		}
	}
	return n
}

// deepCopy copies a normalized value, as rollgate.copy does.
func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, item := range x {
			out[k] = deepCopy(item)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, item := range x {
			out[i] = deepCopy(item)
		}
		return out
	}
	return v
}

// Readers of normalized values that mirror what the scripts accept
// without falling back: an absent field, or one of the expected type.

// optObject returns m[key] as an object: nil and true when absent; false
// when it holds something else.
func optObject(m map[string]any, key string) (map[string]any, bool) {
	v, ok := m[key]
	if !ok {
		return nil, true
	}
	o, ok := v.(map[string]any)
	return o, ok
}

// optList returns m[key] as a list, like optObject.
func optList(m map[string]any, key string) ([]any, bool) {
	v, ok := m[key]
	if !ok {
		return nil, true
	}
	l, ok := v.([]any)
	return l, ok
}

// objectOrNew returns m[key] as an object, stored as a new one when
// absent (the scripts' "m.key = m.key or rollgate.object()").
func objectOrNew(m map[string]any, key string) (map[string]any, error) {
	o, ok := optObject(m, key)
	if !ok {
		return nil, errFallback
	}
	if o == nil {
		o = map[string]any{}
		m[key] = o
	}
	return o, nil
}

// describeNative is the line RunCases prints for a script: its name and,
// for a built-in with a Go implementation, that both ran.
func describeNative(s Script) string {
	if s.native != nil {
		return fmt.Sprintf("%s, Go and Lua", s.Name)
	}
	return s.Name
}
