package luascripts

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// Conversion between Go values (the JSON data model of unstructured
// objects: map[string]any, []any, string, bool, int64, float64, nil) and Lua
// values, done by hand, without JSON.
//
// Lua has one table type for both JSON arrays and objects, so every table
// made from Go carries a marker metatable saying which it was. The rules:
//
//   - A table made from a Go slice is marked as an array, one made from a Go
//     map as an object. A marked table decodes as what its marker says, even
//     when empty, so untouched parts of the original object round-trip
//     exactly (an empty list stays [], an empty map stays {}).
//   - A table the script creates has no marker. It decodes as an array when
//     its keys are exactly 1..n, as an object when all keys are strings, and
//     is an error when it mixes both or has holes. rollgate.array(t) and
//     rollgate.object(t) mark a table explicitly.
//   - An unmarked empty table is ambiguous: as an object field it is left
//     out (Kubernetes treats an absent optional field like an empty one), as
//     an array element it becomes {}. Mark it to keep it.
//   - Go nil map values are dropped (the API server prunes nulls anyway); a
//     nil array element becomes rollgate.null, which decodes back to null.
//   - Lua numbers are float64: integral values decode as int64, others as
//     float64. Integers beyond 2^53 lose precision; NaN and infinities are
//     rejected.
//   - Functions, userdata (other than rollgate.null) and coroutines cannot
//     be returned.

const (
	markerField = "__rollgate"
	maxDepth    = 100
)

// emptyTable is what an unmarked empty table decodes to; its parent decides.
type emptyTable struct{}

// nullValue is the Go value behind rollgate.null.
type nullValue struct{}

// marks holds one state's marker metatables and its null sentinel.
type marks struct {
	array, object *lua.LTable
	null          *lua.LUserData
}

func newMarks(L *lua.LState) marks {
	m := marks{array: L.NewTable(), object: L.NewTable(), null: L.NewUserData()}
	m.array.RawSetString(markerField, lua.LString("array"))
	m.object.RawSetString(markerField, lua.LString("object"))
	m.null.Value = nullValue{}
	return m
}

// encoder turns Go values into Lua values. keys is scratch space for the
// sorted keys of the maps being encoded (a stack: each map uses the part
// after its parent's).
type encoder struct {
	L    *lua.LState
	m    marks
	keys []string
}

// pathError is an encoding error whose path is built while the error
// unwinds, so a successful encoding builds no path strings.
type pathError struct {
	path []string // innermost first
	msg  string
}

func (p *pathError) Error() string {
	var b strings.Builder
	for i := len(p.path) - 1; i >= 0; i-- {
		b.WriteString(p.path[i])
	}
	return b.String() + ": " + p.msg
}

// under adds the path element elem (".key", "[i]" or the root name) to an
// encoding error.
func under(err error, elem string) error {
	if pe, ok := err.(*pathError); ok {
		pe.path = append(pe.path, elem)
	}
	return err
}

// encode converts v; path names its position for error messages.
func (e *encoder) encode(v any, path string, depth int) (lua.LValue, error) {
	lv, err := e.encodeAt(v, depth)
	if err != nil {
		return nil, under(err, path)
	}
	return lv, nil
}

func (e *encoder) encodeAt(v any, depth int) (lua.LValue, error) {
	if depth > maxDepth {
		return nil, &pathError{msg: fmt.Sprintf("nested deeper than %d levels", maxDepth)}
	}
	switch x := v.(type) {
	case nil:
		return e.m.null, nil
	case string:
		return lua.LString(x), nil
	case bool:
		return lua.LBool(x), nil
	case int:
		return lua.LNumber(x), nil
	case int32:
		return lua.LNumber(x), nil
	case int64:
		return lua.LNumber(x), nil
	case float64:
		return lua.LNumber(x), nil
	case map[string]any:
		return e.encodeMap(x, depth)
	case map[string]string:
		return e.stringMap(x), nil
	case []any:
		t := e.L.CreateTable(len(x), 0)
		for i, item := range x {
			lv, err := e.encodeAt(item, depth+1)
			if err != nil {
				return nil, under(err, "["+strconv.Itoa(i)+"]")
			}
			t.RawSetInt(i+1, lv)
		}
		t.Metatable = e.m.array
		return t, nil
	case []string:
		t := e.L.CreateTable(len(x), 0)
		for i, s := range x {
			t.RawSetInt(i+1, lua.LString(s))
		}
		t.Metatable = e.m.array
		return t, nil
	}
	return nil, &pathError{msg: fmt.Sprintf("cannot convert Go value of type %T", v)}
}

