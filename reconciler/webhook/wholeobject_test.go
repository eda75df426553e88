package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/workload"
)

// writer sends a workload manifest (as Git declares it: no rollgate label,
// no control annotation, Git's own update strategy) the way one kind of
// tool does.
type writer func(t *testing.T, ns, manifest string)

// writers are the ways tools write a whole workload: each one drops
// rollgate's marks if it can.
var writers = map[string]writer{
	// kubectl replace, Argo CD with Replace=true: a PUT of the manifest.
	"replace": func(t *testing.T, ns, manifest string) {
		u := manifestObject(t, ns, manifest)
		cur := &unstructured.Unstructured{}
		cur.SetGroupVersionKind(u.GroupVersionKind())
		if err := suite.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: u.GetName()}, cur); err != nil {
			t.Fatal(err)
		}
		u.SetResourceVersion(cur.GetResourceVersion())
		if err := suite.c.Update(context.Background(), u, client.FieldOwner("kubectl-replace")); err != nil {
			t.Fatalf("replace: %v", err)
		}
	},
	// A client-side full-object update: read, set the declared spec and
	// metadata, write (what a tool that "owns" the object does).
	"update": func(t *testing.T, ns, manifest string) {
		u := manifestObject(t, ns, manifest)
		cur := &unstructured.Unstructured{}
		cur.SetGroupVersionKind(u.GroupVersionKind())
		if err := suite.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: u.GetName()}, cur); err != nil {
			t.Fatal(err)
		}
		cur.Object["spec"] = u.Object["spec"]
		cur.SetLabels(u.GetLabels())
		cur.SetAnnotations(u.GetAnnotations())
		if err := suite.c.Update(context.Background(), cur, client.FieldOwner("argocd-controller")); err != nil {
			t.Fatalf("update: %v", err)
		}
	},
	// A strategic merge patch that sets the declared spec and removes
	// rollgate's label and annotation.
	"strategic-merge": func(t *testing.T, ns, manifest string) {
		patchWith(t, ns, manifest, types.StrategicMergePatchType)
	},
	// A JSON merge patch doing the same.
	"json-merge": func(t *testing.T, ns, manifest string) {
		patchWith(t, ns, manifest, types.MergePatchType)
	},
	// Server-side apply by another manager, forced.
	"server-side-apply": func(t *testing.T, ns, manifest string) {
		u := manifestObject(t, ns, manifest)
		if err := suite.c.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(u),
			client.FieldOwner("argocd-controller"), client.ForceOwnership); err != nil {
			t.Fatalf("apply: %v", err)
		}
	},
}

func manifestObject(t *testing.T, ns, manifest string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(manifest), &u.Object); err != nil {
		t.Fatal(err)
	}
	u.SetNamespace(ns)
	return u
}

func patchWith(t *testing.T, ns, manifest string, pt types.PatchType) {
	t.Helper()
	u := manifestObject(t, ns, manifest)
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{
			"labels":      map[string]any{v1alpha1.LabelControlled: nil},
			"annotations": map[string]any{v1alpha1.AnnotationControl: nil},
		},
		"spec": u.Object["spec"],
	})
	if err != nil {
		t.Fatal(err)
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(u.GroupVersionKind())
	obj.SetNamespace(ns)
	obj.SetName(u.GetName())
	if err := suite.c.Patch(context.Background(), obj, client.RawPatch(pt, body), client.FieldOwner("kubectl-patch")); err != nil {
		t.Fatalf("%s patch: %v", pt, err)
	}
}

// Given a covered workload, when any tool writes the whole object as Git
// declares it with a new image (dropping rollgate's label and annotation),
// then the workload is held at the old revision and rollgate's marks are
// back; and when it writes it again mid-release, the hold stays.
func TestWholeObjectWritesAreHeld(t *testing.T) {
	kinds := map[string]struct {
		name     string
		manifest func(image string) string
	}{
		"Deployment":  {"web", func(img string) string { return fmt.Sprintf(deploymentYAML, "1", img) }},
		"StatefulSet": {"db", func(img string) string { return fmt.Sprintf(statefulSetYAML, img) }},
		"DaemonSet":   {"agent", func(img string) string { return fmt.Sprintf(daemonSetYAML, 1, img) }},
	}
	for kind, k := range kinds {
		for how, write := range writers {
			t.Run(kind+"/"+how, func(t *testing.T) {
				t.Parallel()
				ns := namespace(t)
				apply(t, ns, k.manifest("v1"))
				cover(t, ns, kind, k.name, nil)
				stable := revisionOf(t, ns, kind, k.name)

				write(t, ns, k.manifest("v2"))
				obj := object(kind)
				get(t, obj, ns, k.name)
				assertHeld(t, obj, stable, "after the first write")

				write(t, ns, k.manifest("v2"))
				get(t, obj, ns, k.name)
				assertHeld(t, obj, stable, "after a second write mid-release")
			})
		}
	}
}

func revisionOf(t *testing.T, ns, kind, name string) string {
	t.Helper()
	obj := object(kind)
	get(t, obj, ns, name)
	tpl, err := workload.PodTemplate(obj)
	if err != nil {
		t.Fatal(err)
	}
	return workload.Revision(tpl)
}

func assertHeld(t *testing.T, obj client.Object, stable, when string) {
	t.Helper()
	if obj.GetLabels()[v1alpha1.LabelControlled] == "" {
		t.Fatalf("%s: label %s is gone: %v", when, v1alpha1.LabelControlled, obj.GetLabels())
	}
	ctrl := control(t, obj)
	if ctrl == nil || ctrl.StableRevision != stable || ctrl.CanaryRevision == stable {
		t.Fatalf("%s: control = %+v, want a hold at stable revision %s", when, ctrl, stable)
	}
	held, err := workload.IsHeld(obj, ctrl)
	if err != nil {
		t.Fatal(err)
	}
	if !held {
		t.Fatalf("%s: the workload's spec does not hold it: %s", when, specOf(obj))
	}
}

func specOf(obj client.Object) string {
	b, _ := json.Marshal(obj)
	return string(b)
}
