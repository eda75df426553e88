package v1alpha1_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/rollgate/rollgate/test/envtest"
	"github.com/rollgate/rollgate/test/rig"
)

// k is a client of a real kube-apiserver with the rollgate CRDs installed.
var k client.Client

func TestMain(m *testing.M) {
	os.Exit(envtest.RunAgainstEachAPIServer(m, func(c client.Client) error {
		k = c
		return nil
	}))
}

// goodRollout is a valid Rollout that each bad case breaks in one place.
var goodRollout = rig.Rollout{Name: "echo", Namespace: "default", Steps: []string{
	`{traffic: "5%", replicas: 1, pause: {}}`, `{traffic: "40%", replicas: "40%", pause: {duration: 600}}`, `{traffic: "100%", replicas: "100%"}`,
}}.YAML()

func parse(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		t.Fatalf("parse: %v", err)
	}
	return u
}

func canary(u *unstructured.Unstructured) map[string]any {
	return u.Object["spec"].(map[string]any)["strategy"].(map[string]any)["canary"].(map[string]any)
}

func steps(u *unstructured.Unstructured) []any { return canary(u)["steps"].([]any) }

func step(u *unstructured.Unstructured, i int) map[string]any { return steps(u)[i].(map[string]any) }

func spec(u *unstructured.Unstructured) map[string]any { return u.Object["spec"].(map[string]any) }

// TestRolloutRefusedWithHelpfulMessage creates bad Rollouts against a real
// API server and checks that each is refused with a message that names the
// field and says what is allowed.
// celBounds are the cases whose bound is a CEL rule, not an OpenAPI minimum.
var celBounds = map[string]bool{
	"negative grace period": true, "approval for step 0": true, "approval for attempt 0": true,
	"zero progress deadline": true, "retry of attempt 1": true,
}

