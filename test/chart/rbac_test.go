package chart

import (
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// rules renders the chart and returns the rules of every Role and ClusterRole.
func rules(t *testing.T, args ...string) []rbacv1.PolicyRule {
	t.Helper()
	out := helm(t, append([]string{"template", "rg", chartDir(), "--namespace", "rollgate-system"}, args...)...)
	var all []rbacv1.PolicyRule
	for _, doc := range strings.Split(out, "\n---\n") {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil || (meta.Kind != "ClusterRole" && meta.Kind != "Role") {
			continue
		}
		var role rbacv1.ClusterRole
		if err := utilyaml.Unmarshal([]byte(doc), &role); err != nil {
			t.Fatal(err)
		}
		all = append(all, role.Rules...)
	}
	if len(all) == 0 {
		t.Fatal("no RBAC rules rendered")
	}
	return all
}

// TestRBACHasNoWildcards: every rule names its groups, resources and verbs.
func TestRBACHasNoWildcards(t *testing.T) {
	for _, values := range [][]string{nil, {"-f", "testdata/full-values.yaml"}} {
		for _, r := range rules(t, values...) {
			for _, list := range [][]string{r.APIGroups, r.Resources, r.Verbs, r.ResourceNames} {
				for _, v := range list {
					if strings.Contains(v, "*") {
						t.Errorf("wildcard %q in rule %+v", v, r)
					}
				}
			}
			if len(r.NonResourceURLs) > 0 {
				t.Errorf("non-resource URLs granted: %+v", r)
			}
		}
	}
}

// TestRBACCoversWhatTheControllerDoes lists what the controller needs; a
// missing permission would fail on a real cluster only.
func TestRBACCoversWhatTheControllerDoes(t *testing.T) {
	rs := rules(t)
	need := []struct{ group, resource, verb string }{
		{"rollgate.dev", "rollouts", "watch"}, {"rollgate.dev", "rollouts", "patch"},
		{"rollgate.dev", "rollouts/status", "patch"}, {"rollgate.dev", "repositories", "get"},
		{"rollgate.dev", "repositories", "watch"}, {"rollgate.dev", "repositories/status", "patch"},
		{"rollgate.dev", "analysistemplates", "list"},
		{"apps", "deployments", "patch"}, {"apps", "statefulsets", "patch"}, {"apps", "daemonsets", "patch"},
		{"apps", "replicasets", "create"}, {"apps", "replicasets", "delete"}, {"apps", "controllerrevisions", "list"},
		{"", "pods", "patch"}, {"", "pods", "delete"},
		{"", "services", "create"}, {"", "services", "watch"}, {"discovery.k8s.io", "endpointslices", "list"}, {"discovery.k8s.io", "endpointslices", "watch"},
		{"networking.k8s.io", "ingresses", "create"}, {"networking.k8s.io", "ingresses", "watch"},
		{"gateway.networking.k8s.io", "httproutes", "update"}, {"gateway.networking.k8s.io", "httproutes", "watch"},
		// customNetworkRefs: edited, and watched from the first Rollout naming the kind.
		{"networking.istio.io", "virtualservices", "update"}, {"networking.istio.io", "virtualservices", "watch"},
		{"networking.istio.io", "destinationrules", "update"}, {"networking.istio.io", "destinationrules", "watch"},
		{"", "secrets", "get"}, {"", "events", "create"},
		// Job checks and Job hooks.
		{"batch", "jobs", "create"}, {"batch", "jobs", "delete"}, {"batch", "jobs", "list"}, {"", "pods/log", "get"},
		{"coordination.k8s.io", "leases", "update"},
		{"admissionregistration.k8s.io", "mutatingwebhookconfigurations", "patch"},
	}
	for _, n := range need {
		if !allows(rs, n.group, n.resource, n.verb) {
			t.Errorf("no rule allows %s on %s.%s", n.verb, n.resource, n.group)
		}
	}
	if allows(rs, "", "secrets", "list") || allows(rs, "", "secrets", "watch") {
		t.Error("Secrets must be read by name only, never listed or watched")
	}
	// Workloads and ReplicaSets are written with merge patches only: an
	// update of a cached Deployment, which has no pod template
	// (workload.StripDeployment), would write that back.
	for _, r := range []string{"deployments", "statefulsets", "daemonsets", "replicasets"} {
		if allows(rs, "apps", r, "update") {
			t.Errorf("update of %s granted: rollgate patches them", r)
		}
	}
}

func allows(rs []rbacv1.PolicyRule, group, resource, verb string) bool {
	for _, r := range rs {
		if has(r.APIGroups, group) && has(r.Resources, resource) && has(r.Verbs, verb) {
			return true
		}
	}
	return false
}

func has(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
