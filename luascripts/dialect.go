package luascripts

import (
	"fmt"
	"strconv"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// The helpers in this file serve the canary-annotation dialects: Ingress
// controllers that read the ingress-nginx canary annotations (canary,
// canary-weight, canary-by-header, canary-by-cookie, ...) under a prefix of
// their own. They are part of the rollgate table, written in Go, and keep
// the error texts the built-in scripts had when each held its own copy.

// dialectHelpers adds the canary-annotation helpers to the rollgate table t.
func (sb *sandbox) dialectHelpers(L *lua.LState, t *lua.LTable) {
	t.RawSetString("withoutKeys", L.NewFunction(sb.luaWithoutKeys))
	t.RawSetString("cookieMatch", L.NewFunction(luaCookieMatch))
	t.RawSetString("stepConditions", L.NewFunction(luaStepConditions))
	t.RawSetString("headerAndCookie", L.NewFunction(luaHeaderAndCookie))
	t.RawSetString("canaryBy", L.NewFunction(luaCanaryBy))
	t.RawSetString("canaryWeight", L.NewFunction(luaCanaryWeight))
	t.RawSetString("headerControl", L.NewFunction(sb.luaHeaderControl))
	t.RawSetString("splitWeighted", L.NewFunction(sb.luaSplitWeighted))
}

// fail raises msg as error(msg, 0) does: no position is added.
func fail(L *lua.LState, format string, args ...any) {
	L.Error(lua.LString(fmt.Sprintf(format, args...)), 0)
}

// tableArg returns argument n as a table; nil when it is nil and optional.
func tableArg(L *lua.LState, fn string, n int, what string, optional bool) *lua.LTable {
	switch v := L.Get(n).(type) {
	case *lua.LTable:
		return v
	case *lua.LNilType:
		if optional {
			return nil
		}
	}
	or := ""
	if optional {
		or = " or nil"
	}
	L.RaiseError("%s: argument %d (%s) must be a table%s, not %s", fn, n, what, or, L.Get(n).Type())
	return nil
}

// stringArg returns argument n as a string.
func stringArg(L *lua.LState, fn string, n int, what string) string {
	s, ok := L.Get(n).(lua.LString)
	if !ok {
		L.RaiseError("%s: argument %d (%s) must be a string, not %s", fn, n, what, L.Get(n).Type())
	}
	return string(s)
}

// stringList returns v, a string or a list of strings (what names it in
// errors of fn), as a list.
func stringList(L *lua.LState, fn, what string, v lua.LValue) []string {
	if s, ok := v.(lua.LString); ok {
		return []string{string(s)}
	}
	t, ok := v.(*lua.LTable)
	if !ok {
		L.RaiseError("%s: %s must be a string or a list of strings, not %s", fn, what, v.Type())
	}
	out := make([]string, 0, t.Len())
	for i := 1; i <= t.Len(); i++ {
		s, ok := t.RawGetInt(i).(lua.LString)
		if !ok {
			L.RaiseError("%s: %s[%d] must be a string, not %s", fn, what, i, t.RawGetInt(i).Type())
		}
		out = append(out, string(s))
	}
	return out
}

// listLen is #v for a list field of a step match (0 for nil).
func listLen(L *lua.LState, fn string, i int, field string, v lua.LValue) int {
	switch v := v.(type) {
	case *lua.LNilType:
		return 0
	case *lua.LTable:
		return v.Len()
	}
	L.RaiseError("%s: match %d: %s must be a list, not %s", fn, i, field, v.Type())
	return 0
}

// luaWithoutKeys is rollgate.withoutKeys(annotations, prefixes, keys): a
// new table with the entries of annotations (nil: none) except every
// prefix..key, for each prefix (a string or a list) and key (a list).
//
// Go code is not stopped by the time limit, so the work is bounded: at most
// maxPrefixes prefixes, and an annotations table of at most
// Limits.ResultValues entries.
func (sb *sandbox) luaWithoutKeys(L *lua.LState) int {
	const fn = "rollgate.withoutKeys"
	src := tableArg(L, fn, 1, "annotations", true)
	prefixes := stringList(L, fn, "argument 2 (prefixes)", L.Get(2))
	keys := stringList(L, fn, "argument 3 (keys)", L.Get(3))
	if len(prefixes) > maxPrefixes {
		L.RaiseError("%s: %d prefixes; pass at most %d", fn, len(prefixes), maxPrefixes)
	}
	owned := make(map[string]bool, len(keys))
	for _, k := range keys {
		owned[k] = true
	}
	dropped := func(k lua.LValue) bool {
		s, ok := k.(lua.LString)
		if !ok {
			return false
		}
		for _, p := range prefixes {
			if strings.HasPrefix(string(s), p) && owned[string(s)[len(p):]] {
				return true
			}
		}
		return false
	}
	out := L.NewTable()
	if src != nil {
		n := 0
		for k, v := src.Next(lua.LNil); k != lua.LNil; k, v = src.Next(k) {
			if n++; n > sb.lim.ResultValues {
				L.RaiseError("%s: more than %d annotations exceeds the %s", fn, sb.lim.ResultValues, limitPhrase)
			}
			if !dropped(k) {
				out.RawSet(k, v)
			}
		}
	}
	L.Push(out)
	return 1
}

// maxPrefixes bounds the prefixes of rollgate.withoutKeys.
const maxPrefixes = 16

// Forms of the Cookie convention: a Cookie header match whose expression is
// NAME=VALUE with one of these before and one of these after.
var (
	cookiePrefixes = []string{`^(.*;\s*)?`, `^(.*; )?`, `^(.*;)?`, `(^|;\s*)`, `^`, `.*`}
	cookieSuffixes = []string{`(;.*)?$`, `(;|$)`, `$`, `.*`}
)

// cookieMatch returns NAME and VALUE when a header condition (name, match
// type, value) is a Cookie match in the documented form.
func cookieMatch(name, typ, value string) (string, string, bool) {
	if strings.ToLower(name) != "cookie" || typ != "RegularExpression" {
		return "", "", false
	}
	for _, p := range cookiePrefixes {
		if strings.HasPrefix(value, p) {
			value = value[len(p):]
			break
		}
	}
	for _, s := range cookieSuffixes {
		if len(value) > len(s) && strings.HasSuffix(value, s) {
			value = value[:len(value)-len(s)]
			break
		}
	}
	n, v, ok := strings.Cut(value, "=")
	if !ok || !cookieText(n, "") || !cookieText(v, ".") {
		return "", "", false
	}
	return n, v, true
}

// cookieText reports whether s is one or more ASCII letters, digits, _, -
// or bytes of extra.
func cookieText(s, extra string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' ||
			c == '_' || c == '-' || strings.IndexByte(extra, c) >= 0) {
			return false
		}
	}
	return true
}

