package luascripts

import (
	"errors"
	"strings"
	"testing"
)

// TestJSONModule: json.encode and json.decode as Kruise Rollout's scripts
// call them, inside the sandbox's limits.
func TestJSONModule(t *testing.T) {
	out, err := runCustomSource(t, `
		local s = json.encode({name = "x", list = {1, 2.5, "a"}, flag = true, empty = {}})
		local back, err = json.decode('{"a": [1, {}, [], null], "b": {"c": "d"}, "n": null}')
		local bad, msg = json.decode("{")
		local cyc = {} cyc.self = cyc
		local none, cmsg = json.encode(cyc)
		return {spec = {
			encoded = s,
			decoded = back,
			reencoded = json.encode(back),
			spec = json.encode(obj.data.spec),
			badIsNil = bad == nil,
			badMessage = msg,
			cycleMessage = cmsg,
			err = err == nil,
			emptyIsNull = json.encode({}),
			nilIsNull = json.encode(nil),
		}}`, CustomInput{Data: ObjectData{Spec: map[string]any{"hosts": []any{}, "http": map[string]any{}}}})
	if err != nil {
		t.Fatal(err)
	}
	want := mustYAML(t, `
encoded: '{"flag":true,"list":[1,2.5,"a"],"name":"x"}'
decoded: {a: [1, {}, [], null], b: {c: d}}
reencoded: '{"a":[1,{},[],null],"b":{"c":"d"}}'
spec: '{"hosts":[],"http":{}}'
badIsNil: true
badMessage: "json.decode: unexpected EOF"
cycleMessage: "json.encode: value.self: table contains itself"
err: true
emptyIsNull: "null"
nilIsNull: "null"
`)
	assertSameJSON(t, out.Spec, want)
}

func TestJSONLimits(t *testing.T) {
	s, err := NewScript("json", `
		local t = {}
		for i = 1, 1000 do t[i] = "x" end
		return {spec = {s = json.encode(t)}}`)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Runner{Limits: Limits{ResultValues: 100}}.RunCustom(t.Context(), s, CustomInput{})
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "json.encode") {
		t.Errorf("encode over the value limit: %v", err)
	}
	s, _ = NewScript("json", `return {spec = {s = json.encode({string.rep("x", 600), string.rep("y", 600)})}}`)
	_, err = Runner{Limits: Limits{MaxStringBytes: 1000}}.RunCustom(t.Context(), s, CustomInput{})
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "json.encode") {
		t.Errorf("encode over the string limit: %v", err)
	}
	s, _ = NewScript("json", `return {spec = {v = json.decode("[" .. string.rep("1,", 500) .. "1]")}}`)
	_, err = Runner{Limits: Limits{ResultValues: 100}}.RunCustom(t.Context(), s, CustomInput{})
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "json.decode") {
		t.Errorf("decode over the value limit: %v", err)
	}
	s, _ = NewScript("json", `local v, msg = json.decode(string.rep("[", 200) .. string.rep("]", 200)) return {spec = {msg = msg}}`)
	out, err := Runner{}.RunCustom(t.Context(), s, CustomInput{})
	if err != nil || !strings.Contains(out.Spec["msg"].(string), "nested deeper") {
		t.Errorf("deep nesting: %v %v", out.Spec, err)
	}
}
