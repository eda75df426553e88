package bench

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	sigsyaml "sigs.k8s.io/yaml"
)

// sideBySideMaxSurgeEnv, when set, gives every Deployment of
// BenchmarkSideBySide a rolling update of that maxSurge and no
// unavailable pod (ROLLGATE_P5_MAXSURGE=100%), instead of the default
// 25% / 25%. With 100%, rollgate and Kruise Rollout end a release as Argo
// Rollouts does with a traffic router whatever the strategy says: every
// new pod at once beside the old ones, then the old ones gone; so the
// approval to completion compares one behaviour.
const sideBySideMaxSurgeEnv = "ROLLGATE_P5_MAXSURGE"

// sbsStrategy is the Deployments' rolling update of BenchmarkSideBySide:
// "" for the Kubernetes default, else maxSurge with maxUnavailable 0.
type sbsStrategy string

// sideBySideStrategy reads sideBySideMaxSurgeEnv.
func sideBySideStrategy(b *testing.B) sbsStrategy {
	v := os.Getenv(sideBySideMaxSurgeEnv)
	if v == "" {
		return ""
	}
	surge := intstr.Parse(v)
	if n, err := intstr.GetScaledValueFromIntOrPercent(&surge, sbsReplicas, true); err != nil || n < 1 {
		b.Fatalf("%s=%q: want a maxSurge of at least one pod, a count (2) or a percentage (100%%)", sideBySideMaxSurgeEnv, v)
	}
	return sbsStrategy(v)
}

// String says the strategy as the benchmark prints it.
func (s sbsStrategy) String() string {
	if s == "" {
		return "maxSurge 25%, maxUnavailable 25% (the default)"
	}
	return fmt.Sprintf("maxSurge %s, maxUnavailable 0", string(s))
}

// apply puts the strategy into the first Deployment of yaml, the
// manifests rig.Deployment and rig.App write: the fleet's and each image
// change's, so that a server-side apply never drops it.
func (s sbsStrategy) apply(yaml string) string {
	if s == "" {
		return yaml
	}
	const spec = "kind: Deployment\n"
	i := strings.Index(yaml, spec)
	j := strings.Index(yaml[max(i, 0):], "\nspec:\n")
	if i < 0 || j < 0 {
		panic("no Deployment spec in the manifest:\n" + yaml)
	}
	at := i + j + len("\nspec:\n")
	return yaml[:at] + fmt.Sprintf("  strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: %q, maxUnavailable: 0}}\n", string(s)) + yaml[at:]
}

// TestStrategyApply checks that the fleet's manifests and each image
// change carry the strategy on the Deployment alone, as the API server
// reads it.
func TestStrategyApply(t *testing.T) {
	for _, yaml := range []string{appYAML("app-007", "app:1.0", 4), deploymentYAML("app-007", "app:2.0", 0)} {
		if got := sbsStrategy("").apply(yaml); got != yaml {
			t.Errorf("the default strategy changed the manifest:\n%s", got)
		}
		var kinds []string
		for _, doc := range strings.Split(sbsStrategy("100%").apply(yaml), "\n---") {
			u := &unstructured.Unstructured{}
			if err := sigsyaml.Unmarshal([]byte(doc), &u.Object); err != nil {
				t.Fatalf("%v in\n%s", err, doc)
			}
			kinds = append(kinds, u.GetKind())
			ru, found, _ := unstructured.NestedMap(u.Object, "spec", "strategy", "rollingUpdate")
			if u.GetKind() != "Deployment" {
				if found {
					t.Errorf("%s got a strategy", u.GetKind())
				}
				continue
			}
			if ru["maxSurge"] != "100%" || fmt.Sprint(ru["maxUnavailable"]) != "0" {
				t.Errorf("rollingUpdate = %v, want maxSurge 100%% and maxUnavailable 0", ru)
			}
			if r, _, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "replicas"); r == nil {
				t.Errorf("replicas gone from\n%s", doc)
			}
		}
		if kinds[0] != "Deployment" {
			t.Errorf("kinds %v", kinds)
		}
	}
}
