package luascripts

import (
	"context"
	"fmt"
	"testing"
)

func TestSmoke(t *testing.T) {
	lib := NewLibrary()
	s, err := lib.Resolve("VirtualService", "networking.istio.io", nil)
	if err != nil {
		t.Fatal(err)
	}
	in := CustomInput{
		Data: ObjectData{Spec: map[string]any{"hosts": []any{"a"}, "http": []any{
			map[string]any{"route": []any{map[string]any{"destination": map[string]any{"host": "echo", "port": map[string]any{"number": int64(80)}}}}},
		}}},
		CanaryWeight: 20, StableWeight: 80,
		Target: Target{StableService: "echo", CanaryService: "echo-canary"},
	}
	out, err := Runner{}.RunCustom(context.Background(), s, in)
	fmt.Printf("%#v %v\n", out.Spec, err)
	fmt.Println(lib.BuiltinKeys())
}