// headerCookie applies cookieMatch to a header table.
func headerCookie(h *lua.LTable) (string, string, bool) {
	name, ok1 := h.RawGetString("name").(lua.LString)
	typ, ok2 := h.RawGetString("type").(lua.LString)
	value, ok3 := h.RawGetString("value").(lua.LString)
	if !ok1 || !ok2 || !ok3 {
		return "", "", false
	}
	return cookieMatch(string(name), string(typ), string(value))
}

// luaCookieMatch is rollgate.cookieMatch(header): NAME, VALUE when header
// ({name, type, value}) is a Cookie match in the documented form, else nil.
func luaCookieMatch(L *lua.LState) int {
	h := tableArg(L, "rollgate.cookieMatch", 1, "header", false)
	n, v, ok := headerCookie(h)
	if !ok {
		L.Push(lua.LNil)
		return 1
	}
	L.Push(lua.LString(n))
	L.Push(lua.LString(v))
	return 2
}

// luaStepConditions is rollgate.stepConditions(matches, rules): an
// iterator over the one condition of every step match, for use in a
// generic for: each value is {index, header or query, cookie,
// cookieValue}. rules names the dialect and its error messages: name
// (every error starts "<name>: step match <index>: "), path (a match on a
// path), query (query parameters; nil when the dialect matches them) and
// count (a match that is not exactly one condition). A match is checked
// when the loop reaches it, so an error of the loop's body about an
// earlier match comes first.
func luaStepConditions(L *lua.LState) int {
	const fn = "rollgate.stepConditions"
	matches := tableArg(L, fn, 1, "matches", true)
	rules := tableArg(L, fn, 2, "rules", false)
	rule := func(key string, optional bool) (string, bool) {
		switch v := rules.RawGetString(key).(type) {
		case lua.LString:
			return string(v), true
		case *lua.LNilType:
			if optional {
				return "", false
			}
		}
		L.RaiseError("%s: rules.%s must be a string (the error message), not %s", fn, key, rules.RawGetString(key).Type())
		return "", false
	}
	name, _ := rule("name", false)
	pathMsg, _ := rule("path", false)
	countMsg, _ := rule("count", false)
	queryMsg, noQuery := rule("query", true)
	i := 0
	L.Push(L.NewFunction(func(L *lua.LState) int {
		i++
		var v lua.LValue = lua.LNil
		if matches != nil {
			v = matches.RawGetInt(i)
		}
		if v == lua.LNil {
			L.Push(lua.LNil)
			return 1
		}
		L.Push(stepCondition(L, fn, i, v, name, pathMsg, countMsg, queryMsg, noQuery))
		return 1
	}))
	return 1
}

