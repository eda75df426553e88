package argocd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"
	"sigs.k8s.io/yaml"
)

// This file runs the scripts the way Argo CD runs resource customizations
// configured in argocd-cm, so that a script that works here works there:
//
//   - a fresh Lua state per run, with only the package, base and table
//     libraries (argocd-cm scripts get no string, math or io library; Argo
//     CD adds a restricted os table, which the scripts do not use);
//   - a one-second deadline;
//   - the live object, as the API server returns it (integers as int64),
//     converted to Lua tables as the global obj;
//   - the returned value converted to JSON with the rules of the JSON
//     library Argo CD uses (an empty table is [], keys must be all
//     1..n or all strings), then decoded again;
//   - for actions, Argo CD's repair of empty objects: where the live object
//     had an object and the script returned an empty table, the object is
//     put back. That repair walks lists by index and fails when a list the
//     live object has came back longer with an object in the new place
//     (argoproj/argo-cd#6248); the runner fails the same way.

// errListGrew is the failure Argo CD hits when an action makes a list of
// the live object longer.
var errListGrew = errors.New("an Argo CD action cannot add elements to a list the live object already has (argoproj/argo-cd#6248)")

// healthResult is what Argo CD reads from a health script.
type healthResult struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

// discovered is what Argo CD reads for one action of a discovery script.
type discovered struct {
	Disabled    bool
	IconClass   string
	DisplayName string
}

// runHealth runs the health script on obj.
func runHealth(t *testing.T, obj map[string]any) healthResult {
	t.Helper()
	out, err := runScript(Health(), obj)
	if err != nil {
		t.Fatalf("health.lua: %v", err)
	}
	var h healthResult
	if err := json.Unmarshal(out, &h); err != nil {
		t.Fatalf("health.lua returned %s, not {status, message}: %v", out, err)
	}
	switch h.Status {
	case "Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown":
	default:
		t.Fatalf("health.lua returned status %q, which Argo CD replaces by Unknown", h.Status)
	}
	return h
}

// runDiscovery runs the discovery script on obj and returns the actions by
// name.
func runDiscovery(t *testing.T, obj map[string]any) map[string]discovered {
	t.Helper()
	out, err := runScript(Discovery(), obj)
	if err != nil {
		t.Fatalf("discovery.lua: %v", err)
	}
	found := map[string]discovered{}
	if string(out) == "[]" {
		return found
	}
	var raw map[string]any
	if err := json.Unmarshal(out, &raw); err != nil {
		t.Fatalf("discovery.lua returned %s, not an object of actions: %v", out, err)
	}
	for name, v := range raw {
		var d discovered
		if m, ok := v.(map[string]any); ok { // an empty table ([]) is an enabled action
			d.Disabled, _ = m["disabled"].(bool)
			d.IconClass, _ = m["iconClass"].(string)
			d.DisplayName, _ = m["displayName"].(string)
		}
		found[name] = d
	}
	return found
}

// runAction runs the named action on obj and returns the object Argo CD
// would patch the live one to. obj is not modified.
func runAction(t *testing.T, name string, obj map[string]any) (map[string]any, error) {
	t.Helper()
	script, err := Action(name)
	if err != nil {
		t.Fatal(err)
	}
	out, err := runScript(script, obj)
	if err != nil {
		return nil, err
	}
	if len(out) == 0 || out[0] != '{' {
		t.Fatalf("action %s returned %s: the scripts return the modified object", name, out)
	}
	got, err := decodeJSON(out)
	if err != nil {
		t.Fatalf("action %s returned %s: %v", name, out, err)
	}
	m := got.(map[string]any)
	if err := restoreObjects(m, obj, name); err != nil {
		return nil, err
	}
	return m, nil
}

