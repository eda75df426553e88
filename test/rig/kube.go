package rig

// The few steps every cluster test takes against a real API server:
// decode YAML, server-side apply it as a GitOps tool would, wait for CRDs,
// and create namespaces.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/rand"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Decode splits docs (YAML or JSON, "---" separated) into objects,
// skipping empty documents.
func Decode(t testing.TB, docs string) []*unstructured.Unstructured {
	t.Helper()
	out, err := DecodeAll(docs)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// DecodeAll is Decode for a program (make demo) or a helper that returns
// errors: every document of docs (YAML or JSON), empty ones skipped.
func DecodeAll(docs string) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(docs), 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return out, fmt.Errorf("decode document %d: %w", len(out)+1, err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// Apply server-side applies obj as fieldManager with force, the way Flux
// applies a Git change.
func Apply(t testing.TB, c client.Client, obj *unstructured.Unstructured, fieldManager string) {
	t.Helper()
	obj.SetManagedFields(nil)
	obj.SetResourceVersion("")
	// Like a GitOps tool, apply again after an error of the server's own
	// (an admission webhook that did not answer in time on a loaded
	// machine, an API server catching up); a refusal (4xx) fails at once.
	deadline := time.Now().Add(ApplyRetryFor)
	for {
		err := c.Patch(context.Background(), obj, client.Apply, client.FieldOwner(fieldManager), client.ForceOwnership)
		if err == nil {
			return
		}
		if !transient(err) || time.Now().After(deadline) {
			t.Fatalf("apply %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
		t.Logf("apply %s %s: %v; applying again", obj.GetKind(), obj.GetName(), err)
		time.Sleep(time.Second)
	}
}

// ApplyRetryFor is how long Apply applies again after a transient error.
const ApplyRetryFor = 30 * time.Second

// transient reports whether err is the server's trouble rather than a
// refusal of the object: worth applying again.
func transient(err error) bool {
	return apierrors.IsInternalError(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsTooManyRequests(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsUnexpectedServerError(err)
}

// ApplyYAML applies every document of docs as fieldManager.
func ApplyYAML(t testing.TB, c client.Client, docs, fieldManager string) {
	t.Helper()
	for _, u := range Decode(t, docs) {
		Apply(t, c, u, fieldManager)
	}
}

// ApplyFiles applies every object of a YAML file, or of every *.yaml file
// in a folder, as fieldManager, and waits for each CRD among them to be
// established.
func ApplyFiles(t testing.TB, c client.Client, path, fieldManager string) {
	t.Helper()
	files := []string{path}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		files, _ = filepath.Glob(filepath.Join(path, "*.yaml"))
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range Decode(t, string(data)) {
			Apply(t, c, u, fieldManager)
			if u.GetKind() == "CustomResourceDefinition" {
				WaitEstablished(t, c, u.GetName(), 30*time.Second)
			}
		}
	}
}

// WaitEstablished waits until the CRD name is Established.
func WaitEstablished(t testing.TB, c client.Client, name string, timeout time.Duration) {
	t.Helper()
	Eventually(t, timeout, "CRD "+name+" established", func(ctx context.Context) (bool, error) {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil {
			return false, nil
		}
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}

// StoryNamespace is the namespace of a test that shares its cluster with
// others: its name, lowercased, without the "Test" prefix, every character
// that a namespace name cannot hold replaced by "-", at most 63 long.
func StoryNamespace(testName string) string {
	ns := []byte(strings.ToLower(strings.TrimPrefix(testName, "Test")))
	for i, c := range ns {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			ns[i] = '-'
		}
	}
	return strings.Trim(string(ns[:min(len(ns), 63)]), "-")
}

// InNamespace moves documents written for namespace demo into ns: every
// "namespace: demo" and the Namespace object itself.
func InNamespace(docs, ns string) string {
	docs = strings.ReplaceAll(docs, "namespace: demo", "namespace: "+ns)
	return strings.ReplaceAll(docs, "metadata: {name: demo}", "metadata: {name: "+ns+"}")
}

// EnsureNamespace creates the namespace name unless it exists.
func EnsureNamespace(t testing.TB, c client.Client, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// NewNamespace creates a namespace of a random name ("t-" and six
// characters), for a test of its own in a cluster other tests share.
func NewNamespace(t testing.TB, c client.Client) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "t-" + rand.String(6)}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}
