package luascripts

import (
	"context"
	"maps"
	"testing"
	"time"
)

// tamper changes everything a script can reach outside its locals: new
// globals, the string, table, math, json and rollgate libraries, the
// string metatable, the global table's metatable, the array and object
// markers, and a library table's metatable.
const tamper = `
local arrayMark = getmetatable(rollgate.array())
arrayMark.x = "leaked"
local objectMark = getmetatable(rollgate.object())
objectMark.__index = function() return "leaked" end
leaked = "leaked"
rawset(_G, "leaked2", "leaked")
string.upper = function() return "hijacked" end
string.extra = "leaked"
local smt = getmetatable("")
smt.extra = "leaked"
smt.__index = {upper = function() return "metatable" end, len = string.len}
table.insert = nil
math.pi = 3
json.encode = nil
rollgate.copy = function() return "leaked" end
setmetatable(_G, nil)
setmetatable(math, {__index = function() return "leaked" end})
_VERSION = "leaked"
return {ok = "1"}`

// inspect reports what tamper changes, as a fresh state shows it.
const inspect = `
local function show(v) return tostring(v) end
return {
  leaked = show(rawget(_G, "leaked")), leaked2 = show(rawget(_G, "leaked2")),
  upper = ("a"):upper(), extra = show(string.extra),
  smtExtra = show(getmetatable("").extra), smtIndex = show(getmetatable("").__index == string),
  insert = type(table.insert), pi = show(math.pi == 3), encode = type(json.encode),
  copy = type(rollgate.copy({})), gmt = show(getmetatable(_G) ~= nil),
  mathMt = show(getmetatable(math)), nope = show(math.nope), version = _VERSION,
  arrayMark = show(getmetatable(rollgate.array()).x),
  objectField = show(rollgate.object().missing),
  os = show(pcall(function() return os end)),
}`

// TestPooledStatesDoNotLeak: a script that changes every table it can
// reach runs on a pooled state; the next script, on the same state, sees
// exactly what it sees on a fresh state.
func TestPooledStatesDoNotLeak(t *testing.T) {
	fresh, err := runHostile(t, Runner{}, inspect)
	if err != nil {
		t.Fatal(err)
	}
	if fresh["upper"] != "A" || fresh["insert"] != "function" || fresh["gmt"] != "true" || fresh["leaked"] != "nil" {
		t.Fatalf("a fresh state looks wrong: %v", fresh)
	}
	pool := NewPool(1)
	for run := 1; run <= 3; run++ {
		out, err := runHostile(t, Runner{Pool: pool}, tamper)
		if err != nil || out["ok"] != "1" {
			t.Fatalf("tampering run %d: %v %v", run, out, err)
		}
		got, err := runHostile(t, Runner{Pool: pool}, inspect)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got, fresh) {
			t.Fatalf("run %d after tampering sees\n%v\nwant what a fresh state sees\n%v", run, got, fresh)
		}
	}
	st := pool.Stats()
	if st.Built != 1 || st.Reused != 5 || st.Dirty != 3 {
		t.Fatalf("pool stats %+v: want 1 state built, reused 5 times, 3 resets undoing changes", st)
	}
}

// TestPoolRetiresFailedStates: a run that fails (here stopped by its
// caller's context) never returns its state to the pool.
func TestPoolRetiresFailedStates(t *testing.T) {
	pool := NewPool(1)
	r := Runner{Pool: pool}
	loop, err := NewScript("hostile", `while true do end`)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := r.RunIngress(ctx, loop, IngressInput{}); err == nil {
		t.Fatal("no error from an endless loop")
	}
	if _, err := runHostile(t, r, `return {ok = "1"}`); err != nil {
		t.Fatal(err)
	}
	if st := pool.Stats(); st.Built != 2 || st.Reused != 0 {
		t.Fatalf("pool stats %+v: want a new state after the failed run", st)
	}
}

// TestPoolKeepsStatesPerLimits: a state built for other limits is not
// lent out.
func TestPoolKeepsStatesPerLimits(t *testing.T) {
	pool := NewPool(1)
	ctx := context.Background()
	s, err := NewScript("limits", `return {n = tostring(#string.rep("x", 100))}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (Runner{Pool: pool}).RunIngress(ctx, s, IngressInput{}); err != nil {
		t.Fatal(err)
	}
	_, err = (Runner{Pool: pool, Limits: Limits{MaxStringBytes: 10}}).RunIngress(ctx, s, IngressInput{})
	if err == nil {
		t.Fatal("a 100-byte string passed a 10-byte limit on a pooled state")
	}
	if st := pool.Stats(); st.Reused != 0 {
		t.Fatalf("pool stats %+v: a state was lent across limits", st)
	}
}