func TestRolloutRefusedWithHelpfulMessage(t *testing.T) {
	cases := []struct {
		name    string
		breakIt func(u *unstructured.Unstructured)
		want    []string
	}{
		{"both strategies", func(u *unstructured.Unstructured) {
			spec(u)["strategy"].(map[string]any)["blueGreen"] = map[string]any{"steps": []any{map[string]any{"replicas": 1}}}
		}, []string{"spec.strategy", "exactly one of canary or blueGreen"}},
		{"no strategy", func(u *unstructured.Unstructured) {
			spec(u)["strategy"] = map[string]any{"paused": true}
		}, []string{"spec.strategy", "exactly one of canary or blueGreen"}},
		{"traffic above 100%", func(u *unstructured.Unstructured) { step(u, 0)["traffic"] = "120%" },
			[]string{"spec.strategy.canary.steps[0].traffic", "percentage from \"0%\" to \"100%\""}},
		{"traffic not a percentage", func(u *unstructured.Unstructured) { step(u, 0)["traffic"] = "5" },
			[]string{"spec.strategy.canary.steps[0].traffic", "such as \"5%\""}},
		{"replicas decreasing", func(u *unstructured.Unstructured) {
			step(u, 0)["replicas"] = int64(3)
			step(u, 1)["replicas"] = int64(2)
		}, []string{"spec.strategy.canary", "replicas must not decrease"}},
		{"replica percentages decreasing", func(u *unstructured.Unstructured) {
			step(u, 1)["replicas"] = "50%"
			step(u, 2)["replicas"] = "20%"
		}, []string{"spec.strategy.canary", "percentages must not decrease"}},
		{"replicas zero", func(u *unstructured.Unstructured) { step(u, 0)["replicas"] = int64(0) },
			[]string{"spec.strategy.canary.steps[0].replicas", "(>= 1)"}},
		{"replicas 0%", func(u *unstructured.Unstructured) { step(u, 0)["replicas"] = "0%" },
			[]string{"spec.strategy.canary.steps[0].replicas", "\"1%\" to \"100%\""}},
		{"negative pause", func(u *unstructured.Unstructured) { step(u, 1)["pause"] = map[string]any{"duration": int64(-5)} },
			[]string{"spec.strategy.canary.steps[1].pause.duration", "number of seconds (>= 0)"}},
		{"pause in words", func(u *unstructured.Unstructured) { step(u, 1)["pause"] = map[string]any{"duration": "ten minutes"} },
			// The schema's pattern says it (a CEL rule with a regular
			// expression there is too costly for Kubernetes 1.30).
			[]string{"spec.strategy.canary.steps[1].pause.duration", "should match", "(ms|s|m|h)"}},
		{"negative pause", func(u *unstructured.Unstructured) { step(u, 1)["pause"] = map[string]any{"duration": int64(-5)} },
			[]string{"spec.strategy.canary.steps[1].pause.duration", "\"10m\""}},
		{"unknown workload kind", func(u *unstructured.Unstructured) {
			spec(u)["workloadRef"].(map[string]any)["kind"] = "CronJob"
		}, []string{"spec.workloadRef.kind", "Unsupported value: \"CronJob\"", "\"Deployment\", \"StatefulSet\", \"DaemonSet\""}},
		{"unknown workload apiVersion", func(u *unstructured.Unstructured) {
			spec(u)["workloadRef"].(map[string]any)["apiVersion"] = "apps/v1beta1"
		}, []string{"spec.workloadRef.apiVersion", "supported values: \"apps/v1\""}},
		{"group not a DNS label", func(u *unstructured.Unstructured) { spec(u)["group"] = map[string]any{"name": "Checkout_API"} },
			[]string{"spec.group.name", "should match"}},
		{"group without a name", func(u *unstructured.Unstructured) { spec(u)["group"] = map[string]any{} },
			[]string{"spec.group.name", "Required value"}},
		{"empty steps", func(u *unstructured.Unstructured) { canary(u)["steps"] = []any{} },
			[]string{"spec.strategy.canary.steps", "at least 1 items"}},
		{"too many steps", func(u *unstructured.Unstructured) {
			var s []any
			for range 51 {
				s = append(s, map[string]any{"replicas": int64(1)})
			}
			canary(u)["steps"] = s
		}, []string{"spec.strategy.canary.steps", "must have at most 50 items"}},
		{"step without replicas or traffic", func(u *unstructured.Unstructured) {
			steps(u)[1] = map[string]any{"pause": map[string]any{}}
		}, []string{"spec.strategy.canary.steps[1]", "each step needs replicas"}},
		{"empty match", func(u *unstructured.Unstructured) { step(u, 0)["matches"] = []any{map[string]any{}} },
			[]string{"spec.strategy.canary.steps[0].matches[0]", "at least one of path, headers or queryParams"}},
		{"malformed header match type", func(u *unstructured.Unstructured) {
			step(u, 0)["matches"] = []any{map[string]any{"headers": []any{map[string]any{"type": "Fuzzy", "name": "x-user", "value": "a"}}}}
		}, []string{"spec.strategy.canary.steps[0].matches[0].headers[0].type", "Unsupported value: \"Fuzzy\""}},
		{"too many matches", func(u *unstructured.Unstructured) {
			var m []any
			for range 17 {
				m = append(m, map[string]any{"headers": []any{map[string]any{"name": "x-a", "value": "b"}}})
			}
			step(u, 0)["matches"] = m
		}, []string{"spec.strategy.canary.steps[0].matches", "must have at most 16 items"}},
		{"traffic without trafficRoutings", func(u *unstructured.Unstructured) { delete(canary(u), "trafficRoutings") },
			[]string{"spec.strategy.canary", "trafficRoutings is empty"}},
		{"two routers in one trafficRoutings entry", func(u *unstructured.Unstructured) {
			r := canary(u)["trafficRoutings"].([]any)[0].(map[string]any)
			r["ingress"] = map[string]any{"name": "echo"}
		}, []string{"spec.strategy.canary.trafficRoutings[0]", "exactly one of ingress, gateway or customNetworkRefs"}},
		{"trafficRoutings without service", func(u *unstructured.Unstructured) {
			delete(canary(u)["trafficRoutings"].([]any)[0].(map[string]any), "service")
		}, []string{"spec.strategy.canary.trafficRoutings[0].service", "Required value"}},
		{"negative grace period", func(u *unstructured.Unstructured) {
			canary(u)["trafficRoutings"].([]any)[0].(map[string]any)["gracePeriodSeconds"] = int64(-1)
		}, []string{"spec.strategy.canary.trafficRoutings[0].gracePeriodSeconds", "must be 0 or more: the seconds to wait after each traffic change"}},
		{"canary Deployment for a StatefulSet", func(u *unstructured.Unstructured) {
			spec(u)["workloadRef"].(map[string]any)["kind"] = "StatefulSet"
			canary(u)["enableExtraWorkloadForCanary"] = true
		}, []string{"spec", "enableExtraWorkloadForCanary is only supported for workloadRef.kind Deployment"}},
		{"blue-green for a DaemonSet", func(u *unstructured.Unstructured) {
			spec(u)["workloadRef"].(map[string]any)["kind"] = "DaemonSet"
			spec(u)["strategy"] = map[string]any{"blueGreen": map[string]any{"steps": []any{map[string]any{"replicas": "100%"}}}}
		}, []string{"spec", "blueGreen is only supported for workloadRef.kind Deployment"}},
		{"Service name too long for its canary", func(u *unstructured.Unstructured) {
			canary(u)["trafficRoutings"].([]any)[0].(map[string]any)["service"] = strings.Repeat("s", 57)
		}, []string{"spec.strategy.canary.trafficRoutings[0].service", "56"}}, // 1.36: "may not be more than 56 bytes", 1.30: "may not be longer than 56"
		{"bad failureThreshold", func(u *unstructured.Unstructured) { canary(u)["failureThreshold"] = "many" },
			[]string{"spec.strategy.canary.failureThreshold", "number of pods (>= 0) or a percentage"}},
		{"approval for step 0", func(u *unstructured.Unstructured) {
			spec(u)["approvals"] = []any{map[string]any{"revision": "abc", "step": int64(0)}}
		}, []string{"spec.approvals[0].step", "steps are numbered from 1"}},
		{"approval for attempt 0", func(u *unstructured.Unstructured) {
			spec(u)["approvals"] = []any{map[string]any{"revision": "abc", "step": int64(1), "attempt": int64(0)}}
		}, []string{"spec.approvals[0].attempt", "attempts are numbered from 1: leave it unset"}},
		{"approval without revision", func(u *unstructured.Unstructured) {
			spec(u)["approvals"] = []any{map[string]any{"step": int64(1)}}
		}, []string{"spec.approvals[0].revision", "Required value"}},
		{"git path escaping the repository", func(u *unstructured.Unstructured) {
			spec(u)["git"] = map[string]any{"repository": "app", "path": "../other/rollout.yaml"}
		}, []string{"spec.git.path", "relative path to a .yaml or .yml file"}},
		{"zero progress deadline", func(u *unstructured.Unstructured) { spec(u)["progressDeadlineSeconds"] = int64(0) },
			[]string{"spec.progressDeadlineSeconds", "must be at least 1"}},
		{"retry of attempt 1", func(u *unstructured.Unstructured) {
			spec(u)["retry"] = map[string]any{"revision": "abc", "attempt": int64(1)}
		}, []string{"spec.retry.attempt", "must be 2 or more: set status.attempt + 1"}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			u := parse(t, goodRollout)
			u.SetName(fmt.Sprintf("bad-%d", i))
			tc.breakIt(u)
			err := k.Create(context.Background(), u)
			if err == nil {
				t.Fatalf("the API server accepted the bad spec")
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want an Invalid error, got %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message lacks %q:\n%v", w, err)
				}
			}
			// Bounds are CEL rules with a message that says the fix, so
			// they come without the API server's note that other rules went
			// unchecked (which it adds after any OpenAPI schema error:
			// enum, required, sizes).
			if celBounds[tc.name] && strings.Contains(err.Error(), "validation rules were not checked") {
				t.Errorf("message carries validation noise:\n%v", err)
			}
		})
	}
}

