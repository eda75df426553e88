package luascripts

import (
	"bytes"
	"sync"
	"sync/atomic"

	lua "github.com/yuin/gopher-lua"
)

// Pool keeps prepared sandboxes (a Lua state with the sandboxed libraries
// open) for reuse: building one costs more than a typical script run.
// After a successful run a state is reset to the snapshot taken when it
// was built — every table a script can reach (globals, the string, table,
// math, json and rollgate libraries, the string metatable, the array and
// object markers, and their metatables) gets back exactly its keys,
// values and metatable — and only then goes back to the pool. A run that
// fails (an error, a limit, a timeout, a cancelled context) closes its
// state instead. A Pool is safe for concurrent use; a nil *Pool builds a
// fresh state for every run.
type Pool struct {
	mu   sync.Mutex
	free []*vm
	size int

	built, reused, dirty atomic.Int64
}

// maxDirtyResets retires a state after this many resets that had to undo
// a change (gopher-lua keeps a deleted key's slot in a table's key list,
// so a state that keeps being written to would grow).
const maxDirtyResets = 64

// NewPool returns a Pool keeping up to size idle states (at least 1).
func NewPool(size int) *Pool {
	return &Pool{size: max(size, 1)}
}

// PoolStats counts what a Pool did.
type PoolStats struct {
	// Built is the number of states built, Reused the number of runs on a
	// state taken from the pool, Dirty the number of resets that undid a
	// change a script made outside its locals and result.
	Built, Reused, Dirty int64
}

// Stats returns the Pool's counters.
func (p *Pool) Stats() PoolStats {
	return PoolStats{Built: p.built.Load(), Reused: p.reused.Load(), Dirty: p.dirty.Load()}
}

// vm is one prepared sandbox.
type vm struct {
	L     *lua.LState
	sb    *sandbox
	lim   Limits
	snap  []tableSnap
	dirty int
}

// tableSnap is the content of one table when its state was built.
type tableSnap struct {
	t    *lua.LTable
	mt   lua.LValue
	vals map[lua.LValue]lua.LValue
	// order is the table's keys and values in the order Next visits them.
	order []snapEntry
}

type snapEntry struct{ k, v lua.LValue }

// unchanged reports whether s.t still has exactly its recorded keys,
// values and metatable. It walks the table with Next, which allocates
// nothing for string keys, and compares entry by entry: a key added,
// removed, set back after a removal (it keeps its old place) or given
// another value breaks the sequence.
func (s *tableSnap) unchanged() bool {
	if s.t.Metatable != s.mt {
		return false
	}
	k, v := s.t.Next(lua.LNil)
	for _, e := range s.order {
		if k != e.k || v != e.v {
			return false
		}
		k, v = s.t.Next(k)
	}
	return k == lua.LNil
}

// get returns a state for limits lim: an idle one built with the same
// limits, or a new one.
func (p *Pool) get(lim Limits) *vm {
	if p != nil {
		p.mu.Lock()
		for len(p.free) > 0 {
			v := p.free[len(p.free)-1]
			p.free = p.free[:len(p.free)-1]
			if v.lim == lim {
				p.mu.Unlock()
				p.reused.Add(1)
				return v
			}
			v.L.Close()
		}
		p.mu.Unlock()
		p.built.Add(1)
	}
	return newVM(lim, p != nil)
}

// put resets v after a successful run and keeps it, or closes it.
func (p *Pool) put(v *vm) {
	if p == nil || !v.reset(p) {
		v.L.Close()
		return
	}
	p.mu.Lock()
	if len(p.free) < p.size {
		p.free = append(p.free, v)
		v = nil
	}
	p.mu.Unlock()
	if v != nil {
		v.L.Close()
	}
}

// newVM builds a sandbox; with snapshot it records what reset restores.
func newVM(lim Limits, snapshot bool) *vm {
	L := lua.NewState(lua.Options{
		SkipOpenLibs:    true,
		CallStackSize:   lim.CallStackSize,
		RegistrySize:    256,
		RegistryMaxSize: lim.RegistrySlots,
		// gopher-lua grows the value stack linearly; small steps make a
		// large unpack quadratic.
		RegistryGrowStep: 4096,
		// A fixed call stack: gopher-lua's growing one panics without a
		// line number when it is full.
		MinimizeStackMemory: false,
	})
	v := &vm{L: L, sb: openSandbox(L, lim), lim: lim}
	if snapshot {
		v.snap = snapshotTables(v.roots())
	}
	return v
}

// roots are the tables a script can reach without being given them.
func (v *vm) roots() []lua.LValue {
	return []lua.LValue{v.L.G.Global, v.L.GetMetatable(lua.LString("")), v.sb.marks.array, v.sb.marks.object}
}

// snapshotTables records every table reachable from roots through keys,
// values, metatables and function environments.
func snapshotTables(roots []lua.LValue) []tableSnap {
	seen := map[*lua.LTable]bool{}
	var out []tableSnap
	var walk func(lua.LValue)
	walk = func(x lua.LValue) {
		switch x := x.(type) {
		case *lua.LFunction:
			if x.Env != nil {
				walk(x.Env)
			}
		case *lua.LTable:
			if seen[x] {
				return
			}
			seen[x] = true
			s := tableSnap{t: x, mt: x.Metatable, vals: map[lua.LValue]lua.LValue{}}
			x.ForEach(func(k, val lua.LValue) { s.vals[k] = val })
			for k, val := x.Next(lua.LNil); k != lua.LNil; k, val = x.Next(k) {
				s.order = append(s.order, snapEntry{k, val})
			}
			out = append(out, s)
			walk(x.Metatable)
			for k, val := range s.vals {
				walk(k)
				walk(val)
			}
		}
	}
	for _, r := range roots {
		walk(r)
	}
	return out
}

// reset returns v to its snapshot; false when v must not be reused.
func (v *vm) reset(p *Pool) bool {
	v.L.SetTop(0)
	v.L.RemoveContext()
	v.sb.prints.Reset()
	v.sb.truncated = false
	v.L.G.Global.RawSetString("obj", lua.LNil)
	changed := false
	for i := range v.snap {
		if !v.snap[i].unchanged() && restore(v.snap[i]) {
			changed = true
		}
	}
	if !changed {
		return true
	}
	p.dirty.Add(1)
	v.dirty++
	return v.dirty < maxDirtyResets
}

// restore gives s.t back its recorded keys, values and metatable; it
// reports whether anything had changed.
func restore(s tableSnap) bool {
	changed := s.t.Metatable != s.mt
	s.t.Metatable = s.mt
	n := 0
	var extra []lua.LValue
	s.t.ForEach(func(k, val lua.LValue) {
		want, ok := s.vals[k]
		switch {
		case !ok:
			extra = append(extra, k)
		case want != val:
			changed = true
		default:
			n++
		}
	})
	if len(extra) > 0 || n != len(s.vals) {
		changed = true
	}
	if !changed {
		return false
	}
	for _, k := range extra {
		s.t.RawSet(k, lua.LNil)
	}
	for k, val := range s.vals {
		s.t.RawSet(k, val)
	}
	return true
}

// printed returns a copy of what the run printed (the buffer is reused
// with the state).
func (sb *sandbox) printed() []byte {
	if sb.prints.Len() == 0 {
		return nil
	}
	return bytes.Clone(sb.prints.Bytes())
}
