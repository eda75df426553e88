package luascripts

import (
	"bytes"
	"errors"
	"slices"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// limitPhrase appears in every error raised by a guard, so such errors are
// reported as ErrLimit.
const limitPhrase = "sandbox limit"

// sandbox is the per-run environment: the marker tables, the print buffer
// and the limits the guards enforce.
type sandbox struct {
	marks     marks
	lim       Limits
	prints    bytes.Buffer
	truncated bool
	// keys is scratch space of the encoder, visiting of rollgate.copy,
	// both reused between runs.
	keys     []string
	visiting []*lua.LTable
}

// allowedGlobal lists what stays of the base library. Removed: dofile,
// loadfile, load, loadstring, require, module (code loading), print
// (replaced), collectgarbage (forces a GC of the whole controller),
// getfenv and setfenv (environment tampering), newproxy and _printregs
// (internals, _printregs writes to stdout). rawset and rawget stay: a
// state is fresh, or reset after a run (Pool), so a script can only
// change its own globals.
func allowedGlobal(name string) bool {
	switch name {
	case "assert", "error", "ipairs", "next", "pairs", "pcall", "rawequal",
		"rawget", "rawset", "select", "setmetatable", "getmetatable",
		"tonumber", "tostring", "type", "unpack", "xpcall", "_G", "_VERSION",
		"string", "table", "math", "json":
		return true
	}
	return false
}

// removedGlobal lists names a script may expect from standard Lua that the
// sandbox does not offer; reading one raises an error saying so.
func removedGlobal(name string) bool {
	switch name {
	case "os", "io", "package", "debug", "coroutine", "channel", "require",
		"dofile", "loadfile", "load", "loadstring", "module", "collectgarbage",
		"getfenv", "setfenv", "newproxy":
		return true
	}
	return false
}

// openSandbox opens base, table, string and math in L, removes what is not
// allowed, installs the guards, print and the rollgate helper table. No io,
// os, package, debug, coroutine or channel library is ever opened.
func openSandbox(L *lua.LState, lim Limits) *sandbox {
	sb := &sandbox{marks: newMarks(L), lim: lim}
	for _, open := range []lua.LGFunction{lua.OpenBase, lua.OpenTable, lua.OpenString, lua.OpenMath} {
		L.Push(L.NewFunction(open))
		L.Call(0, 0)
	}
	g := L.G.Global
	var drop []lua.LValue
	g.ForEach(func(k, _ lua.LValue) {
		if name, ok := k.(lua.LString); !ok || !allowedGlobal(string(name)) {
			drop = append(drop, k)
		}
	})
	for _, k := range drop {
		g.RawSet(k, lua.LNil)
	}
	mt := L.NewTable()
	mt.RawSetString("__index", L.NewFunction(func(L *lua.LState) int {
		if name, ok := L.Get(2).(lua.LString); ok && removedGlobal(string(name)) {
			L.RaiseError("%s is not available in the sandbox", string(name))
		}
		return 0
	}))
	g.Metatable = mt
	// math.random would make results differ between runs of the same step.
	math := g.RawGetString("math").(*lua.LTable)
	math.RawSetString("random", lua.LNil)
	math.RawSetString("randomseed", lua.LNil)
	sb.guardStrings(L, g.RawGetString("string").(*lua.LTable))
	sb.guardTable(L, g.RawGetString("table").(*lua.LTable))
	L.SetGlobal("print", L.NewFunction(sb.print))
	L.SetGlobal("rollgate", sb.helpers(L))
	L.SetGlobal("json", sb.jsonModule(L))
	return sb
}

// callOriginal calls fn with the current arguments and returns all its
// results.
func callOriginal(L *lua.LState, fn *lua.LFunction) int {
	top := L.GetTop()
	L.Push(fn)
	for i := 1; i <= top; i++ {
		L.Push(L.Get(i))
	}
	L.Call(top, lua.MultRet)
	return L.GetTop() - top
}

// wrap replaces mod[name] with a function that runs guard first.
func wrap(L *lua.LState, mod *lua.LTable, name string, guard func(L *lua.LState)) {
	orig, ok := mod.RawGetString(name).(*lua.LFunction)
	if !ok {
		return
	}
	mod.RawSetString(name, L.NewFunction(func(L *lua.LState) int {
		guard(L)
		return callOriginal(L, orig)
	}))
}

func (sb *sandbox) guardStrings(L *lua.LState, mod *lua.LTable) {
	mod.RawSetString("dump", lua.LNil)
	wrap(L, mod, "rep", func(L *lua.LState) {
		s, n := L.CheckString(1), L.CheckInt(2)
		if n > 0 && len(s) > 0 && int64(len(s))*int64(n) > int64(sb.lim.MaxStringBytes) {
			sb.raiseSize(L, "string.rep", int64(len(s))*int64(n))
		}
	})
	wrap(L, mod, "format", func(L *lua.LState) {
		if size := formatSize(L); size > int64(sb.lim.MaxStringBytes) {
			sb.raiseSize(L, "string.format", size)
		}
	})
	for _, name := range []string{"find", "match", "gmatch", "gfind"} {
		fn := "string." + name
		wrap(L, mod, name, func(L *lua.LState) {
			if fn == "string.find" && L.GetTop() >= 4 && lua.LVAsBool(L.Get(4)) {
				return // plain search, no pattern
			}
			sb.checkPattern(L, fn, L.CheckString(2), len(L.CheckString(1)))
		})
	}
	wrap(L, mod, "gsub", sb.guardGsub)
}

func (sb *sandbox) raiseSize(L *lua.LState, fn string, size int64) {
	L.RaiseError("%s: a result of %d bytes exceeds the %s of %d bytes per string",
		fn, size, limitPhrase, sb.lim.MaxStringBytes)
}

// formatSize bounds the length of string.format's result: the format, every
// argument's text (four times, for %q escapes) and every width and
// precision written in the format.
func formatSize(L *lua.LState) int64 {
	f := L.CheckString(1)
	size := int64(len(f))
	for i := 2; i <= L.GetTop(); i++ {
		if s, ok := L.Get(i).(lua.LString); ok {
			size += 4 * int64(len(s))
		} else {
			size += 32
		}
	}
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			continue
		}
		for i++; i < len(f) && strings.IndexByte("-+ #0", f[i]) >= 0; i++ {
		}
		for num := int64(0); i < len(f); i++ {
			c := f[i]
			if c == '.' {
				size, num = size+num, 0
				continue
			}
			if c < '0' || c > '9' {
				size += num
				break
			}
			num = min(num*10+int64(c-'0'), 1<<40)
		}
	}
	return size
}