func TestWorkloadRefIsImmutable(t *testing.T) {
	ctx := context.Background()
	u := parse(t, goodRollout)
	u.SetName("immutable")
	if err := k.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	spec(u)["workloadRef"].(map[string]any)["name"] = "other"
	err := k.Update(ctx, u)
	if err == nil || !strings.Contains(err.Error(), "spec.workloadRef is immutable") {
		t.Fatalf("want workloadRef immutable error, got %v", err)
	}
}

func TestAnalysisTemplateAndRepositoryRefused(t *testing.T) {
	cases := []struct {
		name string
		doc  string
		want string
	}{
		{"metric without condition", `
apiVersion: rollgate.dev/v1alpha1
kind: AnalysisTemplate
metadata: {name: no-condition, namespace: default}
spec:
  metrics:
  - name: rate
    provider: {prometheus: {address: "http://p:9090", query: "up"}}
`, "a metric needs successCondition or failureCondition"},
		{"metric with two providers", `
apiVersion: rollgate.dev/v1alpha1
kind: AnalysisTemplate
metadata: {name: two-providers, namespace: default}
spec:
  metrics:
  - name: rate
    successCondition: "result[0] > 0"
    provider:
      prometheus: {address: "http://p:9090", query: "up"}
      web: {url: "http://w", jsonPath: "{.v}"}
`, "exactly one of prometheus, web or job"},
		{"metric with a header the HTTP client manages", `
apiVersion: rollgate.dev/v1alpha1
kind: AnalysisTemplate
metadata: {name: reserved-header, namespace: default}
spec:
  metrics:
  - name: rate
    successCondition: "result[0] > 0"
    provider:
      prometheus:
        address: "http://p:9090"
        query: "up"
        headers: [{name: X-Scope-OrgID, value: team-a}, {name: Content-Type, value: text/plain}]
`, "header name is managed by the HTTP client and cannot be set"},
		{"repository with a bad URL", `
apiVersion: rollgate.dev/v1alpha1
kind: Repository
metadata: {name: bad-url, namespace: default}
spec: {url: "ftp://example.com/repo.git"}
`, "spec.url"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := k.Create(context.Background(), parse(t, tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error containing %q, got %v", tc.want, err)
			}
		})
	}
}