func (e *encoder) encodeMap(x map[string]any, depth int) (lua.LValue, error) {
	start := len(e.keys)
	for k, v := range x {
		if v != nil {
			e.keys = append(e.keys, k)
		}
	}
	keys := e.keys[start:]
	slices.Sort(keys)
	t := e.L.CreateTable(0, len(keys))
	for _, k := range keys {
		lv, err := e.encodeAt(x[k], depth+1)
		if err != nil {
			return nil, under(err, "."+k)
		}
		t.RawSetString(k, lv)
	}
	e.keys = e.keys[:start]
	t.Metatable = e.m.object
	return t, nil
}

// stringMap encodes labels or annotations as an object table.
func (e *encoder) stringMap(x map[string]string) *lua.LTable {
	start := len(e.keys)
	for k := range x {
		e.keys = append(e.keys, k)
	}
	keys := e.keys[start:]
	slices.Sort(keys)
	t := e.L.CreateTable(0, len(keys))
	for _, k := range keys {
		t.RawSetString(k, lua.LString(x[k]))
	}
	e.keys = e.keys[:start]
	t.Metatable = e.m.object
	return t
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// decoder turns Lua values into Go values. budget bounds the number of
// values decoded, so a huge result cannot make the host allocate without
// limit after the script has finished.
type decoder struct {
	m      marks
	budget int
	// visiting is the chain of tables being decoded (at most maxDepth+1
	// long), to refuse a table that contains itself.
	visiting []*lua.LTable
	// nullEmpty turns unmarked empty list elements into null instead of
	// {} (json.encode, as Kruise Rollout's json module does).
	nullEmpty bool
}

func newDecoder(m marks, budget int) *decoder {
	return &decoder{m: m, budget: budget}
}

// decode converts v; path names the position for error messages.
func (d *decoder) decode(v lua.LValue, path string, depth int) (any, error) {
	out, err := d.decodeAt(v, depth)
	if err != nil {
		return nil, under(err, path)
	}
	return out, nil
}

// failf is a decoding error whose path the callers add while it unwinds.
func failf(format string, args ...any) error {
	return &pathError{msg: fmt.Sprintf(format, args...)}
}

func (d *decoder) decodeAt(v lua.LValue, depth int) (any, error) {
	d.budget--
	if d.budget < 0 {
		return nil, fmt.Errorf("%w: result has too many values", ErrLimit)
	}
	if depth > maxDepth {
		return nil, failf("nested deeper than %d levels", maxDepth)
	}
	switch x := v.(type) {
	case *lua.LNilType:
		return nil, nil
	case lua.LBool:
		return bool(x), nil
	case lua.LString:
		return string(x), nil
	case lua.LNumber:
		return decodeNumber(float64(x))
	case *lua.LUserData:
		if x == d.m.null {
			return nil, nil
		}
	case *lua.LTable:
		if slices.Contains(d.visiting, x) {
			return nil, failf("table contains itself")
		}
		d.visiting = append(d.visiting, x)
		out, err := d.decodeTable(x, depth)
		d.visiting = d.visiting[:len(d.visiting)-1]
		return out, err
	}
	return nil, failf("cannot return a %s", v.Type())
}

func decodeNumber(f float64) (any, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, failf("number %v is not valid JSON", f)
	}
	if f == math.Trunc(f) && f >= math.MinInt64 && f < math.MaxInt64 {
		return int64(f), nil
	}
	return f, nil
}

