package webhook

import (
	"encoding/json"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// The patch touches only the fields rollgate owns: fields this build does
// not know (a newer API server's) and number formats survive.
func TestPatchTouchesOnlyOwnedFields(t *testing.T) {
	raw := []byte(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","annotations":{"a":"b"}},
"spec":{"replicas":10,"futureField":{"x":12345678901234567},"strategy":{"type":"RollingUpdate","rollingUpdate":{"maxSurge":"25%"}},
"template":{"spec":{"containers":[{"name":"web","image":"web:v2"}]}}}}`)
	var d appsv1.Deployment
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	d.Spec.Paused = true
	d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
	d.Annotations[v1alpha1.AnnotationControl] = `{"rollout":"web"}`
	resp, err := patch(raw, &d)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, op := range resp.Patches {
		paths = append(paths, op.Operation+" "+op.Path)
	}
	sort.Strings(paths)
	want := []string{
		"add /metadata/annotations/rollgate.dev~1control",
		"add /spec/paused",
		"remove /spec/strategy/rollingUpdate",
		"replace /spec/strategy/type",
	}
	if strings.Join(paths, "\n") != strings.Join(want, "\n") {
		t.Fatalf("patch operations:\n%s\nwant:\n%s", strings.Join(paths, "\n"), strings.Join(want, "\n"))
	}
}
