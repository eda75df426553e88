package rig

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// FluxManager is the field manager Flux's kustomize-controller applies
// with: what World.ApplyYAML applies as.
const FluxManager = "kustomize-controller"

// StoryNS is the namespace the stories' YAML is written for; World moves
// it to the story's own (see InNS).
const StoryNS = "demo"

// World is where a story works: its test, a client of its cluster, and the
// namespace its objects live in. Every package's world embeds it and adds
// what only its stories need: a Git server, a gateway, one controller or
// several. A World's methods fail the test at the first error.
type World struct {
	T testing.TB
	C client.Client
	// NS is the story's namespace. Stories write their YAML for namespace
	// demo (StoryNS); ApplyYAML, Decode and InNS move it here.
	NS string
}

// Eventually waits until cond holds and logs how long it took (see the
// package's Eventually).
func (w *World) Eventually(limit time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	w.T.Helper()
	Eventually(w.T, limit, what, cond)
}

// Until waits until cond holds, quoting its last word on failure (see the
// package's Until).
func (w *World) Until(ctx context.Context, limit time.Duration, what string, cond func() (bool, string)) {
	w.T.Helper()
	Until(w.T, ctx, limit, what, cond)
}

// Holds checks that check passes for d, from now on (see the package's
// Holds).
func (w *World) Holds(d time.Duration, what string, check func(ctx context.Context) error) {
	w.T.Helper()
	Holds(w.T, d, what, check)
}

// InNS moves docs, written for namespace demo, to the story's namespace:
// what the stories apply and what they commit to Git.
func (w *World) InNS(docs string) string { return InNamespace(docs, w.NS) }

// Decode decodes docs, moved to the story's namespace (InNS).
func (w *World) Decode(docs string) []*unstructured.Unstructured {
	w.T.Helper()
	return Decode(w.T, w.InNS(docs))
}

// Apply server-side applies obj as fieldManager, the way Flux applies a
// Git change.
func (w *World) Apply(obj *unstructured.Unstructured, fieldManager string) {
	w.T.Helper()
	Apply(w.T, w.C, obj, fieldManager)
}

// ApplyYAML applies every document of docs as Flux would, moved to the
// story's namespace (InNS).
func (w *World) ApplyYAML(docs string) {
	w.T.Helper()
	ApplyYAML(w.T, w.C, w.InNS(docs), FluxManager)
}

// ApplyFiles creates every object of a YAML file or folder (CRDs, the
// chart's) as the platform team would, and waits for CRDs to be
// established.
func (w *World) ApplyFiles(path string) {
	w.T.Helper()
	ApplyFiles(w.T, w.C, path, "e2e")
}

// EnsureNamespace creates namespace name unless it exists.
func (w *World) EnsureNamespace(name string) {
	w.T.Helper()
	EnsureNamespace(w.T, w.C, name)
}

// CreateSecret creates the Secret ns/name holding data.
func (w *World) CreateSecret(ns, name string, data map[string][]byte) {
	w.T.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
	if err := w.C.Create(context.Background(), s); err != nil {
		w.T.Fatalf("create Secret %s/%s: %v", ns, name, err)
	}
}

// Rollout reads Rollout ns/name.
func (w *World) Rollout(ns, name string) *v1alpha1.Rollout {
	w.T.Helper()
	ro := &v1alpha1.Rollout{}
	if err := w.C.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, ro); err != nil {
		w.T.Fatal(err)
	}
	return ro
}

// Deployment reads Deployment ns/name.
func (w *World) Deployment(ns, name string) *appsv1.Deployment {
	w.T.Helper()
	d := &appsv1.Deployment{}
	if err := w.C.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
		w.T.Fatal(err)
	}
	return d
}

// Pods counts the pods of ns labelled app=app by image: [ready, total]
// (see PodsByImage).
func (w *World) Pods(ns, app string) map[string][2]int {
	w.T.Helper()
	out, err := PodsByImage(context.Background(), w.C, ns, app)
	if err != nil {
		w.T.Fatal(err)
	}
	return out
}

// Update reads obj afresh, changes it with mutate and writes it back,
// again on a conflict: the controller writes the status of the same
// objects meanwhile, and a user's kubectl edit retries the same way.
func (w *World) Update(obj client.Object, mutate func()) {
	w.T.Helper()
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		if err := w.C.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		mutate()
		return w.C.Update(context.Background(), obj)
	})
	if err != nil {
		w.T.Fatalf("updating %s: %v", client.ObjectKeyFromObject(obj), err)
	}
}