// guardGsub checks the pattern and bounds the result: for a string
// replacement from the sizes alone, for a function or table replacement by
// counting what it returns.
func (sb *sandbox) guardGsub(L *lua.LState) {
	s, pat := L.CheckString(1), L.CheckString(2)
	sb.checkPattern(L, "string.gsub", pat, len(s))
	matches := int64(len(s) + 1)
	if L.GetTop() >= 4 {
		if n, ok := L.Get(4).(lua.LNumber); ok && n >= 0 && int64(n) < matches {
			matches = int64(n)
		}
	}
	switch repl := L.Get(3).(type) {
	case lua.LString:
		refs := int64(strings.Count(string(repl), "%"))
		size := int64(len(s)) + matches*(int64(len(repl))+20*refs) + refs*int64(len(s))
		if size > int64(sb.lim.MaxStringBytes) {
			sb.raiseSize(L, "string.gsub", size)
		}
	case *lua.LFunction:
		L.Replace(3, sb.countingRepl(L, func(L *lua.LState, args int) lua.LValue {
			L.Push(repl)
			for i := 1; i <= args; i++ {
				L.Push(L.Get(i))
			}
			L.Call(args, 1)
			return L.Get(-1)
		}, int64(len(s))))
	case *lua.LTable:
		L.Replace(3, sb.countingRepl(L, func(L *lua.LState, _ int) lua.LValue {
			return L.GetTable(repl, L.Get(1))
		}, int64(len(s))))
	}
}

// countingRepl wraps a gsub replacement and raises once the text it returns
// would make the result too long.
func (sb *sandbox) countingRepl(L *lua.LState, lookup func(*lua.LState, int) lua.LValue, base int64) *lua.LFunction {
	total := base
	return L.NewFunction(func(L *lua.LState) int {
		v := lookup(L, L.GetTop())
		switch x := v.(type) {
		case lua.LString:
			total += int64(len(x))
		case lua.LNumber:
			total += 32
		}
		if total > int64(sb.lim.MaxStringBytes) {
			sb.raiseSize(L, "string.gsub", total)
		}
		L.Push(v)
		return 1
	})
}

