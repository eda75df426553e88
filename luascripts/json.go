package luascripts

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	lua "github.com/yuin/gopher-lua"
)

// The json global: json.encode(value) and json.decode(text), as Kruise
// Rollout's scripts call them (a string, or nil and a message), written in
// Go and bounded by the sandbox's limits:
//
//   - encode refuses results over Limits.MaxStringBytes, more than
//     Limits.ResultValues values, nesting deeper than 100 levels and tables
//     that contain themselves.
//   - decode refuses texts over Limits.MaxStringBytes, more than
//     Limits.ResultValues values and nesting deeper than 100 levels.
//
// Tables follow the conversion rules of convert.go: a table marked as a list
// or an object (it came from the object, from json.decode, or through
// rollgate.array/object) encodes as one, even empty; an unmarked empty table
// encodes as null, as in Kruise Rollout (as an object member it is left
// out, which JSON readers take as null). json.decode marks what it builds,
// so decode then encode gives the same JSON back; a JSON null in a list
// becomes rollgate.null (Lua lists cannot hold nil), a null member of an
// object is left out.

func (sb *sandbox) jsonModule(L *lua.LState) *lua.LTable {
	mod := L.NewTable()
	mod.RawSetString("encode", L.NewFunction(sb.jsonEncode))
	mod.RawSetString("decode", L.NewFunction(sb.jsonDecode))
	return mod
}

// jsonFail returns nil and the message, Kruise's error convention.
func jsonFail(L *lua.LState, format string, args ...any) int {
	L.Push(lua.LNil)
	L.Push(lua.LString(fmt.Sprintf(format, args...)))
	return 2
}

func (sb *sandbox) jsonEncode(L *lua.LState) int {
	v := L.CheckAny(1)
	d := newDecoder(sb.marks, sb.lim.ResultValues)
	d.nullEmpty = true
	gv, err := d.decode(v, "value", 0)
	if err != nil {
		if errors.Is(err, ErrLimit) {
			L.RaiseError("json.encode: more than %d values exceeds the %s", sb.lim.ResultValues, limitPhrase)
		}
		return jsonFail(L, "json.encode: %v", err)
	}
	if _, ok := gv.(emptyTable); ok {
		gv = nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(gv); err != nil {
		return jsonFail(L, "json.encode: %v", err)
	}
	out := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if len(out) > sb.lim.MaxStringBytes {
		sb.raiseSize(L, "json.encode", int64(len(out)))
	}
	L.Push(lua.LString(out))
	return 1
}

func (sb *sandbox) jsonDecode(L *lua.LState) int {
	s := L.CheckString(1)
	if len(s) > sb.lim.MaxStringBytes {
		sb.raiseSize(L, "json.decode", int64(len(s)))
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return jsonFail(L, "json.decode: %v", err)
	}
	if dec.More() {
		return jsonFail(L, "json.decode: text after the JSON value")
	}
	budget := sb.lim.ResultValues
	lv, err := sb.jsonToLua(L, v, 0, &budget)
	if err != nil {
		if errors.Is(err, ErrLimit) {
			L.RaiseError("json.decode: %v", err)
		}
		return jsonFail(L, "json.decode: %v", err)
	}
	L.Push(lv)
	return 1
}

// jsonToLua converts a decoded JSON value; numbers come as json.Number.
func (sb *sandbox) jsonToLua(L *lua.LState, v any, depth int, budget *int) (lua.LValue, error) {
	*budget--
	if *budget < 0 {
		return nil, fmt.Errorf("%w: more than %d values exceeds the %s", ErrLimit, sb.lim.ResultValues, limitPhrase)
	}
	if depth > maxDepth {
		return nil, fmt.Errorf("nested deeper than %d levels", maxDepth)
	}
	switch x := v.(type) {
	case nil:
		return sb.marks.null, nil
	case bool:
		return lua.LBool(x), nil
	case string:
		return lua.LString(x), nil
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return nil, fmt.Errorf("number %s: %v", x, err)
		}
		return lua.LNumber(f), nil
	case []any:
		t := L.CreateTable(len(x), 0)
		for i, item := range x {
			lv, err := sb.jsonToLua(L, item, depth+1, budget)
			if err != nil {
				return nil, err
			}
			t.RawSetInt(i+1, lv)
		}
		t.Metatable = sb.marks.array
		return t, nil
	case map[string]any:
		t := L.CreateTable(0, len(x))
		for _, k := range sortedKeys(x) {
			if x[k] == nil {
				continue
			}
			lv, err := sb.jsonToLua(L, x[k], depth+1, budget)
			if err != nil {
				return nil, err
			}
			t.RawSetString(k, lv)
		}
		t.Metatable = sb.marks.object
		return t, nil
	}
	return nil, fmt.Errorf("cannot convert %T", v)
}
