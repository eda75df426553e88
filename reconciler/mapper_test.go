package reconciler

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/envtest"
)

// askedMapper counts the questions a mapper is asked.
type askedMapper struct {
	meta.RESTMapper
	asked int
}

func (m *askedMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	m.asked++
	return m.RESTMapper.RESTMapping(gk, versions...)
}

// Given the manager's REST mapper on a real API server with rollgate's
// CRDs, a built-in kind (the namespaced ConfigMap, the cluster-scoped
// Namespace) is asked of the dynamic mapper once and answered the same
// from then on; rollgate's own kind, a CustomResourceDefinition, and a
// kind the API server does not serve are asked every time, and a
// question that fails is not kept.
func TestMapperKeepsBuiltinMappingsOnly(t *testing.T) {
	scheme, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := envtest.Start(t, envtest.WithScheme(scheme))
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dynamic, err := apiutil.NewDynamicRESTMapper(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	asked := &askedMapper{RESTMapper: dynamic}
	m := &builtinMappings{RESTMapper: asked, builtin: clientgoscheme.Scheme.Recognizes}

	for _, c := range []struct {
		gvk        schema.GroupVersionKind
		resource   string
		namespaced bool
		kept       bool
	}{
		{schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, "configmaps", true, true},
		{schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, "namespaces", false, true},
		{v1alpha1.GroupVersion.WithKind("Rollout"), "rollouts", true, false},
	} {
		asked.asked = 0
		for range 3 {
			got, err := m.RESTMapping(c.gvk.GroupKind(), c.gvk.Version)
			if err != nil {
				t.Fatalf("%s: %v", c.gvk, err)
			}
			if got.Resource.Resource != c.resource || (got.Scope.Name() == meta.RESTScopeNameNamespace) != c.namespaced {
				t.Fatalf("%s: mapped to %s, scope %s; want %s, namespaced %v", c.gvk, got.Resource, got.Scope.Name(), c.resource, c.namespaced)
			}
			if namespaced, err := apiutil.IsGVKNamespaced(c.gvk, m); err != nil || namespaced != c.namespaced {
				t.Fatalf("%s: IsGVKNamespaced = %v, %v", c.gvk, namespaced, err)
			}
		}
		// Six questions: three RESTMapping, three IsGVKNamespaced.
		if want := map[bool]int{true: 1, false: 6}[c.kept]; asked.asked != want {
			t.Errorf("%s: the dynamic mapper was asked %d times for 6 questions, want %d", c.gvk, asked.asked, want)
		}
	}

	// A built-in group in a version the API server does not serve fails
	// every time, and the failure is not kept.
	asked.asked = 0
	gk := schema.GroupKind{Group: "apps", Kind: "Deployment"}
	for range 2 {
		if _, err := m.RESTMapping(gk, "v1beta9"); !meta.IsNoMatchError(err) {
			t.Fatalf("apps/v1beta9 Deployment: err = %v, want no match", err)
		}
	}
	if asked.asked != 2 {
		t.Errorf("apps/v1beta9 Deployment: the dynamic mapper was asked %d times for 2 failing questions, want 2", asked.asked)
	}
}
