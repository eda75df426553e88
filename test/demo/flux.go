package demo

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

var kustomizationGVK = schema.GroupVersionKind{Group: "kustomize.toolkit.fluxcd.io", Version: "v1", Kind: "Kustomization"}

// startFlux runs Flux's source-controller and kustomize-controller as local
// processes against the cluster (they read KUBECONFIG and take their
// namespace from RUNTIME_NAMESPACE), each on its own loopback ports.
func (w *world) startFlux(ctx context.Context) error {
	ports, err := freePorts(5)
	if err != nil {
		return err
	}
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }
	env := []string{"KUBECONFIG=" + w.cluster.Kubeconfig, "RUNTIME_NAMESPACE=" + FluxNamespace}
	storage := filepath.Join(w.tmp, "flux-artifacts")
	if err := os.MkdirAll(storage, 0o755); err != nil {
		return err
	}
	source, err := startProcess(w.tmp, "source-controller", w.tools.sourceController, []string{
		"--storage-path=" + storage,
		"--storage-addr=" + addr(0),
		"--storage-adv-addr=" + addr(0),
		"--metrics-addr=" + addr(1),
		"--health-addr=" + addr(2),
	}, env)
	if err != nil {
		return err
	}
	w.procs = append(w.procs, source)
	kustomize, err := startProcess(w.tmp, "kustomize-controller", w.tools.kustomizeController, []string{
		"--metrics-addr=" + addr(3),
		"--health-addr=" + addr(4),
	}, env)
	if err != nil {
		return err
	}
	w.procs = append(w.procs, kustomize)
	err = w.waitFor(ctx, 60*time.Second, "the Flux controllers", func(context.Context) (bool, error) {
		return listening(addr(0)) && listening(addr(2)) && listening(addr(4)), nil
	})
	if err != nil {
		return err
	}
	w.p.step("Flux running: source-controller (artifacts at http://%s) and kustomize-controller, as local processes", addr(0))
	return nil
}

// syncWithFlux creates the GitRepository and the Kustomization that make
// Flux apply the application folder, as a platform team does.
func (w *world) syncWithFlux(ctx context.Context) error {
	if _, err := w.applyYAML(ctx, fluxObjects(w.repoURL)); err != nil {
		return err
	}
	w.p.step("Flux told to apply %s from %s@%s every 5s: GitRepository %s/app, Kustomization %s/%s (prune: true)",
		"./"+AppPath, RepoName, Branch, FluxNamespace, FluxNamespace, App)
	return nil
}

// fluxApplied returns the revision Flux last applied ("main@sha1:<hash>"),
// and the Kustomization's Ready message.
func (w *world) fluxApplied(ctx context.Context) (revision, ready string, err error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(kustomizationGVK)
	if err := w.c.Get(ctx, client.ObjectKey{Namespace: FluxNamespace, Name: App}, u); err != nil {
		return "", "", client.IgnoreNotFound(err)
	}
	revision, _, _ = unstructured.NestedString(u.Object, "status", "lastAppliedRevision")
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Ready" {
			ready = fmt.Sprintf("%v: %v", m["status"], m["message"])
		}
	}
	return revision, ready, nil
}

// waitFluxApplied waits until Flux has applied commit.
func (w *world) waitFluxApplied(ctx context.Context, commit string) error {
	var last string
	err := w.waitFor(ctx, 90*time.Second, "Flux to apply "+short(commit), func(ctx context.Context) (bool, error) {
		rev, ready, err := w.fluxApplied(ctx)
		if err != nil {
			return false, err
		}
		last = ready
		return strings.HasSuffix(rev, commit), nil
	})
	if err != nil {
		return fmt.Errorf("%w (Kustomization Ready=%s)", err, last)
	}
	w.p.step("Flux applied %s@%s", Branch, short(commit))
	return nil
}
