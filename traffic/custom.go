package traffic

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// CustomRouter shifts traffic by editing any resource (Istio
// VirtualService and DestinationRule, APISIX, Traefik, ...) with a Lua
// script chosen by the resource's kind and group: the controller's
// ConfigMap key lua.traffic.routing.<Kind>.<group> if present, else the
// built-in script.
//
// On the first call the resource's declared {spec, labels, annotations}
// is saved as JSON in its annotation rollgate.dev/original. Every call
// runs the script on that saved original (never on the live object), so
// steps do not accumulate, and writes only when the result differs from
// the live object. A script error leaves the resource untouched and is
// returned wrapping ErrScript, with the script's name and line. Restore
// puts the saved spec, labels and annotations back, which also removes the
// annotation. Keys of GitOps tools and kubectl (Argo CD's tracking id,
// kubectl's last-applied configuration, Flux's labels) are always kept as
// they are live, never replaced by their saved values.
//
// Done as soon as the resource is written. GitOps: the resource is
// declared in Git; with Argo CD ignore /spec and the annotation during a
// release. An edit made in Git mid-release reaches the saved original
// through the route admission webhook (AdmitCustom), which also keeps the
// step on it; an edit that got past the webhook is overwritten by the next
// step and by Restore (which writes the saved original), and the GitOps
// tool applies it again after the release.
type CustomRouter struct {
	c      client.Client
	ro     *v1alpha1.Rollout
	ref    v1alpha1.ObjectRef
	gvk    schema.GroupVersionKind
	stable string
	opts   Options
}

// NewCustomRouter is the Factory of the custom resource routers: one
// CustomRouter per customNetworkRefs entry, run in the listed order (list a
// DestinationRule before the VirtualService that uses its subsets); Restore
// and a step sending nothing to the canary run in reverse. It returns nil
// for an entry without customNetworkRefs.
func NewCustomRouter(t Target) (Router, error) {
	if len(t.Ref.CustomNetworkRefs) == 0 {
		return nil, nil
	}
	if t.Ref.Sticky != nil && !slices.ContainsFunc(t.Ref.CustomNetworkRefs, func(ref v1alpha1.ObjectRef) bool {
		return ref.Kind == stickyKind && strings.HasPrefix(ref.APIVersion, stickyGroup+"/")
	}) {
		return nil, fmt.Errorf("%w: sticky: no customNetworkRefs entry keeps sessions; only a %s (%s) does: "+
			"remove sticky, or route through one", ErrInvalid, stickyKind, stickyGroup)
	}
	routers := make([]Router, 0, len(t.Ref.CustomNetworkRefs))
	for i, ref := range t.Ref.CustomNetworkRefs {
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err != nil || ref.Kind == "" || ref.Name == "" {
			return nil, fmt.Errorf("%w: customNetworkRefs[%d]: apiVersion %q, kind %q, name %q",
				ErrInvalid, i, ref.APIVersion, ref.Kind, ref.Name)
		}
		routers = append(routers, &CustomRouter{c: t.Client, ro: t.Rollout, ref: ref,
			gvk: gv.WithKind(ref.Kind), stable: t.Ref.Service, opts: t.Options})
	}
	return customRoutes(routers), nil
}

// customRoutes is Sequence, except that a step sending nothing to the
// canary (weight 0 without matches) goes in reverse order, as Restore
// does: each object then goes back to its declared state (see
// routeScript), and a VirtualService must stop using the DestinationRule's
// subsets before they go.
type customRoutes []Router

func (c customRoutes) EnsureRoutes(ctx context.Context, d Desired) (bool, error) {
	if d.sendsToCanary() {
		return sequence(c).EnsureRoutes(ctx, d)
	}
	for i := len(c) - 1; i >= 0; i-- {
		if done, err := c[i].EnsureRoutes(ctx, d); err != nil || !done {
			return false, err
		}
	}
	return true, nil
}

func (c customRoutes) Restore(ctx context.Context) (bool, error) { return sequence(c).Restore(ctx) }

