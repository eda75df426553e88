package demo

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/test/flux"
)

var kustomizationGVK = schema.GroupVersionKind{Group: "kustomize.toolkit.fluxcd.io", Version: "v1", Kind: "Kustomization"}

// startFlux runs Flux's source-controller and kustomize-controller as local
// processes against the cluster (package flux), logging into the demo's
// folder; and notification-controller when the world wants it.
func (w *world) startFlux(ctx context.Context) error {
	o := flux.Options{Kubeconfig: w.cluster.Kubeconfig, Dir: w.tmp, Bin: w.tools.flux, Namespace: FluxNamespace}
	c, err := flux.Start(ctx, o)
	if err != nil {
		return err
	}
	w.flux = c
	w.p.step("Flux running: source-controller (artifacts at http://%s) and kustomize-controller, as local processes", c.StorageAddr)
	if !w.withNotification {
		return nil
	}
	if w.notification, err = flux.StartNotification(ctx, o); err != nil {
		return err
	}
	w.p.step("Flux notification-controller running, receiving events at %s", w.notification.EventsURL)
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