func (sb *sandbox) guardTable(L *lua.LState, mod *lua.LTable) {
	wrap(L, mod, "concat", func(L *lua.LState) {
		t := L.CheckTable(1)
		sep := L.OptString(2, "")
		i, j := L.OptInt(3, 1), L.OptInt(4, t.Len())
		size := int64(0)
		for k := i; k <= j; k++ {
			switch v := t.RawGetInt(k).(type) {
			case lua.LString:
				size += int64(len(v))
			case lua.LNumber:
				size += 32
			default:
				return // the original raises "invalid value"
			}
			if k < j {
				size += int64(len(sep))
			}
			if size > int64(sb.lim.MaxStringBytes) {
				sb.raiseSize(L, "table.concat", size)
			}
		}
	})
}

// print collects its arguments, tab-separated, into the run's print buffer,
// up to MaxStringBytes in total.
func (sb *sandbox) print(L *lua.LState) int {
	parts := make([]string, 0, L.GetTop())
	for i := 1; i <= L.GetTop(); i++ {
		parts = append(parts, L.ToStringMeta(L.Get(i)).String())
	}
	line := strings.Join(parts, "\t") + "\n"
	if sb.prints.Len()+len(line) > sb.lim.MaxStringBytes {
		if !sb.truncated {
			sb.prints.WriteString("... print output truncated\n")
			sb.truncated = true
		}
		return 0
	}
	sb.prints.WriteString(line)
	return 0
}

// helpers builds the rollgate table: array(t) and object(t) mark a table
// (or a new one) as a JSON list or object, copy(v) deep-copies a value
// keeping the marks, null is the JSON null of list elements, covers and
// intersect reason about conditions; sb.dialectHelpers adds the
// canary-annotation helpers.
func (sb *sandbox) helpers(L *lua.LState) *lua.LTable {
	t := L.NewTable()
	mark := func(mt *lua.LTable) lua.LGFunction {
		return func(L *lua.LState) int {
			tbl := L.OptTable(1, L.NewTable())
			tbl.Metatable = mt
			L.Push(tbl)
			return 1
		}
	}
	t.RawSetString("array", L.NewFunction(mark(sb.marks.array)))
	t.RawSetString("object", L.NewFunction(mark(sb.marks.object)))
	t.RawSetString("copy", L.NewFunction(func(L *lua.LState) int {
		budget := sb.lim.ResultValues
		visiting := sb.visiting[:0]
		L.Push(sb.copyValue(L, L.CheckAny(1), &budget, &visiting))
		sb.visiting = visiting[:0]
		return 1
	}))
	t.RawSetString("null", sb.marks.null)
	t.RawSetString("covers", L.NewFunction(luaCovers))
	t.RawSetString("intersect", L.NewFunction(sb.luaIntersect))
	sb.dialectHelpers(L, t)
	return t
}

// condArg reads a condition table {type=..., value=..., ignoreCase=...}.
func condArg(L *lua.LState, n int) StringCond {
	t := L.CheckTable(n)
	c := StringCond{
		Type:       lua.LVAsString(t.RawGetString("type")),
		Value:      lua.LVAsString(t.RawGetString("value")),
		IgnoreCase: lua.LVAsBool(t.RawGetString("ignoreCase")),
	}
	if err := c.check(); err != nil {
		L.ArgError(n, err.Error())
	}
	return c
}

// luaCovers is rollgate.covers(a, b): true when every string satisfying
// condition b satisfies condition a (false when it cannot tell).
func luaCovers(L *lua.LState) int {
	ok, err := Covers(condArg(L, 1), condArg(L, 2))
	if err != nil {
		L.RaiseError("rollgate.covers: %v", err)
	}
	L.Push(lua.LBool(ok))
	return 1
}

// luaIntersect is rollgate.intersect(a, b): the condition equal to
// (a AND b); false when no string satisfies both; nil and a message when
// the conjunction is not one condition.
func (sb *sandbox) luaIntersect(L *lua.LState) int {
	c, ok, err := Intersect(condArg(L, 1), condArg(L, 2))
	switch {
	case errors.Is(err, ErrInexpressible):
		L.Push(lua.LNil)
		L.Push(lua.LString(err.Error()))
		return 2
	case err != nil:
		L.RaiseError("rollgate.intersect: %v", err)
	case !ok:
		L.Push(lua.LFalse)
		return 1
	}
	t := L.CreateTable(0, 3)
	t.RawSetString("type", lua.LString(c.Type))
	t.RawSetString("value", lua.LString(c.Value))
	if c.IgnoreCase {
		t.RawSetString("ignoreCase", lua.LTrue)
	}
	t.Metatable = sb.marks.object
	L.Push(t)
	return 1
}