// stepCondition checks match i (v) for rollgate.stepConditions and returns
// its condition.
func stepCondition(L *lua.LState, fn string, i int, v lua.LValue, name, pathMsg, countMsg, queryMsg string, noQuery bool) *lua.LTable {
	m, ok := v.(*lua.LTable)
	if !ok {
		L.RaiseError("%s: match %d must be a table, not %s", fn, i, v.Type())
	}
	headers, queries := m.RawGetString("headers"), m.RawGetString("queryParams")
	nh := listLen(L, fn, i, "headers", headers)
	nq := listLen(L, fn, i, "queryParams", queries)
	switch {
	case m.RawGetString("path") != lua.LNil:
		fail(L, "%s: step match %d: %s", name, i, pathMsg)
	case noQuery && nq > 0:
		fail(L, "%s: step match %d: %s", name, i, queryMsg)
	case nh+nq != 1:
		fail(L, "%s: step match %d: %s", name, i, countMsg)
	}
	c := L.CreateTable(0, 4)
	c.RawSetString("index", lua.LNumber(i))
	if nh == 0 {
		c.RawSetString("query", queries.(*lua.LTable).RawGetInt(1))
		return c
	}
	h := headers.(*lua.LTable).RawGetInt(1)
	c.RawSetString("header", h)
	if ht, ok := h.(*lua.LTable); ok {
		if n, v, ok := headerCookie(ht); ok {
			c.RawSetString("cookie", lua.LString(n))
			c.RawSetString("cookieValue", lua.LString(v))
		}
	}
	return c
}

// luaHeaderAndCookie is rollgate.headerAndCookie(conditions, name): the
// header condition and the cookie NAME of a step in a dialect that checks
// one header condition, then one cookie condition (Cookie matches on
// NAME=always). conditions is the iterator of rollgate.stepConditions. The
// first such Cookie match gives the cookie; the first other condition the
// header; a third fails the step.
func luaHeaderAndCookie(L *lua.LState) int {
	const fn = "rollgate.headerAndCookie"
	next, ok := L.Get(1).(*lua.LFunction)
	if !ok {
		L.RaiseError("%s: argument 1 (conditions) must be the iterator of rollgate.stepConditions, not %s", fn, L.Get(1).Type())
	}
	name := stringArg(L, fn, 2, "name")
	var header, cookie lua.LValue = lua.LNil, lua.LNil
	for {
		L.Push(next)
		L.Call(0, 1)
		v := L.Get(-1)
		L.Pop(1)
		if v == lua.LNil {
			break
		}
		c, ok := v.(*lua.LTable)
		if !ok || c.RawGetString("header") == lua.LNil {
			L.RaiseError("%s: every condition must be a header condition (the dialect's rules must refuse query parameters)", fn)
		}
		switch {
		case c.RawGetString("cookieValue") == lua.LString("always") && cookie == lua.LNil:
			cookie = c.RawGetString("cookie")
		case header == lua.LNil:
			header = c.RawGetString("header")
		default:
			fail(L, "%s: step match %s: %s supports at most one header condition and one cookie condition per step",
				name, L.ToStringMeta(c.RawGetString("index")), name)
		}
	}
	L.Push(header)
	L.Push(cookie)
	return 2
}

// luaCanaryBy is rollgate.canaryBy(out, prefix, kind, name, condition,
// dialect): sets out[prefix.."canary-by-"..kind] to name and, for the
// condition's type, ...-value (Exact) or ...-pattern (RegularExpression) to
// its value; any other type fails with "<dialect> cannot match a <kind>
// with type <type>".
func luaCanaryBy(L *lua.LState) int {
	const fn = "rollgate.canaryBy"
	out := tableArg(L, fn, 1, "out", false)
	prefix := stringArg(L, fn, 2, "prefix")
	kind := stringArg(L, fn, 3, "kind")
	name := L.Get(4)
	cond := tableArg(L, fn, 5, "condition", false)
	dialect := stringArg(L, fn, 6, "dialect")
	key := prefix + "canary-by-" + kind
	out.RawSetString(key, name)
	switch typ := cond.RawGetString("type"); typ {
	case lua.LString("Exact"):
		out.RawSetString(key+"-value", cond.RawGetString("value"))
	case lua.LString("RegularExpression"):
		out.RawSetString(key+"-pattern", cond.RawGetString("value"))
	default:
		fail(L, "%s cannot match a %s with type %s", dialect, kind, L.ToStringMeta(typ))
	}
	return 0
}