// runScript runs script with obj as the global obj and returns the JSON
// Argo CD makes of the returned value.
func runScript(script string, obj map[string]any) ([]byte, error) {
	L := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer L.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{
		{lua.LoadLibName, lua.OpenPackage},
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
	} {
		L.Push(L.NewFunction(lib.open))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	L.SetContext(ctx)
	L.SetGlobal("obj", toLua(L, obj))
	if err := L.DoString(script); err != nil {
		var apiErr *lua.ApiError
		if errors.As(err, &apiErr) && apiErr.Object != nil {
			return nil, errors.New(apiErr.Object.String()) // the message, without the traceback
		}
		return nil, err
	}
	ret := L.Get(-1)
	if ret.Type() != lua.LTTable {
		return nil, fmt.Errorf("script returned a %s, Argo CD expects a table", ret.Type())
	}
	v, err := fromLua(ret, 0)
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// toLua converts a decoded object to Lua values as Argo CD does.
func toLua(L *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case bool:
		return lua.LBool(v)
	case string:
		return lua.LString(v)
	case int64:
		return lua.LNumber(v)
	case float64:
		return lua.LNumber(v)
	case []any:
		t := L.CreateTable(len(v), 0)
		for _, e := range v {
			t.Append(toLua(L, e))
		}
		return t
	case map[string]any:
		t := L.CreateTable(0, len(v))
		for k, e := range v {
			t.RawSetString(k, toLua(L, e))
		}
		return t
	}
	return lua.LNil
}

// fromLua converts a returned Lua value to what Argo CD's JSON library
// encodes it as.
func fromLua(v lua.LValue, depth int) (any, error) {
	if depth > 64 {
		return nil, errors.New("returned tables nest too deep (a cycle?)")
	}
	switch v := v.(type) {
	case lua.LBool:
		return bool(v), nil
	case lua.LNumber:
		return float64(v), nil
	case lua.LString:
		return string(v), nil
	case *lua.LNilType:
		return nil, nil
	case *lua.LTable:
		return tableFromLua(v, depth)
	}
	return nil, fmt.Errorf("cannot encode a %s to JSON", v.Type())
}

// tableFromLua encodes a table: empty is a list, keys 1..n in order a
// list, string keys an object; anything else is an error.
func tableFromLua(t *lua.LTable, depth int) (any, error) {
	key, val := t.Next(lua.LNil)
	switch key.Type() {
	case lua.LTNil:
		return []any{}, nil
	case lua.LTNumber:
		var list []any
		for want := lua.LNumber(1); key != lua.LNil; want++ {
			if key != want {
				return nil, fmt.Errorf("table has keys that are not 1..n in order (%v): Argo CD cannot encode it", key)
			}
			e, err := fromLua(val, depth+1)
			if err != nil {
				return nil, err
			}
			list = append(list, e)
			key, val = t.Next(key)
		}
		return list, nil
	case lua.LTString:
		obj := map[string]any{}
		for ; key != lua.LNil; key, val = t.Next(key) {
			if key.Type() != lua.LTString {
				return nil, fmt.Errorf("table mixes string and %s keys: Argo CD cannot encode it", key.Type())
			}
			e, err := fromLua(val, depth+1)
			if err != nil {
				return nil, err
			}
			obj[string(key.(lua.LString))] = e
		}
		return obj, nil
	}
	return nil, fmt.Errorf("table has a %s key: Argo CD cannot encode it", key.Type())
}

// restoreObjects puts back the objects of live that came back as empty
// lists, and fails where Argo CD's walk over lists fails.
func restoreObjects(got, live map[string]any, path string) error {
	for k, old := range live {
		nv, ok := got[k]
		if !ok {
			continue
		}
		switch nv := nv.(type) {
		case map[string]any:
			if om, ok := old.(map[string]any); ok {
				if err := restoreObjects(nv, om, path+"."+k); err != nil {
					return err
				}
			}
		case []any:
			switch ov := old.(type) {
			case map[string]any:
				if len(nv) == 0 {
					got[k] = ov
				}
			case []any:
				if err := restoreInList(nv, ov, path+"."+k); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// restoreInList is restoreObjects for the elements of a list, by index.
func restoreInList(got, live []any, path string) error {
	for i, nv := range got {
		switch nv.(type) {
		case map[string]any, []any:
		default:
			continue
		}
		if i >= len(live) {
			return fmt.Errorf("%s[%d]: %w", path, i, errListGrew)
		}
		switch nv := nv.(type) {
		case map[string]any:
			if om, ok := live[i].(map[string]any); ok {
				if err := restoreObjects(nv, om, fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return err
				}
			}
		case []any:
			if ol, ok := live[i].([]any); ok {
				if err := restoreInList(nv, ol, fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// loadFixture reads testdata/<name>.yaml as the API server would return
// the object.
func loadFixture(t *testing.T, name string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return decodeYAML(t, raw).(map[string]any)
}

// decodeYAML decodes YAML with integers as int64, as unstructured objects
// hold them.
func decodeYAML(t *testing.T, raw []byte) any {
	t.Helper()
	j, err := yaml.YAMLToJSON(raw)
	if err != nil {
		t.Fatal(err)
	}
	v, err := decodeJSON(j)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// decodeJSON decodes JSON with integers as int64 and other numbers as
// float64.
func decodeJSON(j []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(j))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return numbers(v), nil
}

func numbers(v any) any {
	switch v := v.(type) {
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return i
		}
		f, _ := v.Float64()
		return f
	case []any:
		for i := range v {
			v[i] = numbers(v[i])
		}
	case map[string]any:
		for k := range v {
			v[k] = numbers(v[k])
		}
	}
	return v
}
