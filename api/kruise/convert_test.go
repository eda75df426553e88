package kruise_test

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/rollgate/rollgate/api/admission"
	"github.com/rollgate/rollgate/api/kruise"
	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/strategy"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// TestConvertCorpus converts every Kruise manifest of testdata/<case>/
// kruise.yaml (written from Kruise's field reference: v1alpha1 and
// v1beta1, each traffic routing kind, blue-green, workloads rollgate
// cannot release) and compares the output and the report with
// rollgate.yaml and report.txt. Every converted Rollout must then pass the
// API server's validation and plan its steps, as `rollgate plan` does.
func TestConvertCorpus(t *testing.T) {
	crds, err := admission.ChartCRDs()
	if err != nil {
		t.Fatal(err)
	}
	v, err := admission.NewForCRDs(crds...)
	if err != nil {
		t.Fatal(err)
	}
	dirs, err := filepath.Glob("testdata/*/kruise.yaml")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no corpus: %v", err)
	}
	for _, in := range dirs {
		dir := filepath.Dir(in)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			opts := kruise.Options{}
			if filepath.Base(dir) == "v1beta1-gateway" {
				opts = kruise.Options{GitRepository: "app-repo", GitPath: "apps/storefront/rollout.yaml"}
			}
			c, err := kruise.NewConverter(crds, opts)
			if err != nil {
				t.Fatal(err)
			}
			src, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			out, results, err := c.Convert(src)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, filepath.Join(dir, "rollgate.yaml"), out)
			golden(t, filepath.Join(dir, "report.txt"), []byte(kruise.Report("kruise.yaml", results)))
			if strings.Contains(string(out), "rollouts.kruise.io") {
				t.Errorf("the output still names Kruise:\n%s", out)
			}
			for _, o := range decodeAll(t, out) {
				if o.GetAPIVersion() != "rollgate.dev/v1alpha1" {
					continue
				}
				if errs := v.Validate(context.Background(), o, nil); len(errs) > 0 {
					t.Fatalf("converted %s is refused: %v", o.GetName(), errs)
				}
				ro := &v1alpha1.Rollout{}
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, ro); err != nil {
					t.Fatal(err)
				}
				if _, err := strategy.Preview(&ro.Spec, 10); err != nil {
					t.Fatalf("converted %s cannot be planned: %v", o.GetName(), err)
				}
			}
		})
	}
}

func decodeAll(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(string(data)), 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			break
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
	return out
}

func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./api/kruise/ -update to write it)", err)
	}
	if string(want) != string(got) {
		t.Errorf("%s differs:\n--- want\n%s\n--- got\n%s", path, want, got)
	}
}
