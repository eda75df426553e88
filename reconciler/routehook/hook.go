package routehook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/luascripts"
	"github.com/rollgate/rollgate/reconciler/webhook"
	"github.com/rollgate/rollgate/traffic"
)

// Path is where the route webhook is served.
const Path = "/mutate-held-routes"

// Options configure the route webhook.
type Options struct {
	// Reader reads Rollouts and the controller's Lua ConfigMap (the
	// manager's cached client); nil skips both (tests).
	Reader client.Reader
	// Namespace and LuaConfigMap name the ConfigMap whose
	// lua.traffic.routing.<Kind>.<group> keys replace built-in scripts,
	// as for the routers; empty LuaConfigMap: built-in scripts only.
	Namespace    string
	LuaConfigMap string
	// Scripts caches compiled scripts; nil makes one.
	Scripts *luascripts.Library
	// FieldOwner is the field manager of rollgate's own writes, which pass
	// as sent; empty means traffic.DefaultFieldOwner.
	FieldOwner string
}

// Hook returns the route webhook and its handler, for
// webhook.Options.Hooks.
//
// Registration: UPDATE of every namespaced resource of every group ("*":
// the kinds customNetworkRefs name are only known at run time, and their
// CRDs may be installed after the controller starts), narrowed by the
// object selector rollgate.dev/traffic-held, so the API server calls it
// only for objects a release holds, and by match conditions (see
// conditions) to the updates that change what rollgate holds. Failure
// policy Fail: while no controller replica answers, those updates of held
// objects are refused, so a re-apply cannot move traffic mid-release
// (docs/webhook-outages.md says how to get out); objects without the
// label are never affected.
func Hook(opts Options) webhook.HookHandler {
	if opts.Scripts == nil {
		opts.Scripts = luascripts.NewLibrary()
	}
	if opts.FieldOwner == "" {
		opts.FieldOwner = traffic.DefaultFieldOwner
	}
	return webhook.HookHandler{
		Hook: webhook.Hook{
			Name:     "routes.rollgate.dev",
			Path:     Path,
			Mutating: true,
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*"},
					Scope: ptr.To(admissionregistrationv1.NamespacedScope),
				},
			}},
			ObjectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: traffic.LabelHeld, Operator: metav1.LabelSelectorOpExists,
			}}},
			MatchConditions: conditions(),
			FailurePolicy:   admissionregistrationv1.Fail,
			TimeoutSeconds:  5,
		},
		Handler: &Handler{opts: opts},
	}
}

// Handler serves the route webhook.
type Handler struct {
	opts Options
}

var (
	serviceGK   = schema.GroupKind{Kind: "Service"}
	httpRouteGK = schema.GroupKind{Group: gatewayv1.GroupName, Kind: "HTTPRoute"}
)

// Handle implements admission.Handler.
func (h *Handler) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Update || req.SubResource != "" {
		return admission.Allowed("")
	}
	if manager := webhook.FieldManager(req); manager == h.opts.FieldOwner {
		return admission.Allowed("")
	}
	if gone, err := h.rolloutGone(ctx, req); err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	} else if gone != "" {
		return admission.Allowed("").WithWarnings(fmt.Sprintf("rollgate: Rollout %s no longer exists; "+
			"this object is released as sent (remove the label %s)", gone, traffic.LabelHeld))
	}
	gk := schema.GroupKind{Group: req.Kind.Group, Kind: req.Kind.Kind}
	var (
		verdict traffic.Verdict
		held    *traffic.Held
		out     []byte
		err     error
	)
	switch gk {
	case serviceGK:
		verdict, held, out, err = typed(req, &corev1.Service{}, &corev1.Service{}, func(old, obj *corev1.Service) (traffic.Verdict, error) {
			return traffic.AdmitService(old, obj)
		}, []string{"spec", "selector"})
	case httpRouteGK:
		verdict, held, out, err = typed(req, &gatewayv1.HTTPRoute{}, &gatewayv1.HTTPRoute{}, func(old, obj *gatewayv1.HTTPRoute) (traffic.Verdict, error) {
			return traffic.AdmitHTTPRoute(old, obj)
		}, []string{"spec", "rules"})
	default:
		verdict, held, out, err = h.custom(ctx, req)
	}
	if err != nil {
		if errors.Is(err, errDecode) {
			return admission.Errored(http.StatusBadRequest, err)
		}
		// Storing the update as sent would move traffic mid-release.
		return admission.Denied(fmt.Sprintf("rollgate: %v; to change this object now, abort the release "+
			"(rollgate abort) and apply again once traffic is back on stable", err))
	}
	if verdict == traffic.NotHeld {
		return admission.Allowed("")
	}
	resp := admission.PatchResponseFromRaw(req.Object.Raw, out)
	log.FromContext(ctx).Info("update of a held routing object admitted", "kind", req.Kind.Kind,
		"namespace", req.Namespace, "name", req.Name, "verdict", verdict, "manager", webhook.FieldManager(req),
		"patches", len(resp.Patches))
	if w := warning(verdict, held, req.Kind.Kind); w != "" {
		resp = resp.WithWarnings(w)
	}
	return resp
}

