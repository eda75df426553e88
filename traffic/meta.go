package traffic

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// ownerRef makes ro the controlling owner of the objects rollgate creates,
// so they are garbage-collected with it and GitOps tools treat them as
// children rather than drift.
func ownerRef(ro *v1alpha1.Rollout) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion:         v1alpha1.GroupVersion.String(),
		Kind:               "Rollout",
		Name:               ro.Name,
		UID:                ro.UID,
		Controller:         ptr.To(true),
		BlockOwnerDeletion: ptr.To(true),
	}
}

// ownedBy reports whether ro is the controlling owner of obj.
func ownedBy(obj metav1.Object, ro *v1alpha1.Rollout) bool {
	ref := metav1.GetControllerOf(obj)
	return ref != nil && ref.UID == ro.UID
}

// notFound wraps a NotFound API error into ErrRouteNotFound naming the object.
func notFound(err error, what, namespace, name string) error {
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%w: %s %s/%s", ErrRouteNotFound, what, namespace, name)
	}
	return fmt.Errorf("get %s %s/%s: %w", what, namespace, name, err)
}

// conflict reports an object rollgate would create that someone else owns.
func conflict(what string, obj client.Object) error {
	return fmt.Errorf("%w: %s %s/%s", ErrConflict, what, obj.GetNamespace(), obj.GetName())
}

// gitopsKey reports labels and annotations that belong to the tool which
// applied the user's object (kubectl, Argo CD, Flux, Helm) or to rollgate's
// own bookkeeping. They are never copied onto an object rollgate creates:
// copying a tracking id would make Argo CD or Flux think the copy is theirs.
func gitopsKey(key string) bool {
	switch key {
	case "kubectl.kubernetes.io/last-applied-configuration", v1alpha1.AnnotationOriginal, annotationProgress,
		AnnotationHeld, LabelHeld:
		return true
	}
	for _, prefix := range []string{
		"argocd.argoproj.io/", "kustomize.toolkit.fluxcd.io/", "helm.toolkit.fluxcd.io/",
		"meta.helm.sh/", "kapp.k14s.io/",
	} {
		if strings.HasPrefix(key, prefix) {
			return true
		}
	}
	return false
}

// copyMeta returns m without the keys drop reports.
func copyMeta(m map[string]string, drop func(string) bool) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		if !drop(k) {
			out[k] = v
		}
	}
	return out
}

// withKey returns a copy of m with k set to v.
func withKey(m map[string]string, k, v string) map[string]string {
	out := maps.Clone(m)
	if out == nil {
		out = map[string]string{}
	}
	out[k] = v
	return out
}

// shortHash is a stable digest of v's JSON form.
func shortHash(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		// Only values built by this package are hashed; they always encode.
		return "unencodable"
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// mapsEqual treats nil and empty maps as equal.
func mapsEqual(a, b map[string]string) bool {
	return len(a) == len(b) && maps.Equal(a, b)
}
