package rig

import (
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The builders give the objects the tests used to write out by hand (here
// as JSON).
func TestYAMLIsWhatTheTestsWroteByHand(t *testing.T) {
	steps := []string{`{traffic: "20%", replicas: 1, pause: {}}`, `{traffic: "100%", replicas: "100%"}`}
	for _, c := range []struct{ name, got, want string }{
		{"Rollout", Rollout{Name: "echoserver", Namespace: "demo", GitPath: "apps/echoserver/rollout.yaml", Steps: steps}.YAML(),
			`{"apiVersion": "rollgate.dev/v1alpha1", "kind": "Rollout", "metadata": {"name": "echoserver", "namespace": "demo"},
			  "spec": {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "echoserver"},
			    "strategy": {"canary": {"steps": [{"traffic": "20%", "replicas": 1, "pause": {}}, {"traffic": "100%", "replicas": "100%"}],
			      "trafficRoutings": [{"service": "echoserver", "gracePeriodSeconds": 0, "gateway": {"httpRouteName": "echoserver"}}]}},
			    "git": {"repository": "app-repo", "path": "apps/echoserver/rollout.yaml"}}}`},
		{"blue-green Rollout with labels, no traffic", Rollout{Name: "web", Labels: "{shard: a}", BlueGreen: true, WithoutTraffic: true, Steps: steps[1:], GitRepository: "fleet", GitPath: "web.yaml"}.YAML(),
			`{"apiVersion": "rollgate.dev/v1alpha1", "kind": "Rollout", "metadata": {"name": "web", "labels": {"shard": "a"}},
			  "spec": {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
			    "strategy": {"blueGreen": {"steps": [{"traffic": "100%", "replicas": "100%"}]}},
			    "git": {"repository": "fleet", "path": "web.yaml"}}}`},
		{"Rollout with onRollback hooks and its own strategy", Rollout{Name: "agent", Kind: "DaemonSet", OnRollback: []string{`{name: page, url: "http://hooks/rollback"}`},
			Strategy: "\n      steps:\n      - replicas: 1\n        hooks: {before: [{name: load, url: \"http://hooks/before\"}]}\n      trafficRoutings:\n      - service: agent\n        ingress: {name: agent}"}.YAML(),
			`{"apiVersion": "rollgate.dev/v1alpha1", "kind": "Rollout", "metadata": {"name": "agent"},
			  "spec": {"workloadRef": {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent"},
			    "strategy": {"onRollback": [{"name": "page", "url": "http://hooks/rollback"}],
			      "canary": {"steps": [{"replicas": 1, "hooks": {"before": [{"name": "load", "url": "http://hooks/before"}]}}],
			        "trafficRoutings": [{"service": "agent", "ingress": {"name": "agent"}}]}}}}`},
		{"App", App("demo", "echoserver", "echo:1.0", 5),
			`{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "echoserver", "namespace": "demo"},
			  "spec": {"replicas": 5, "selector": {"matchLabels": {"app": "echoserver"}},
			    "template": {"metadata": {"labels": {"app": "echoserver"}}, "spec": {"containers": [{"name": "echoserver", "image": "echo:1.0"}]}}}}
			---
			{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "echoserver", "namespace": "demo"},
			  "spec": {"selector": {"app": "echoserver"}, "ports": [{"port": 80, "targetPort": 8080}]}}
			---
			{"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute", "metadata": {"name": "echoserver", "namespace": "demo"},
			  "spec": {"parentRefs": [{"name": "public"}], "rules": [{"backendRefs": [{"name": "echoserver", "port": 80}]}]}}`},
	} {
		got, want := decode(t, c.got), decode(t, c.want)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n%v\nwant\n%v", c.name, got, want)
		}
	}
}

func decode(t *testing.T, docs string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, d := range strings.Split(docs, "---") {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(strings.TrimSpace(d)), &m); err != nil {
			t.Fatalf("%v in\n%s", err, d)
		}
		out = append(out, m)
	}
	return out
}

// Object is the typed Rollout of the YAML; a YAML that does not decode
// strictly fails the test.
func TestObjectIsTheTypedRollout(t *testing.T) {
	ro := Rollout{Name: "web", Namespace: "shop", Steps: []string{`{traffic: "20%", replicas: 1, pause: {}}`}, GitPath: "apps/web.yaml"}.Object(t)
	if ro.Name != "web" || ro.Namespace != "shop" || ro.Spec.WorkloadRef.Name != "web" || ro.Spec.Git == nil || ro.Spec.Git.Path != "apps/web.yaml" ||
		ro.Spec.Strategy.Canary == nil || len(ro.Spec.Strategy.Canary.Steps) != 1 || len(ro.Spec.Strategy.Canary.TrafficRoutings) != 1 {
		t.Fatalf("Object = %+v", ro)
	}
	if failed := Failure(func(tb testing.TB) {
		Rollout{Name: "web", Steps: []string{`{traffic: "20%", replica: 1}`}}.Object(tb)
	}); !strings.Contains(failed, "unknown field") {
		t.Fatalf("a misspelt step field: failure %q, want an unknown field", failed)
	}
}
