package luascripts

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestResolvePrecedence(t *testing.T) {
	override := `return {spec = {overridden = true}}`
	tests := []struct {
		name      string
		resolve   func(*Library, map[string]string) (Script, error)
		key       string
		builtinAs string
	}{
		{
			name: "custom resource",
			resolve: func(l *Library, o map[string]string) (Script, error) {
				return l.Resolve("VirtualService", "networking.istio.io", o)
			},
			key:       "lua.traffic.routing.VirtualService.networking.istio.io",
			builtinAs: "built-in VirtualService.networking.istio.io",
		},
		{
			name:      "ingress",
			resolve:   func(l *Library, o map[string]string) (Script, error) { return l.ResolveIngress("nginx", o) },
			key:       "lua.traffic.routing.ingress.nginx",
			builtinAs: "built-in ingress.nginx",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lib := NewLibrary()
			s, err := tt.resolve(lib, nil)
			if err != nil || !s.BuiltIn || s.Name != tt.builtinAs || s.Key != tt.key {
				t.Fatalf("without override: %+v, %v", s, err)
			}
			s, err = tt.resolve(lib, map[string]string{tt.key: override, "unrelated": "x"})
			if err != nil || s.BuiltIn || s.Name != tt.key {
				t.Fatalf("the ConfigMap script must win over the built-in: %+v, %v", s, err)
			}
			again, _ := tt.resolve(lib, map[string]string{tt.key: override})
			if again.proto != s.proto {
				t.Error("an unchanged override was compiled again")
			}
			changed, _ := tt.resolve(lib, map[string]string{tt.key: override + "\n"})
			if changed.proto == s.proto {
				t.Error("a changed override was not recompiled")
			}
		})
	}
}

func TestResolveDefaultsIngressToNginx(t *testing.T) {
	s, err := NewLibrary().ResolveIngress("", nil)
	if err != nil || s.Key != "lua.traffic.routing.ingress.nginx" {
		t.Fatalf("%+v %v", s, err)
	}
}

func TestResolveUnknown(t *testing.T) {
	lib := NewLibrary()
	tests := []struct {
		name string
		run  func() (Script, error)
		key  string
	}{
		{"unknown kind", func() (Script, error) { return lib.Resolve("Route", "example.com", nil) }, "lua.traffic.routing.Route.example.com"},
		{"unknown class", func() (Script, error) { return lib.ResolveIngress("traefik", nil) }, "lua.traffic.routing.ingress.traefik"},
		{"path traversal", func() (Script, error) { return lib.Resolve("VirtualService", "../trafficrouting", nil) }, "lua.traffic.routing.VirtualService.../trafficrouting"},
		{"core group", func() (Script, error) { return lib.Resolve("Service", "", nil) }, "lua.traffic.routing.Service."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.run()
			if !errors.Is(err, ErrNoScript) {
				t.Fatalf("got %v, want ErrNoScript", err)
			}
			if !strings.Contains(err.Error(), `"`+tt.key+`"`) {
				t.Errorf("error %q does not name the key %q to add", err, tt.key)
			}
		})
	}
}

func TestOverrideSyntaxError(t *testing.T) {
	lib := NewLibrary()
	key := CustomKey("Mapping", "getambassador.io")
	_, err := lib.Resolve("Mapping", "getambassador.io", map[string]string{key: "local x = \nreturn {spec = }"})
	var se *ScriptError
	if !errors.As(err, &se) || !errors.Is(err, ErrCompile) || se.Line != 2 || se.Script != key {
		t.Fatalf("got %v (%+v)", err, se)
	}
	if err := lib.Check(map[string]string{key: "return {", "other-key": "not lua"}); !errors.Is(err, ErrCompile) {
		t.Errorf("Check: got %v", err)
	}
	if err := lib.Check(map[string]string{IngressKey("x"): "return {}"}); err != nil {
		t.Errorf("Check of a valid script: %v", err)
	}
}

func TestScriptSizeLimit(t *testing.T) {
	_, err := NewScript("big", "return {}"+strings.Repeat(" ", MaxScriptBytes))
	if !errors.Is(err, ErrCompile) {
		t.Fatalf("got %v", err)
	}
}

