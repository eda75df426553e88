package luascripts

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

func runCustomSource(t *testing.T, src string, in CustomInput) (ObjectData, error) {
	t.Helper()
	s, err := NewScript("test", src)
	if err != nil {
		t.Fatal(err)
	}
	return Runner{}.RunCustom(context.Background(), s, in)
}

func mustYAML(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func assertSameJSON(t *testing.T, got, want any) {
	t.Helper()
	g, err1 := toYAML(got)
	w, err2 := toYAML(want)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	if g != w {
		t.Errorf("got:\n%s\nwant:\n%s", g, w)
	}
}

// TestRoundTripIsExact: a script that returns obj.data unchanged gives back
// exactly the original object, including empty lists and maps, numbers,
// booleans and nulls in lists.
func TestRoundTripIsExact(t *testing.T) {
	spec := mustYAML(t, `
hosts: []
gateways: [a, b]
emptyMap: {}
nested: {list: [{}, [], 1, 2.5, -3, true, false, "", null], deep: {deeper: {x: 1e15}}}
http:
- route: []
  weight: 0
`)
	data := ObjectData{Spec: spec, Labels: map[string]string{"app": "x"}, Annotations: map[string]string{}}
	out, err := runCustomSource(t, `return obj.data`, CustomInput{Data: data})
	if err != nil {
		t.Fatal(err)
	}
	assertSameJSON(t, out.Spec, spec)
	if !reflect.DeepEqual(out.Labels, data.Labels) || len(out.Annotations) != 0 {
		t.Errorf("labels %v annotations %v", out.Labels, out.Annotations)
	}
	if n, ok := out.Spec["nested"].(map[string]any)["list"].([]any)[3].(float64); !ok || n != 2.5 {
		t.Errorf("2.5 came back as %#v", out.Spec["nested"].(map[string]any)["list"].([]any)[3])
	}
	if n, ok := out.Spec["http"].([]any)[0].(map[string]any)["weight"].(int64); !ok || n != 0 {
		t.Errorf("integers must come back as int64")
	}
}

func TestEmptyAndUnmarkedTables(t *testing.T) {
	out, err := runCustomSource(t, `
		return {spec = {
			dropped = {},
			list = {1, 2},
			object = {x = 1},
			emptyList = rollgate.array(),
			emptyObject = rollgate.object(),
			listOfEmpty = {{}, rollgate.array()},
			withNull = {1, rollgate.null, 3},
			nullField = rollgate.null,
			copied = rollgate.copy(obj.data.spec.keep),
		}}`, CustomInput{Data: ObjectData{Spec: map[string]any{"keep": []any{}}}})
	if err != nil {
		t.Fatal(err)
	}
	assertSameJSON(t, out.Spec, mustYAML(t, `
list: [1, 2]
object: {x: 1}
emptyList: []
emptyObject: {}
listOfEmpty: [{}, []]
withNull: [1, null, 3]
copied: []
`))
}

func TestInvalidResults(t *testing.T) {
	tests := []struct{ src, msg string }{
		{`return {spec = {a = {1, 2, x = 3}}}`, "spec.a: table mixes array and object keys"},
		{`return {spec = {a = {[1] = 1, [3] = 3}}}`, "spec.a: table mixes array and object keys (or has holes)"},
		{`return {spec = {a = 0/0}}`, "spec.a: number NaN is not valid JSON"},
		{`local t = {} t.self = t return {spec = t}`, "spec.self: table contains itself"},
		{`return {spec = rollgate.array({1})}`, "spec must be an object"},
		{`local s = rollgate.array() s.x = 1 return {spec = {a = s}}`, "spec.a: list has non-integer keys"},
		{`return {spec = {}, label = {}}`, `unknown key "label"`},
		{`return {labels = {}}`, "the result has no spec"},
		{`return {spec = {}, labels = {a = {}}}`, `labels["a"]: expected a string, got table`},
		{`local o = rollgate.object() o[true] = 1 return {spec = {a = o}}`, "spec.a: object has a non-string key true"},
	}
	for _, tt := range tests {
		_, err := runCustomSource(t, tt.src, CustomInput{})
		if !errors.Is(err, ErrResult) || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: got %v, want ErrResult with %q", tt.src, err, tt.msg)
		}
	}
}

func TestResultSizeLimit(t *testing.T) {
	s, err := NewScript("big", `local t = {} for i = 1, 1000 do t[i] = i end return {spec = {t = t}}`)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Runner{Limits: Limits{ResultValues: 100}}.RunCustom(context.Background(), s, CustomInput{})
	if !errors.Is(err, ErrLimit) {
		t.Fatalf("got %v", err)
	}
}

func TestLabelsKeptUnlessReturned(t *testing.T) {
	data := ObjectData{Spec: map[string]any{}, Labels: map[string]string{"a": "1"}, Annotations: map[string]string{"b": "2"}}
	out, err := runCustomSource(t, `return {spec = obj.data.spec, annotations = {n = 5, t = true}}`, CustomInput{Data: data})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(out.Labels, data.Labels) || !reflect.DeepEqual(out.Annotations, map[string]string{"n": "5", "t": "true"}) {
		t.Errorf("labels %v annotations %v", out.Labels, out.Annotations)
	}
}

