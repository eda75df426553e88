package traffic

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// Keys of the release state on the Git-owned objects a release edits (the
// stable Service, an HTTPRoute, customNetworkRefs objects).
const (
	// LabelHeld marks an object that carries a release's traffic state
	// while the release lasts. The route admission webhook selects the
	// objects it is called for by this label (on the old or the new
	// object, so a write that drops it is still sent).
	LabelHeld = "rollgate.dev/traffic-held"
	// AnnotationHeld records the step the object carries (JSON of Held),
	// next to rollgate.dev/original, which records what Git declares.
	AnnotationHeld = "rollgate.dev/traffic"
	// LabelCanaryOf marks a canary Service rollgate made, with the name of
	// the stable Service it copies. The EndpointSlice controller copies a
	// Service's labels onto its slices, so the controller caches and
	// watches the slices of canary Services alone by this label
	// (Options.Endpoints).
	LabelCanaryOf = "rollgate.dev/canary-of"
)

// Held is the traffic state of one step, as recorded on each object the
// step is written to. It says everything needed to compute the object
// again from what Git declares, so an admission webhook can put the step
// into any update of the object before it is stored.
type Held struct {
	// Rollout is the name of the Rollout whose release holds the object.
	Rollout string `json:"rollout"`
	// CanaryWeight, Matches and RequestHeaderModifier are the step's.
	CanaryWeight          int32                       `json:"canaryWeight"`
	Matches               []v1alpha1.HttpRouteMatch   `json:"matches,omitempty"`
	RequestHeaderModifier *gatewayv1.HTTPHeaderFilter `json:"requestHeaderModifier,omitempty"`
	// Mirror is the step's MirrorPercent.
	Mirror int32 `json:"mirror,omitempty"`
	// Sticky is the session cookie of the entry (StickyCookie).
	Sticky string `json:"sticky,omitempty"`
	// StableService and CanaryService name the Services of the release.
	StableService string `json:"stableService"`
	CanaryService string `json:"canaryService"`
	// StableRevision and CanaryRevision are the revision label values.
	StableRevision string `json:"stableRevision,omitempty"`
	CanaryRevision string `json:"canaryRevision,omitempty"`
	// RevisionLabel is the pod label the revisions are told apart by.
	RevisionLabel string `json:"revisionLabel"`
	// PatchPodMetadata is the metadata added to canary pods.
	PatchPodMetadata *v1alpha1.PatchPodTemplateMetadata `json:"patchPodMetadata,omitempty"`
}

// heldFor is what a router records for d.
func heldFor(ro *v1alpha1.Rollout, o Options, d Desired) Held {
	return Held{
		Rollout: ro.Name, CanaryWeight: d.CanaryWeight, Matches: d.Matches,
		RequestHeaderModifier: d.RequestHeaderModifier, Mirror: d.MirrorPercent, Sticky: d.StickyCookie,
		StableService: d.StableService, CanaryService: d.CanaryService,
		StableRevision: d.StableRevision, CanaryRevision: d.CanaryRevision,
		RevisionLabel: o.revisionLabel(), PatchPodMetadata: d.PatchPodMetadata,
	}
}

// forService is what the stable Service records: only what its selector
// depends on. The weight and matches of a step are the routes' business;
// recorded on the Service too, they would cost a Service write at every
// step that changes nothing the Service does.
func (h Held) forService() Held {
	h.CanaryWeight, h.Matches, h.RequestHeaderModifier, h.PatchPodMetadata, h.Mirror, h.Sticky = 0, nil, nil, nil, 0, ""
	return h
}

// Desired is the step h records.
func (h Held) Desired() Desired {
	return Desired{
		CanaryWeight: h.CanaryWeight, Matches: h.Matches, RequestHeaderModifier: h.RequestHeaderModifier,
		MirrorPercent: h.Mirror, StickyCookie: h.Sticky,
		StableService: h.StableService, CanaryService: h.CanaryService,
		StableRevision: h.StableRevision, CanaryRevision: h.CanaryRevision,
		PatchPodMetadata: h.PatchPodMetadata,
	}
}

func (h Held) encode() string {
	raw, err := json.Marshal(h)
	if err != nil {
		// Only values of this package's own types are encoded.
		return "{}"
	}
	return string(raw)
}

// ParseHeld returns the state recorded on an object's annotations, or
// nil when no release holds it.
func ParseHeld(annotations map[string]string) (*Held, error) {
	raw, ok := annotations[AnnotationHeld]
	if !ok {
		return nil, nil
	}
	h := &Held{}
	if err := json.Unmarshal([]byte(raw), h); err != nil {
		return nil, fmt.Errorf("%w: annotation %s: %v", ErrInvalid, AnnotationHeld, err)
	}
	if h.RevisionLabel == "" {
		h.RevisionLabel = v1alpha1.LabelRevision
	}
	return h, nil
}

