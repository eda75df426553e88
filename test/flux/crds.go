package flux

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/test/rig"
)

// fieldManager is the field manager of the CRDs InstallCRDs applies.
const fieldManager = "flux-install"

// InstallCRDs server-side applies every CRD in bin/crds/*.yaml ("" means
// <repo>/bin/flux) to the cluster of kubeconfig and waits until each is
// Established.
func InstallCRDs(ctx context.Context, kubeconfig, bin string) error {
	if bin == "" {
		bin = defaultBin()
	}
	files, err := filepath.Glob(filepath.Join(bin, "crds", "*.yaml"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no Flux CRDs in %s (make tools-flux)", filepath.Join(bin, "crds"))
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	var names []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		applied, err := applyCRDs(ctx, c, string(data))
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		names = append(names, applied...)
	}
	for _, name := range names {
		if _, err := rig.Wait(ctx, 30*time.Second, "CRD "+name+" Established", func(ctx context.Context) (bool, string, error) {
			return Established(ctx, c, name), "", nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// applyCRDs applies the CustomResourceDefinitions among docs and returns
// their names.
func applyCRDs(ctx context.Context, c client.Client, docs string) ([]string, error) {
	objs, err := rig.DecodeAll(docs)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, u := range objs {
		if u.GetKind() != "CustomResourceDefinition" {
			continue
		}
		if err := c.Patch(ctx, u, client.Apply, client.FieldOwner(fieldManager), client.ForceOwnership); err != nil {
			return names, fmt.Errorf("apply CRD %s: %w", u.GetName(), err)
		}
		names = append(names, u.GetName())
	}
	return names, nil
}

// Established reports whether the CRD name exists and is Established.
func Established(ctx context.Context, c client.Client, name string) bool {
	var crd apiextensionsv1.CustomResourceDefinition
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil {
		return false
	}
	for _, cond := range crd.Status.Conditions {
		if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}