// objectState is the part of a resource a script sees and returns.
type objectState struct {
	Spec        map[string]any    `json:"spec,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

func (r *CustomRouter) describe() string {
	return fmt.Sprintf("%s %s/%s", r.gvk.Kind, r.ro.Namespace, r.ref.Name)
}

func (r *CustomRouter) get(ctx context.Context) (*unstructured.Unstructured, error) {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(r.gvk)
	err := r.c.Get(ctx, types.NamespacedName{Namespace: r.ro.Namespace, Name: r.ref.Name}, obj)
	return obj, err
}

// EnsureRoutes implements Router.
func (r *CustomRouter) EnsureRoutes(ctx context.Context, d Desired) (bool, error) {
	if d.StableService == "" {
		d.StableService = r.stable
	}
	if d.CanaryService == "" {
		d.CanaryService = CanaryServiceName(r.stable)
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		obj, err := r.get(ctx)
		if err != nil {
			return notFound(err, r.gvk.Kind, r.ro.Namespace, r.ref.Name)
		}
		original, raw, err := r.original(obj)
		if err != nil {
			return err
		}
		out, err := routeScript(ctx, r.opts, r.gvk.Kind, r.gvk.Group, original, d)
		if err != nil {
			return fmt.Errorf("%s: %w", r.describe(), err)
		}
		held := heldFor(r.ro, r.opts, d)
		out.Labels, out.Annotations = withHeld(out.Labels, out.Annotations, &held)
		out.Annotations[v1alpha1.AnnotationOriginal] = raw
		return r.write(ctx, obj, out)
	})
	return err == nil, err
}

// original returns the saved declared state, or the live one (and its
// JSON) before the first change.
func (r *CustomRouter) original(obj *unstructured.Unstructured) (objectState, string, error) {
	if raw, ok := obj.GetAnnotations()[v1alpha1.AnnotationOriginal]; ok {
		var s objectState
		// Integral numbers come back as int64, as in objects read from the
		// API server, so an unchanged result compares equal.
		if err := utiljson.Unmarshal([]byte(raw), &s); err != nil {
			return s, "", fmt.Errorf("%w: %s: annotation %s: %v", ErrInvalid, r.describe(), v1alpha1.AnnotationOriginal, err)
		}
		return s, raw, nil
	}
	s := liveState(obj)
	raw, err := json.Marshal(s)
	return s, string(raw), err
}

// liveState reads spec, labels and annotations (without rollgate's).
func liveState(obj *unstructured.Unstructured) objectState {
	s := objectState{Labels: obj.GetLabels(), Annotations: obj.GetAnnotations()}
	if spec, ok := obj.Object["spec"].(map[string]any); ok {
		s.Spec = spec
	}
	if _, ok := s.Annotations[v1alpha1.AnnotationOriginal]; ok {
		s.Annotations = maps.Clone(s.Annotations)
		delete(s.Annotations, v1alpha1.AnnotationOriginal)
	}
	if _, ok := s.Annotations[AnnotationHeld]; ok {
		s.Annotations = maps.Clone(s.Annotations)
		delete(s.Annotations, AnnotationHeld)
	}
	if _, ok := s.Labels[LabelHeld]; ok {
		s.Labels = maps.Clone(s.Labels)
		delete(s.Labels, LabelHeld)
	}
	return s
}

// write sets spec, labels and annotations when they differ from obj's.
func (r *CustomRouter) write(ctx context.Context, obj *unstructured.Unstructured, s objectState) error {
	live := objectState{Labels: obj.GetLabels(), Annotations: obj.GetAnnotations()}
	live.Spec, _ = obj.Object["spec"].(map[string]any)
	s.Labels, s.Annotations = withToolKeys(s.Labels, live.Labels), withToolKeys(s.Annotations, live.Annotations)
	if equality.Semantic.DeepEqual(live.Spec, s.Spec) && mapsEqual(live.Labels, s.Labels) &&
		mapsEqual(live.Annotations, s.Annotations) {
		return nil
	}
	if s.Spec == nil {
		delete(obj.Object, "spec")
	} else {
		obj.Object["spec"] = s.Spec
	}
	obj.SetLabels(s.Labels)
	obj.SetAnnotations(s.Annotations)
	if err := r.c.Update(ctx, obj, r.opts.fieldOwner()); err != nil {
		return fmt.Errorf("update %s: %w", r.describe(), err)
	}
	return nil
}

// withToolKeys returns m with the keys of GitOps tools and kubectl (see
// gitopsKey) taken from live: they may have changed since the original was
// saved, and writing an old tracking id or last-applied configuration back
// would confuse the tool. rollgate's own keys are left as m has them.
func withToolKeys(m, live map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		if !gitopsKey(k) || ownKey(k) {
			out[k] = v
		}
	}
	for k, v := range live {
		if gitopsKey(k) && !ownKey(k) {
			out[k] = v
		}
	}
	return out
}

func ownKey(k string) bool {
	return k == v1alpha1.AnnotationOriginal || k == annotationProgress || k == AnnotationHeld || k == LabelHeld
}

// Restore implements Router.
func (r *CustomRouter) Restore(ctx context.Context) (bool, error) {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		obj, err := r.get(ctx)
		if err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("get %s: %w", r.describe(), err)
		}
		if _, ok := obj.GetAnnotations()[v1alpha1.AnnotationOriginal]; !ok {
			return nil
		}
		original, _, err := r.original(obj)
		if err != nil {
			return err
		}
		return r.write(ctx, obj, original)
	})
	return err == nil, err
}
