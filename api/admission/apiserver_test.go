package admission_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/admission"
	"github.com/rollgate/rollgate/test/envtest"
)

// apiServer is a client of a real kube-apiserver with the chart's CRDs.
var apiServer client.Client

func TestMain(m *testing.M) {
	os.Exit(envtest.RunAgainstEachAPIServer(m, func(c client.Client) error {
		apiServer = c
		return c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo"}})
	}))
}

// TestAgreesWithTheAPIServer sends every input of TestEveryCELRuleIsExercised,
// and the valid objects they start from, to a real kube-apiserver (dry run,
// strict field validation, as kubectl applies): it accepts exactly what the
// offline validation accepts, and refuses the rest naming the same rule.
func TestAgreesWithTheAPIServer(t *testing.T) {
	ctx := context.Background()
	v, err := admission.New()
	if err != nil {
		t.Fatal(err)
	}
	for _, base := range []string{baseCanary, baseBlueGreen, baseTemplate, baseRepository} {
		if err := apiServer.Create(ctx, object(t, base, nil), client.DryRunAll, client.FieldValidation("Strict")); err != nil {
			t.Fatalf("the API server refuses a base object: %v\n%s", err, base)
		}
	}
	cases := ruleCases()
	cases = append(cases, ruleCase{kind: "Rollout", path: "spec.strategy.canary", message: "unknown field", base: baseCanary,
		edits: []string{"spec.strategy.canary.trafficRouting=[]"}})
	for i, c := range cases {
		name := fmt.Sprintf("%s %s: %s", c.kind, c.path, c.message)
		obj := object(t, c.base, c.edits)
		var old *unstructured.Unstructured
		if c.old != nil {
			old = object(t, c.base, c.old)
		}
		offline := v.Validate(ctx, obj.DeepCopy(), old)
		var real error
		if old == nil {
			real = apiServer.Create(ctx, obj, client.DryRunAll, client.FieldValidation("Strict"))
		} else {
			// An update: create the old object for real, then update it.
			old.SetName(fmt.Sprintf("update-%d", i))
			if err := apiServer.Create(ctx, old); err != nil {
				t.Fatalf("%s: creating the old object: %v", name, err)
			}
			obj.SetName(old.GetName())
			obj.SetResourceVersion(old.GetResourceVersion())
			real = apiServer.Update(ctx, obj, client.DryRunAll, client.FieldValidation("Strict"))
		}
		switch {
		case real == nil:
			t.Errorf("%s: the API server accepts %v; offline: %v", name, c.edits, offline)
		case len(offline) == 0:
			t.Errorf("%s: offline validation accepts %v; the API server refuses: %v", name, c.edits, real)
		case c.shadowed == "" && !strings.Contains(real.Error(), c.message):
			t.Errorf("%s: the API server refuses %v for another reason: %v", name, c.edits, real)
		}
	}
}