// withHeld returns labels and annotations with the held keys set (h
// non-nil) or removed.
func withHeld(labels, annotations map[string]string, h *Held) (map[string]string, map[string]string) {
	labels, annotations = maps.Clone(labels), maps.Clone(annotations)
	if h == nil {
		delete(labels, LabelHeld)
		delete(annotations, AnnotationHeld)
		return labels, annotations
	}
	return withKey(labels, LabelHeld, "true"), withKey(annotations, AnnotationHeld, h.encode())
}

// Verdict says what AdmitHTTPRoute, AdmitService and AdmitCustom did to
// an update.
type Verdict string

// Verdicts of an admission.
const (
	// NotHeld: no release holds the object; the update passes as sent.
	NotHeld Verdict = ""
	// Kept: the update left the step in place (it changed other fields).
	Kept Verdict = "Kept"
	// Reasserted: the update wrote the declared state back (a GitOps
	// re-apply); the step was put back into it.
	Reasserted Verdict = "Reasserted"
	// Redeclared: the update brought a new declared state (a change
	// merged in Git mid-release): it is recorded as what to restore at
	// the end, and the step is applied on top of it.
	Redeclared Verdict = "Redeclared"
)

// AdmitHTTPRoute puts the step recorded on old (an HTTPRoute a release
// holds) into newRoute, an update by any writer but rollgate, so the
// update lands with the step's rules. Rules in the update that point at
// the canary Service are the step's own (the update changed other
// fields): the declared rules stay the saved ones. Any other rules are
// what the writer declares: they become the declared rules restored at
// the end, and the step is computed on top of them. The error wraps
// ErrInvalid when the step cannot be computed from the update's rules
// (the update must then be refused: storing it would move traffic).
func AdmitHTTPRoute(old, newRoute *gatewayv1.HTTPRoute) (Verdict, error) {
	h, err := ParseHeld(old.Annotations)
	if err != nil || h == nil {
		return NotHeld, err
	}
	d := h.Desired()
	saved, err := savedHTTPRules(newRoute, old)
	if err != nil {
		return NotHeld, err
	}
	declared, verdict := saved, Kept
	if !referencesService(newRoute.Spec.Rules, newRoute.Namespace, d.CanaryService) {
		declared, verdict = newRoute.Spec.Rules, Reasserted
		if saved != nil && !equality.Semantic.DeepEqual(declared, saved) {
			verdict = Redeclared
		}
	}
	want, err := HTTPRouteRules(declared, newRoute.Namespace, d)
	if err != nil {
		return NotHeld, fmt.Errorf("HTTPRoute %s/%s: the release of Rollout %s cannot keep its step on these rules: %w",
			newRoute.Namespace, newRoute.Name, h.Rollout, err)
	}
	raw, err := json.Marshal(savedRules{Rules: declared})
	if err != nil {
		return NotHeld, err
	}
	newRoute.Spec.Rules = want
	newRoute.Labels, newRoute.Annotations = withHeld(newRoute.Labels, newRoute.Annotations, h)
	newRoute.Annotations[v1alpha1.AnnotationOriginal] = string(raw)
	return verdict, nil
}

// savedHTTPRules reads the saved declared rules of the update, or of the
// old object when the update dropped the annotation.
func savedHTTPRules(objs ...*gatewayv1.HTTPRoute) ([]gatewayv1.HTTPRouteRule, error) {
	for _, o := range objs {
		raw, ok := o.Annotations[v1alpha1.AnnotationOriginal]
		if !ok {
			continue
		}
		var s savedRules
		if err := json.Unmarshal([]byte(raw), &s); err != nil {
			return nil, fmt.Errorf("%w: HTTPRoute %s/%s: annotation %s: %v", ErrInvalid, o.Namespace, o.Name,
				v1alpha1.AnnotationOriginal, err)
		}
		if s.Rules == nil {
			s.Rules = []gatewayv1.HTTPRouteRule{}
		}
		return s.Rules, nil
	}
	return nil, nil // none saved yet
}