func (d *decoder) decodeTable(t *lua.LTable, depth int) (any, error) {
	switch t.Metatable {
	case d.m.array:
		return d.decodeArray(t, depth)
	case d.m.object:
		return d.decodeObject(t, depth)
	}
	n, strKeys, otherKeys := tableShape(t)
	switch {
	case n == 0 && strKeys == 0 && otherKeys == 0:
		return emptyTable{}, nil
	case otherKeys == 0 && strKeys == 0:
		return d.decodeArray(t, depth)
	case otherKeys == 0 && n == 0:
		return d.decodeObject(t, depth)
	}
	return nil, failf("table mixes array and object keys (or has holes); " +
		"use a list with keys 1..n or an object with string keys")
}

// tableShape counts a table's keys: n is the length of the sequence 1..n
// when the integer keys form one (else those keys count as other keys).
// It reads the array part by index and walks the rest with Next, so it
// allocates nothing for string keys.
func tableShape(t *lua.LTable) (n, strKeys, otherKeys int) {
	n = t.Len()
	holes := 0
	for i := 1; i <= n; i++ {
		if t.RawGetInt(i) == lua.LNil {
			holes++
		}
	}
	for k, _ := t.Next(afterArray(n)); k != lua.LNil; k, _ = t.Next(k) {
		if _, ok := k.(lua.LString); ok {
			strKeys++
		} else {
			otherKeys++
		}
	}
	if holes > 0 {
		return 0, strKeys, otherKeys + n - holes
	}
	return n, strKeys, otherKeys
}

// afterArray is the key after which Next visits what follows the first n
// array elements (the rest of the table when n is its length).
func afterArray(n int) lua.LValue {
	if n == 0 {
		return lua.LNil
	}
	return lua.LNumber(n)
}

func (d *decoder) decodeArray(t *lua.LTable, depth int) (any, error) {
	n, strKeys, otherKeys := tableShape(t)
	if strKeys+otherKeys > 0 {
		return nil, failf("list has non-integer keys or holes")
	}
	out := make([]any, 0, n)
	for i := 1; i <= n; i++ {
		v, err := d.decodeAt(t.RawGetInt(i), depth+1)
		if err != nil {
			return nil, under(err, "["+strconv.Itoa(i-1)+"]")
		}
		if _, ok := v.(emptyTable); ok {
			v = map[string]any{}
			if d.nullEmpty {
				v = nil
			}
		}
		out = append(out, v)
	}
	return out, nil
}

func (d *decoder) decodeObject(t *lua.LTable, depth int) (any, error) {
	out := map[string]any{}
	for k, v := t.Next(lua.LNil); k != lua.LNil; k, v = t.Next(k) {
		key, ok := k.(lua.LString)
		if !ok {
			return nil, failf("object has a non-string key %s", k.String())
		}
		gv, err := d.decodeAt(v, depth+1)
		if err != nil {
			return nil, under(err, "."+string(key))
		}
		if _, empty := gv.(emptyTable); !empty && gv != nil {
			out[string(key)] = gv
		}
	}
	return out, nil
}

// decodeStringMap decodes a table of labels or annotations. Numbers and
// booleans are converted to their text; nil values drop the key.
func (d *decoder) decodeStringMap(v lua.LValue, path string) (map[string]string, error) {
	t, ok := v.(*lua.LTable)
	if !ok {
		return nil, fmt.Errorf("%s: expected a table of strings, got %s", path, v.Type())
	}
	out := map[string]string{}
	for k, val := t.Next(lua.LNil); k != lua.LNil; k, val = t.Next(k) {
		key, ok := k.(lua.LString)
		if !ok {
			return nil, fmt.Errorf("%s: key %s is not a string", path, k.String())
		}
		switch x := val.(type) {
		case lua.LString:
			out[string(key)] = string(x)
		case lua.LBool:
			out[string(key)] = strconv.FormatBool(bool(x))
		case lua.LNumber:
			out[string(key)] = formatNumber(float64(x))
		default:
			return nil, fmt.Errorf("%s[%q]: expected a string, got %s", path, string(key), val.Type())
		}
	}
	return out, nil
}

func formatNumber(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}
