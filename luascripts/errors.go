package luascripts

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// Sentinel errors. A *ScriptError wraps exactly one of them, so callers can
// decide with errors.Is what to tell the user; in every case the resource the
// script was meant to change must be left untouched.
var (
	// ErrNoScript: no ConfigMap key and no built-in script exists for a
	// resource. The error text names the ConfigMap key to add.
	ErrNoScript = errors.New("no Lua script")
	// ErrCompile: the script does not parse.
	ErrCompile = errors.New("lua syntax error")
	// ErrRuntime: the script raised an error (including error() calls and
	// calls to functions the sandbox does not offer).
	ErrRuntime = errors.New("lua runtime error")
	// ErrTimeout: the script ran longer than Limits.Time.
	ErrTimeout = errors.New("lua time limit exceeded")
	// ErrLimit: the script went over a resource limit other than time:
	// heap growth, string size, pattern complexity, call depth, value
	// stack, result size.
	ErrLimit = errors.New("lua resource limit exceeded")
	// ErrResult: the script returned something that is not the documented
	// result (not a table, a table mixing array and object keys, a
	// non-string label, ...).
	ErrResult = errors.New("invalid lua result")
	// ErrMisroute: the script's result would send to the canary requests
	// that match none of the step's conditions, beyond the step's weight
	// (see the routing guard in guard.go). Nothing is written.
	ErrMisroute = errors.New("lua result routes requests outside the step to the canary")
	// ErrInput: the Go input could not be turned into Lua values, or the
	// step is invalid (for example traffic "150%").
	ErrInput = errors.New("invalid lua input")
)

// ScriptError is the error returned for anything that goes wrong while
// compiling or running a script. Its text has the form
//
//	lua script "built-in VirtualService.networking.istio.io": line 12: attempt to index a nil value
//
// Line is 0 when no line applies (time limit hit inside a library function,
// invalid result).
type ScriptError struct {
	// Script is the script's name (Script.Name).
	Script string
	// Line is the 1-based source line, or 0.
	Line int
	// Reason is the message without the script name and line.
	Reason string
	// Kind is one of the sentinel errors of this package, or the caller's
	// context error (context.Canceled, context.DeadlineExceeded) when the
	// caller stopped the run.
	Kind error
	// Traceback is the Lua stack traceback, when one exists.
	Traceback string
}

// Error implements error.
func (e *ScriptError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("lua script %q: line %d: %s", e.Script, e.Line, e.Reason)
	}
	return fmt.Sprintf("lua script %q: %s", e.Script, e.Reason)
}

// Unwrap returns the sentinel kind.
func (e *ScriptError) Unwrap() error { return e.Kind }

func scriptErr(name string, kind error, line int, format string, args ...any) *ScriptError {
	return &ScriptError{Script: name, Line: line, Kind: kind, Reason: fmt.Sprintf(format, args...)}
}

// compileError turns a gopher-lua parse or compile error into a ScriptError.
func compileError(name string, err error) *ScriptError {
	var pe *parse.Error
	if errors.As(err, &pe) {
		reason := strings.TrimSpace(pe.Message)
		if pe.Token != "" {
			reason = fmt.Sprintf("%s near %q", reason, pe.Token)
		}
		line := pe.Pos.Line
		if line < 0 {
			line, reason = 0, reason+" at end of script"
		}
		return scriptErr(name, ErrCompile, line, "%s", reason)
	}
	var ce *lua.CompileError
	if errors.As(err, &ce) {
		return scriptErr(name, ErrCompile, ce.Line, "%s", ce.Message)
	}
	return scriptErr(name, ErrCompile, 0, "%v", err)
}

// runtimeError turns a gopher-lua runtime error into a ScriptError. kind is
// normally ErrRuntime; the caller passes ErrTimeout or ErrLimit when it
// knows the run was stopped for that reason.
func runtimeError(name string, kind error, err error) *ScriptError {
	var ae *lua.ApiError
	if !errors.As(err, &ae) {
		return scriptErr(name, kind, 0, "%v", err)
	}
	msg := ae.Object.String()
	if _, ok := ae.Object.(lua.LString); !ok {
		msg = fmt.Sprintf("error object of type %s: %s", ae.Object.Type(), msg)
	}
	line, msg := splitPosition(name, msg)
	out := scriptErr(name, kind, line, "%s", msg)
	out.Traceback = ae.StackTrace
	return out
}

// splitPosition removes the "<name>:<line>: " prefix gopher-lua puts in
// front of runtime error messages and returns the line.
func splitPosition(name, msg string) (int, string) {
	rest, ok := strings.CutPrefix(msg, name+":")
	if !ok {
		return 0, msg
	}
	digits, tail, ok := strings.Cut(rest, ":")
	line, err := strconv.Atoi(digits)
	if !ok || err != nil {
		return 0, msg
	}
	return line, strings.TrimPrefix(tail, " ")
}