func TestBuiltinsCompileAndHaveCases(t *testing.T) {
	lib := NewLibrary()
	keys := lib.BuiltinKeys()
	if len(keys) != 11 {
		t.Errorf("built-in keys: %v", keys)
	}
	for _, key := range keys {
		id := strings.TrimPrefix(key, KeyPrefix)
		var dir string
		var err error
		if class, ok := strings.CutPrefix(id, "ingress."); ok {
			_, err = lib.ResolveIngress(class, nil)
			dir = filepath.Join("testdata", "trafficrouting_ingress", class)
		} else {
			kind, group, _ := strings.Cut(id, ".")
			_, err = lib.Resolve(kind, group, nil)
			dir = filepath.Join("testdata", "trafficrouting", group, kind)
		}
		if err != nil {
			t.Errorf("%s: %v", key, err)
		}
		cases, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
		if len(cases) < 3 {
			t.Errorf("%s: %d golden cases in %s, want at least 3", key, len(cases), dir)
		}
	}
}

func TestRunCasesUserDir(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The user's nginx script replaces the built-in one.
	write("ingress.nginx.lua", `
		print("weight is", obj.weight)
		return {["example.com/weight"] = tostring(obj.weight)}`)
	caseYAML := `
rollout:
  apiVersion: rollgate.dev/v1alpha1
  kind: Rollout
  metadata: {name: app}
  spec:
    workloadRef: {apiVersion: apps/v1, kind: Deployment, name: app}
    strategy:
      canary:
        steps:
        - {traffic: "10%"}
        - {traffic: "20%"}
        trafficRoutings:
        - service: app
          ingress: {name: app}
original: {}
expected:
- example.com/weight: "10"
- example.com/weight: "25"
`
	write("cases/weights.yaml", caseYAML)
	write("broken.yaml", "rollout: [")
	var out strings.Builder
	failed, err := RunCases(dir, nil, &out)
	if err != nil {
		t.Fatal(err)
	}
	report := out.String()
	if failed != 2 {
		t.Errorf("failed = %d, want 2 (one step, one undecodable case)\n%s", failed, report)
	}
	for _, want := range []string{
		"--- FAIL: broken.yaml: decode:",
		"--- FAIL: cases/weights.yaml step 2 (lua.traffic.routing.ingress.nginx)",
		"weight is\t10",
		"-example.com/weight: \"25\"\n+example.com/weight: \"20\"",
		"2 cases, 2 steps, 2 failed",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	if _, err := RunCases(filepath.Join(dir, "missing"), nil, &out); err == nil {
		t.Error("a missing directory must be an error")
	}
}

func TestRunCasesReportsScriptErrors(t *testing.T) {
	dir := t.TempDir()
	src := "VirtualService.networking.istio.io.lua"
	if err := os.WriteFile(filepath.Join(dir, src), []byte("local x = nil\nreturn x.spec"), 0o644); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("testdata/trafficrouting/networking.istio.io/VirtualService/subsets.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "case.yaml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	failed, err := RunCases(dir, NewLibrary(), &out)
	if err != nil || failed != 2 {
		t.Fatalf("failed %d, err %v\n%s", failed, err, out.String())
	}
	if !strings.Contains(out.String(), `lua script "lua.traffic.routing.VirtualService.networking.istio.io": line 2: attempt to index`) {
		t.Errorf("report:\n%s", out.String())
	}
}

func TestUnifiedDiff(t *testing.T) {
	a := strings.Split("a\nb\nc\nd\ne\nf\ng\nh\ni\nj\nk\nl", "\n")
	b := strings.Split("a\nB\nc\nd\ne\nf\ng\nh\ni\nj\nk\nL\nm", "\n")
	want := `--- want
+++ got
@@ -1,5 +1,5 @@
 a
-b
+B
 c
 d
 e
@@ -9,4 +9,5 @@
 i
 j
 k
-l
+L
+m
`
	if got := unifiedDiff(a, b, "want", "got"); got != want {
		t.Errorf("diff:\n%s\nwant:\n%s", got, want)
	}
	if got := unifiedDiff(a, a, "want", "got"); got != "" {
		t.Errorf("equal inputs: %q", got)
	}
}

func TestScriptRunsConcurrently(t *testing.T) {
	s, err := NewLibrary().ResolveIngress("nginx", nil)
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 16)
	for i := 0; i < cap(errs); i++ {
		go func(w int32) {
			out, err := Runner{}.RunIngress(context.Background(), s, IngressInput{Weight: w})
			if err == nil && out["nginx.ingress.kubernetes.io/canary-weight"] == "" {
				err = errors.New("no weight")
			}
			errs <- err
		}(int32(i))
	}
	for i := 0; i < cap(errs); i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
