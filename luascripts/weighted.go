package luascripts

import (
	lua "github.com/yuin/gopher-lua"
)

// luaSplitWeighted is rollgate.splitWeighted(services, stable, canary,
// weight): a new list from a weighted list of services (Traefik's
// TraefikService weighted.services and IngressRoute routes[].services),
// for a step sending weight percent to the canary. Each entry for the
// stable Service (name stable, kind nil or "Service") becomes two copies:
// the stable one with weight total*(100-weight) and one renamed canary
// with total*weight, where total is the entry's weight (default 1), or 1
// when it is the only entry. Every other entry is copied with its weight
// (default 1) times 100, so it keeps its share. The copies keep every
// other field (port, options).
//
// Go code is not stopped by the time limit, so the work is bounded: the
// copies spend the same budget of Limits.ResultValues as rollgate.copy.
func (sb *sandbox) luaSplitWeighted(L *lua.LState) int {
	const fn = "rollgate.splitWeighted"
	services := tableArg(L, fn, 1, "services", false)
	stable := stringArg(L, fn, 2, "stable")
	canary := stringArg(L, fn, 3, "canary")
	w, ok := L.Get(4).(lua.LNumber)
	if !ok || w < 0 || w > 100 {
		L.RaiseError("%s: argument 4 (weight) must be a number from 0 to 100, not %s", fn, L.Get(4).String())
	}
	n := services.Len()
	if n > sb.lim.ResultValues {
		L.RaiseError("%s: more than %d services exceeds the %s", fn, sb.lim.ResultValues, limitPhrase)
	}
	out := L.NewTable()
	out.Metatable = sb.marks.array
	budget := sb.lim.ResultValues
	visiting := sb.visiting[:0]
	copyOf := func(t *lua.LTable) *lua.LTable {
		return sb.copyValue(L, t, &budget, &visiting).(*lua.LTable)
	}
	for i := 1; i <= n; i++ {
		s, ok := services.RawGetInt(i).(*lua.LTable)
		if !ok {
			L.RaiseError("%s: services[%d] must be a table, not %s", fn, i, services.RawGetInt(i).Type())
		}
		weight := lua.LNumber(1)
		switch v := s.RawGetString("weight").(type) {
		case lua.LNumber:
			weight = v
		case *lua.LNilType:
		default:
			L.RaiseError("%s: services[%d].weight must be a number, not %s", fn, i, v.Type())
		}
		kind := s.RawGetString("kind")
		if s.RawGetString("name") != lua.LString(stable) || (kind != lua.LNil && kind != lua.LString("Service")) {
			o := copyOf(s)
			o.RawSetString("weight", weight*100)
			out.Append(o)
			continue
		}
		total := weight
		if n == 1 {
			total = 1
		}
		st, c := copyOf(s), copyOf(s)
		c.RawSetString("name", lua.LString(canary))
		st.RawSetString("weight", total*(100-w))
		c.RawSetString("weight", total*w)
		out.Append(st)
		out.Append(c)
	}
	sb.visiting = visiting[:0]
	L.Push(out)
	return 1
}