// copyValue deep-copies v for rollgate.copy. The copy gets its keys in
// the order the original's pairs() visits them, and its marks.
func (sb *sandbox) copyValue(L *lua.LState, v lua.LValue, budget *int, visiting *[]*lua.LTable) lua.LValue {
	src, ok := v.(*lua.LTable)
	if !ok {
		return v
	}
	if slices.Contains(*visiting, src) {
		L.RaiseError("rollgate.copy: the table contains itself")
	}
	if len(*visiting) > maxDepth {
		L.RaiseError("rollgate.copy: tables nested deeper than %d levels", maxDepth)
	}
	*visiting = append(*visiting, src)
	n := src.Len()
	hash := 0
	for k, _ := src.Next(afterArray(n)); k != lua.LNil; k, _ = src.Next(k) {
		hash++
	}
	dst := L.CreateTable(n, hash)
	for i := 1; i <= n; i++ {
		if val := src.RawGetInt(i); val != lua.LNil {
			sb.spend(L, budget)
			dst.RawSetInt(i, sb.copyValue(L, val, budget, visiting))
		}
	}
	for k, val := src.Next(afterArray(n)); k != lua.LNil; k, val = src.Next(k) {
		sb.spend(L, budget)
		if key, ok := k.(lua.LString); ok {
			dst.RawSetString(string(key), sb.copyValue(L, val, budget, visiting))
		} else {
			dst.RawSet(k, sb.copyValue(L, val, budget, visiting))
		}
	}
	dst.Metatable = src.Metatable
	*visiting = (*visiting)[:len(*visiting)-1]
	return dst
}

// spend counts one value copied by rollgate.copy against the limit.
func (sb *sandbox) spend(L *lua.LState, budget *int) {
	*budget--
	if *budget < 0 {
		L.RaiseError("rollgate.copy: more than %d values exceeds the %s", sb.lim.ResultValues, limitPhrase)
	}
}

// checkPattern refuses a pattern whose estimated worst-case backtracking on
// a subject of n bytes exceeds Limits.PatternSteps; Lua pattern matching
// runs in Go and cannot be interrupted by the time limit.
func (sb *sandbox) checkPattern(L *lua.LState, fn, pat string, n int) {
	if cost := patternCost(pat, n, sb.lim.PatternSteps); cost > sb.lim.PatternSteps {
		L.RaiseError("%s: pattern %q on a %d-byte string could take about %.0g steps, over the %s of %.0g",
			fn, shorten(pat, 40), n, cost, limitPhrase, sb.lim.PatternSteps)
	}
}

// patternCost estimates the worst-case steps of matching pat against a
// subject of n bytes: one factor n+1 for the start positions (1 when
// anchored with ^), n+1 for every repetition (*, +, -, %b) that is followed
// by more of the pattern, 2 for every optional item (?), n+1 for every
// back-reference (%1-%9), all times len(pat)/64 for a pattern longer
// than 64 bytes (each step may try every item).
func patternCost(pat string, n int, limit float64) float64 {
	base := float64(n + 1)
	cost := base
	i := 0
	if strings.HasPrefix(pat, "^") {
		cost, i = 1, 1
	}
	lastRep := -1
	for ; i < len(pat) && cost <= limit*base; i++ {
		switch pat[i] {
		case '%':
			if i+1 < len(pat) && pat[i+1] == 'b' {
				cost, lastRep = cost*base, i+3
				i += 3
				continue
			}
			if i+1 < len(pat) && pat[i+1] >= '1' && pat[i+1] <= '9' {
				cost *= base // a back-reference compares up to n bytes
			}
			i++
		case '[':
			i = skipSet(pat, i)
		case '*', '+', '-':
			cost, lastRep = cost*base, i
		case '?':
			cost *= 2
		}
	}
	if lastRep >= 0 && strings.Trim(pat[min(lastRep+1, len(pat)):], ")") == "" {
		cost /= base // a final repetition only scans forward
	}
	return cost * max(1, float64(len(pat))/64)
}

// skipSet returns the index of the ] closing the set that starts at i.
func skipSet(pat string, i int) int {
	i++
	if i < len(pat) && pat[i] == '^' {
		i++
	}
	if i < len(pat) && pat[i] == ']' {
		i++
	}
	for ; i < len(pat) && pat[i] != ']'; i++ {
		if pat[i] == '%' {
			i++
		}
	}
	return i
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