// luaCanaryWeight is rollgate.canaryWeight(obj): the canary-weight
// annotation of a step: obj.weight when it is 0 or more, "0" when the step
// has neither traffic nor matches, else nil.
func luaCanaryWeight(L *lua.LState) int {
	const fn = "rollgate.canaryWeight"
	obj := tableArg(L, fn, 1, "obj", false)
	w := obj.RawGetString("weight")
	var n float64
	var err error
	switch v := w.(type) {
	case lua.LNumber:
		n = float64(v)
	case lua.LString:
		n, err = strconv.ParseFloat(strings.TrimSpace(string(v)), 64)
	default:
		err = fmt.Errorf("not %s", w.Type())
	}
	if err != nil {
		L.RaiseError("%s: obj.weight must be a number or a numeric string such as \"5\" or \"-1\", not %s", fn, L.ToStringMeta(w))
	}
	switch {
	case n >= 0:
		L.Push(w)
	case obj.RawGetString("matches") == lua.LNil:
		L.Push(lua.LString("0"))
	default:
		L.Push(lua.LNil)
	}
	return 1
}

// luaHeaderControl is rollgate.headerControl(out, prefix, modifier): from a
// requestHeaderModifier (nil: nothing) it sets
// prefix.."request-header-control-update" and "-add" ("NAME VALUE" lines of
// set and add) and "-remove" (the names of remove joined by commas), each
// only when its list is not empty.
//
// The text it writes is bounded by Limits.MaxStringBytes, as string
// operations are.
func (sb *sandbox) luaHeaderControl(L *lua.LState) int {
	const fn = "rollgate.headerControl"
	out := tableArg(L, fn, 1, "out", false)
	prefix := stringArg(L, fn, 2, "prefix")
	mod := tableArg(L, fn, 3, "modifier", true)
	if mod == nil {
		return 0
	}
	list := func(field string) *lua.LTable {
		switch v := mod.RawGetString(field).(type) {
		case *lua.LTable:
			return v
		case *lua.LNilType:
			return nil
		}
		L.RaiseError("%s: modifier.%s must be a list, not %s", fn, field, mod.RawGetString(field).Type())
		return nil
	}
	text := func(field string, i int, v lua.LValue) string {
		switch v := v.(type) {
		case lua.LString:
			return string(v)
		case lua.LNumber:
			return v.String()
		}
		L.RaiseError("%s: modifier.%s[%d] must be a string, not %s", fn, field, i, v.Type())
		return ""
	}
	lines := func(field string) (string, bool) {
		t := list(field)
		if t == nil || t.Len() == 0 {
			return "", false
		}
		parts := make([]string, 0, t.Len())
		size := 0
		for i := 1; i <= t.Len(); i++ {
			h, ok := t.RawGetInt(i).(*lua.LTable)
			if !ok {
				L.RaiseError("%s: modifier.%s[%d] must be a table {name, value}, not %s", fn, field, i, t.RawGetInt(i).Type())
			}
			line := text(field, i, h.RawGetString("name")) + " " + text(field, i, h.RawGetString("value"))
			if size += len(line) + 1; size > sb.lim.MaxStringBytes {
				sb.raiseSize(L, fn, int64(size))
			}
			parts = append(parts, line)
		}
		return strings.Join(parts, "\n"), true
	}
	if s, ok := lines("set"); ok {
		out.RawSetString(prefix+"request-header-control-update", lua.LString(s))
	}
	if s, ok := lines("add"); ok {
		out.RawSetString(prefix+"request-header-control-add", lua.LString(s))
	}
	if t := list("remove"); t != nil && t.Len() > 0 {
		names := make([]string, 0, t.Len())
		size := 0
		for i := 1; i <= t.Len(); i++ {
			name := text("remove", i, t.RawGetInt(i))
			if size += len(name) + 1; size > sb.lim.MaxStringBytes {
				sb.raiseSize(L, fn, int64(size))
			}
			names = append(names, name)
		}
		out.RawSetString(prefix+"request-header-control-remove", lua.LString(strings.Join(names, ",")))
	}
	return 0
}