// TestExamplesAccepted creates every rollgate.dev object in examples/.
func TestExamplesAccepted(t *testing.T) {
	files, err := filepath.Glob("../../examples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	more, _ := filepath.Glob("../../examples/*/*.yaml")
	files = append(files, more...)
	created := 0
	for _, f := range files {
		for i, obj := range readObjects(t, f) {
			if obj.GroupVersionKind().Group != "rollgate.dev" {
				continue
			}
			obj.SetNamespace("default")
			obj.SetName(fmt.Sprintf("example-%d-%d-%s", created, i, obj.GetName()))
			if err := k.Create(context.Background(), obj); err != nil {
				t.Errorf("%s: %s %s refused: %v", f, obj.GetKind(), obj.GetName(), err)
			}
			created++
		}
	}
	if created < 8 {
		t.Fatalf("only %d rollgate.dev objects found in examples/; expected at least 8", created)
	}
}

// TestREADMERolloutAccepted creates the Rollout the README shows: the
// first thing a reader copies must be valid.
func TestREADMERolloutAccepted(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), "```yaml\n")
	block, _, closed := strings.Cut(rest, "```")
	if !ok || !closed {
		t.Fatal("README.md has no yaml block")
	}
	f := filepath.Join(t.TempDir(), "rollout.yaml")
	if err := os.WriteFile(f, []byte(block), 0o600); err != nil {
		t.Fatal(err)
	}
	objs := readObjects(t, f)
	if len(objs) != 1 || objs[0].GetKind() != "Rollout" {
		t.Fatalf("README.md's first yaml block holds %d objects, want one Rollout", len(objs))
	}
	objs[0].SetNamespace("default")
	objs[0].SetName("readme")
	if err := k.Create(context.Background(), objs[0]); err != nil {
		t.Fatalf("README.md's Rollout refused: %v", err)
	}
}

func readObjects(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var out []*unstructured.Unstructured
	for {
		var raw runtime.RawExtension
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(raw.Raw) == 0 {
			continue
		}
		var head struct{ Kind string }
		if err := json.Unmarshal(raw.Raw, &head); err == nil && head.Kind == "" {
			continue // not a Kubernetes object (a freezes file: strategy/rules tests it)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(raw.Raw); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, u)
	}
	return out
}