// AdmitService narrows newSvc, an update of the stable Service of a
// release by any writer but rollgate, to the stable revision recorded on
// old. A selector in the update with the revision key is the release's
// own (the update changed other fields); any other selector is what the
// writer declares and becomes the declared selector restored at the end.
func AdmitService(old, newSvc *corev1.Service) (Verdict, error) {
	h, err := ParseHeld(old.Annotations)
	if err != nil || h == nil || h.StableRevision == "" {
		return NotHeld, err
	}
	var saved map[string]string
	for _, o := range []*corev1.Service{newSvc, old} {
		if raw, ok := o.Annotations[v1alpha1.AnnotationOriginal]; ok {
			var s savedSelector
			if err := json.Unmarshal([]byte(raw), &s); err != nil {
				return NotHeld, fmt.Errorf("%w: Service %s/%s: annotation %s: %v", ErrInvalid, o.Namespace, o.Name,
					v1alpha1.AnnotationOriginal, err)
			}
			saved = s.Selector
			break
		}
	}
	declared, verdict := saved, Kept
	if _, narrowed := newSvc.Spec.Selector[h.RevisionLabel]; !narrowed {
		declared, verdict = newSvc.Spec.Selector, Reasserted
		if saved != nil && !mapsEqual(declared, saved) {
			verdict = Redeclared
		}
	}
	if len(declared) == 0 {
		return NotHeld, fmt.Errorf("%w: Service %s/%s: the release of Rollout %s needs a selector to narrow",
			ErrInvalid, newSvc.Namespace, newSvc.Name, h.Rollout)
	}
	raw, err := json.Marshal(savedSelector{Selector: declared})
	if err != nil {
		return NotHeld, err
	}
	newSvc.Spec.Selector = withKey(declared, h.RevisionLabel, h.StableRevision)
	newSvc.Labels, newSvc.Annotations = withHeld(newSvc.Labels, newSvc.Annotations, h)
	newSvc.Annotations[v1alpha1.AnnotationOriginal] = string(raw)
	return verdict, nil
}

// AdmitCustom puts the step recorded on old (a customNetworkRefs object a
// release holds) into newObj, an update by any writer but rollgate: it
// runs the kind's Lua script (opts.LuaOverrides first, as the router
// does) on the declared state and the recorded step. The declared state
// is the saved one, unless the update carries neither the step's result
// nor any mention of the canary Service or revision: then it is what the
// writer declares, and becomes the state restored at the end. Keys of
// GitOps tools are kept as the update sends them.
func AdmitCustom(ctx context.Context, opts Options, old, newObj *unstructured.Unstructured) (Verdict, error) {
	h, err := ParseHeld(old.GetAnnotations())
	if err != nil || h == nil {
		return NotHeld, err
	}
	if opts.RevisionLabel == "" {
		opts.RevisionLabel = h.RevisionLabel
	}
	d := h.Desired()
	gvk := newObj.GroupVersionKind()
	describe := fmt.Sprintf("%s %s/%s", gvk.Kind, newObj.GetNamespace(), newObj.GetName())
	raw, ok := newObj.GetAnnotations()[v1alpha1.AnnotationOriginal]
	if !ok {
		raw, ok = old.GetAnnotations()[v1alpha1.AnnotationOriginal]
	}
	saved := liveState(old)
	if ok {
		if err := utiljson.Unmarshal([]byte(raw), &saved); err != nil {
			return NotHeld, fmt.Errorf("%w: %s: annotation %s: %v", ErrInvalid, describe, v1alpha1.AnnotationOriginal, err)
		}
	}
	out, err := routeScript(ctx, opts, gvk.Kind, gvk.Group, saved, d)
	if err != nil {
		return NotHeld, fmt.Errorf("%s: %w", describe, err)
	}
	incoming := liveState(newObj)
	verdict := Kept
	if !equality.Semantic.DeepEqual(jsonForm(incoming.Spec), jsonForm(out.Spec)) {
		verdict = Reasserted
		if !equality.Semantic.DeepEqual(jsonForm(incoming.Spec), jsonForm(saved.Spec)) && !mentions(incoming.Spec, d) {
			verdict, saved = Redeclared, incoming
			if out, err = routeScript(ctx, opts, gvk.Kind, gvk.Group, saved, d); err != nil {
				return NotHeld, fmt.Errorf("%s: the release of Rollout %s cannot keep its step on this spec: %w", describe, h.Rollout, err)
			}
		}
	}
	savedRaw, err := json.Marshal(saved)
	if err != nil {
		return NotHeld, err
	}
	labels := withToolKeys(out.Labels, newObj.GetLabels())
	annotations := withToolKeys(out.Annotations, newObj.GetAnnotations())
	labels, annotations = withHeld(labels, annotations, h)
	annotations[v1alpha1.AnnotationOriginal] = string(savedRaw)
	if out.Spec == nil {
		delete(newObj.Object, "spec")
	} else {
		newObj.Object["spec"] = out.Spec
	}
	newObj.SetLabels(labels)
	newObj.SetAnnotations(annotations)
	return verdict, nil
}

// jsonForm normalises a spec to what JSON makes of it (numbers as
// float64), so a spec decoded from a request and one a script returned
// compare equal when they say the same.
func jsonForm(v any) any {
	raw, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var out any
	if json.Unmarshal(raw, &out) != nil {
		return v
	}
	return out
}

// mentions reports whether spec names the canary Service or revision:
// only a release writes those, so such a spec is no declaration from Git.
func mentions(spec map[string]any, d Desired) bool {
	raw, err := json.Marshal(spec)
	if err != nil {
		return true
	}
	s := string(raw)
	return (d.CanaryService != "" && strings.Contains(s, `"`+d.CanaryService+`"`)) ||
		(d.CanaryRevision != "" && strings.Contains(s, `"`+d.CanaryRevision+`"`))
}