func TestStepWeight(t *testing.T) {
	pct := func(s string) *string { return &s }
	match := []v1alpha1.HttpRouteMatch{{Headers: []gatewayv1.HTTPHeaderMatch{{Name: "x", Value: "y"}}}}
	tests := []struct {
		step v1alpha1.TrafficRoutingStrategy
		want int32
		err  bool
	}{
		{v1alpha1.TrafficRoutingStrategy{}, -1, false},
		{v1alpha1.TrafficRoutingStrategy{Traffic: pct("0%")}, 0, false},
		{v1alpha1.TrafficRoutingStrategy{Traffic: pct("5%")}, 5, false},
		{v1alpha1.TrafficRoutingStrategy{Traffic: pct("100%")}, 100, false},
		{v1alpha1.TrafficRoutingStrategy{Traffic: pct("40%"), Matches: match}, -1, false},
		{v1alpha1.TrafficRoutingStrategy{Traffic: pct("150%")}, 0, true},
		{v1alpha1.TrafficRoutingStrategy{Traffic: pct("5")}, 0, true},
	}
	for _, tt := range tests {
		got, err := StepWeight(tt.step)
		if (err != nil) != tt.err || (err == nil && got != tt.want) {
			t.Errorf("StepWeight(%+v) = %d, %v", tt.step, got, err)
		}
		if err != nil && !errors.Is(err, ErrInput) {
			t.Errorf("error %v is not ErrInput", err)
		}
	}
}

// TestScriptSeesContract checks the names and shapes a script sees: the
// camelCase field names of the Rollout, with Gateway API defaults, in Kruise
// Rollout's shape: what Kruise leaves out is nil, stableWeight is
// 100 - canaryWeight even for -1, the ingress weight is a string.
func TestScriptSeesContract(t *testing.T) {
	exact := gatewayv1.HeaderMatchRegularExpression
	traffic := "30%"
	step := v1alpha1.TrafficRoutingStrategy{
		Traffic: &traffic,
		Matches: []v1alpha1.HttpRouteMatch{
			{Path: &gatewayv1.HTTPPathMatch{}, Headers: []gatewayv1.HTTPHeaderMatch{{Name: "X-A", Value: "1"}, {Type: &exact, Name: "X-B", Value: "^b"}}},
			{QueryParams: []gatewayv1.HTTPQueryParamMatch{{Name: "q", Value: "v"}}},
		},
		RequestHeaderModifier: &gatewayv1.HTTPHeaderFilter{Add: []gatewayv1.HTTPHeader{{Name: "X-Add", Value: "a"}}},
	}
	target := Target{
		StableService: "svc", CanaryService: "svc-canary", StableRevision: "s1", CanaryRevision: "c1",
		RevisionLabelKey: "pod-template-hash",
		PatchPodMetadata: &v1alpha1.PatchPodTemplateMetadata{Labels: map[string]string{"canary": "true"}},
	}
	in, err := NewCustomInput(ObjectData{}, step, target)
	if err != nil {
		t.Fatal(err)
	}
	out, err := runCustomSource(t, `
		local seen = rollgate.copy(obj)
		seen.data = nil
		return {spec = seen}`, in)
	if err != nil {
		t.Fatal(err)
	}
	assertSameJSON(t, out.Spec, mustYAML(t, `
canaryWeight: -1
stableWeight: 101
canaryService: svc-canary
stableService: svc
stableRevision: s1
canaryRevision: c1
revisionLabelKey: pod-template-hash
matches:
- path: {type: PathPrefix, value: /}
  headers:
  - {type: Exact, name: X-A, value: "1"}
  - {type: RegularExpression, name: X-B, value: ^b}
- queryParams:
  - {type: Exact, name: q, value: v}
requestHeaderModifier:
  add: [{name: X-Add, value: a}]
patchPodMetadata:
  labels: {canary: "true"}
  annotations: {}
`))
	ingress, err := NewIngressInput(map[string]string{"a": "b"}, v1alpha1.TrafficRoutingStrategy{Traffic: &traffic}, target)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := NewScript("ingress", `return {w = obj.weight, a = obj.annotations.a, c = obj.canaryService, n = obj.matches == nil, t = type(obj.weight)}`)
	ann, err := Runner{}.RunIngress(context.Background(), s, ingress)
	if err != nil || !reflect.DeepEqual(ann, map[string]string{"w": "30", "a": "b", "c": "svc-canary", "n": "true", "t": "string"}) {
		t.Errorf("ingress input: %v %v", ann, err)
	}
}

func TestObjectDataFromAndApplyTo(t *testing.T) {
	obj := mustYAML(t, `
apiVersion: v1
kind: X
metadata: {name: obj, labels: {a: "1"}, annotations: {b: "2"}}
spec: {x: 1}
`)
	d, err := ObjectDataFrom(obj)
	if err != nil {
		t.Fatal(err)
	}
	if d.Labels["a"] != "1" || d.Annotations["b"] != "2" || d.Spec["x"] != float64(1) {
		t.Fatalf("%+v", d)
	}
	ObjectData{Spec: map[string]any{"z": 2}, Labels: map[string]string{"c": "3"}}.ApplyTo(obj)
	assertSameJSON(t, obj, mustYAML(t, `
apiVersion: v1
kind: X
metadata: {name: obj, labels: {c: "3"}}
spec: {z: 2}
`))
	if _, err := ObjectDataFrom(map[string]any{"metadata": map[string]any{"labels": map[string]any{"a": 1}}}); !errors.Is(err, ErrInput) {
		t.Errorf("non-string label: %v", err)
	}
	if _, err := ObjectDataFrom(map[string]any{"spec": "x"}); !errors.Is(err, ErrInput) {
		t.Errorf("non-object spec: %v", err)
	}
}

func TestInputConversionErrors(t *testing.T) {
	_, err := runCustomSource(t, `return obj.data`, CustomInput{Data: ObjectData{Spec: map[string]any{"ch": make(chan int)}}})
	if !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), "obj.data.spec.ch") {
		t.Errorf("got %v", err)
	}
}
