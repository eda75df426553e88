package envtest_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/test/envtest"
)

func TestStartServesNamespaces(t *testing.T) {
	start := time.Now()
	_, c := envtest.Start(t)
	t.Logf("envtest up in %v", time.Since(start))
	ctx := context.Background()

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "rollgate-test"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	var list corev1.NamespaceList
	if err := c.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, n := range list.Items {
		found = found || n.Name == ns.Name
	}
	if !found {
		t.Fatalf("namespace %s not listed", ns.Name)
	}
}

const widgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.test.rollgate.dev
spec:
  group: test.rollgate.dev
  names: {kind: Widget, listKind: WidgetList, plural: widgets, singular: widget}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer, minimum: 1}
`

// TestNewInstallsCRDs uses the TestMain variant with an extra CRD folder, and
// checks that the repository's own CRDs (once generated) are installed too.
func TestNewInstallsCRDs(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "widget.yaml"), []byte(widgetCRD), 0o644); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	env, err := envtest.New(envtest.WithExtraCRDDirs(dir), envtest.WithScheme(scheme))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	}()
	ctx := context.Background()

	w := &unstructured.Unstructured{}
	w.SetAPIVersion("test.rollgate.dev/v1")
	w.SetKind("Widget")
	w.SetNamespace("default")
	w.SetName("w1")
	w.Object["spec"] = map[string]any{"size": int64(3)}
	if err := env.Client.Create(ctx, w); err != nil {
		t.Fatalf("create a Widget: %v", err)
	}
	bad := w.DeepCopy()
	bad.SetName("w2")
	bad.SetResourceVersion("")
	bad.Object["spec"] = map[string]any{"size": int64(0)}
	if err := env.Client.Create(ctx, bad); err == nil {
		t.Fatal("a Widget violating the CRD schema was accepted")
	}

	installed := map[string]bool{}
	for _, crd := range env.Environment.CRDs {
		installed[crd.Name] = true
		var got apiextensionsv1.CustomResourceDefinition
		if err := env.Client.Get(ctx, client.ObjectKey{Name: crd.Name}, &got); err != nil {
			t.Errorf("CRD %s: %v", crd.Name, err)
		}
	}
	if !installed["widgets.test.rollgate.dev"] {
		t.Errorf("installed CRDs = %v, want widgets.test.rollgate.dev among them", installed)
	}
	t.Logf("installed CRDs: %v", installed)
}
