package rollout

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// TestApprovalPlan: the plan section of an approval pull request shows
// every step as `rollgate plan` does, marks the step it approves, and
// links the status file.
func TestApprovalPlan(t *testing.T) {
	ro := &v1alpha1.Rollout{}
	if err := yaml.Unmarshal([]byte(`
spec:
  workloadRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  strategy:
    canary:
      steps:
      - {replicas: 1, traffic: "20%", pause: {}}
      - {replicas: "50%", traffic: "50%", analysis: {templates: [success-rate]}}
      - {replicas: "100%", traffic: "100%"}
      trafficRoutings:
      - service: web
        gateway: {httpRouteName: web}
`), ro); err != nil {
		t.Fatal(err)
	}
	ro.Status.Replicas = 4
	got := approvalPlan(ro, 1, "https://git.example.com/acme/shop/src/branch/rollgate/status/demo/web.yaml")
	for _, want := range []string{
		"| **→ 1** | 1 | 3 | 80% old / 20% new | approval | - |",
		"| 2 | 2 | 2 | 50% old / 50% new | - | success-rate |",
		"| 3 | 4 | 0 |",
		"[its status file](https://git.example.com/acme/shop/src/branch/rollgate/status/demo/web.yaml)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the plan lacks %q:\n%s", want, got)
		}
	}
}