var errDecode = errors.New("cannot decode the request's object")

// typed decodes a typed object pair, admits it, and copies the changed
// spec field and rollgate's keys into the raw object, so fields this
// build does not know survive.
func typed[T client.Object](req admission.Request, old, obj T, admit func(old, obj T) (traffic.Verdict, error), field []string) (traffic.Verdict, *traffic.Held, []byte, error) {
	if err := json.Unmarshal(req.OldObject.Raw, old); err != nil {
		return traffic.NotHeld, nil, nil, fmt.Errorf("%w: %v", errDecode, err)
	}
	if err := json.Unmarshal(req.Object.Raw, obj); err != nil {
		return traffic.NotHeld, nil, nil, fmt.Errorf("%w: %v", errDecode, err)
	}
	verdict, err := admit(old, obj)
	if err != nil || verdict == traffic.NotHeld {
		return verdict, nil, nil, err
	}
	held, _ := traffic.ParseHeld(obj.GetAnnotations())
	out, err := patched(req.Object.Raw, obj, field)
	return verdict, held, out, err
}

// rolloutGone returns the name of the Rollout recorded on the old object
// when that Rollout does not exist any more (deleted without ending its
// release, its finalizer removed by hand): the object is then no longer
// held, since the canary Service it would send requests to is gone too.
func (h *Handler) rolloutGone(ctx context.Context, req admission.Request) (string, error) {
	if h.opts.Reader == nil {
		return "", nil
	}
	var old metav1.PartialObjectMetadata
	if err := json.Unmarshal(req.OldObject.Raw, &old); err != nil {
		return "", nil // the admission below reports it
	}
	held, err := traffic.ParseHeld(old.Annotations)
	if err != nil || held == nil {
		return "", nil
	}
	err = h.opts.Reader.Get(ctx, types.NamespacedName{Namespace: req.Namespace, Name: held.Rollout}, &v1alpha1.Rollout{})
	switch {
	case apierrors.IsNotFound(err):
		return held.Rollout, nil
	case err != nil:
		return "", fmt.Errorf("get Rollout %s/%s: %w", req.Namespace, held.Rollout, err)
	}
	return "", nil
}

// custom admits an update of any other kind through its Lua script.
func (h *Handler) custom(ctx context.Context, req admission.Request) (traffic.Verdict, *traffic.Held, []byte, error) {
	old, obj := &unstructured.Unstructured{}, &unstructured.Unstructured{}
	if err := old.UnmarshalJSON(req.OldObject.Raw); err != nil {
		return traffic.NotHeld, nil, nil, fmt.Errorf("%w: %v", errDecode, err)
	}
	if err := obj.UnmarshalJSON(req.Object.Raw); err != nil {
		return traffic.NotHeld, nil, nil, fmt.Errorf("%w: %v", errDecode, err)
	}
	opts := traffic.Options{Scripts: h.opts.Scripts, LuaOverrides: h.overrides(ctx)}
	verdict, err := traffic.AdmitCustom(ctx, opts, old, obj)
	if err != nil || verdict == traffic.NotHeld {
		return verdict, nil, nil, err
	}
	held, _ := traffic.ParseHeld(obj.GetAnnotations())
	out, err := obj.MarshalJSON()
	return verdict, held, out, err
}

// overrides reads the user's scripts (none when the ConfigMap is missing,
// as for the routers).
func (h *Handler) overrides(ctx context.Context) map[string]string {
	if h.opts.LuaConfigMap == "" || h.opts.Reader == nil {
		return nil
	}
	var cm corev1.ConfigMap
	key := types.NamespacedName{Namespace: h.opts.Namespace, Name: h.opts.LuaConfigMap}
	if err := h.opts.Reader.Get(ctx, key, &cm); err != nil {
		return nil
	}
	return cm.Data
}

// patched returns raw with field and rollgate's labels and annotations
// copied from obj.
func patched(raw []byte, obj client.Object, field []string) ([]byte, error) {
	return webhook.Owned{
		Paths:       [][]string{field},
		Labels:      []string{traffic.LabelHeld},
		Annotations: []string{traffic.AnnotationHeld, v1alpha1.AnnotationOriginal},
	}.Apply(raw, obj)
}

// warning is what the writer reads (kubectl prints it; Argo CD and Flux
// log it).
func warning(v traffic.Verdict, h *traffic.Held, kind string) string {
	if h == nil {
		return ""
	}
	switch v {
	case traffic.Reasserted:
		return fmt.Sprintf("rollgate: Rollout %s is releasing; this %s keeps its current traffic step, "+
			"and what you applied is restored when the release ends", h.Rollout, kind)
	case traffic.Redeclared:
		return fmt.Sprintf("rollgate: Rollout %s is releasing; your change to this %s is kept, with the "+
			"current traffic step applied on top of it, and takes full effect when the release ends", h.Rollout, kind)
	}
	return ""
}
