package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/workload"
)

// WorkloadPath is where the workload webhook is served.
const WorkloadPath = "/mutate-apps-v1-workloads"

// WorkloadHook returns the registration of the workload webhook: UPDATE of
// apps/v1 Deployments, StatefulSets and DaemonSets labelled
// rollgate.dev/controlled, failure policy Fail (an update of a covered
// workload is refused rather than released unchecked when the webhook is
// down; see the package documentation for the way out).
func WorkloadHook(h admission.Handler) Hook {
	return Hook{
		Name:     "workloads.rollgate.dev",
		Path:     WorkloadPath,
		Mutating: true,
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
			Rule: admissionregistrationv1.Rule{
				APIGroups:   []string{"apps"},
				APIVersions: []string{"v1"},
				Resources:   []string{"deployments", "statefulsets", "daemonsets"},
				Scope:       ptr.To(admissionregistrationv1.NamespacedScope),
			},
		}},
		ObjectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: v1alpha1.LabelControlled, Operator: metav1.LabelSelectorOpExists,
		}}},
		FailurePolicy: admissionregistrationv1.Fail,
	}
}

// WorkloadHandler holds covered workloads on a template change and
// re-asserts the hold on every later update (see workload.Admit).
type WorkloadHandler struct {
	// Rollouts reads Rollouts through workload.RolloutWorkloadIndex (the
	// manager's cached client).
	Rollouts client.Reader
	// Decoder decodes the objects of a request.
	Decoder admission.Decoder
}

// Handle implements admission.Handler.
func (h *WorkloadHandler) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Update || req.SubResource != "" {
		return admission.Allowed("")
	}
	var oldObj, newObj client.Object
	switch req.Kind.Kind {
	case "Deployment":
		oldObj, newObj = &appsv1.Deployment{}, &appsv1.Deployment{}
	case "StatefulSet":
		oldObj, newObj = &appsv1.StatefulSet{}, &appsv1.StatefulSet{}
	case "DaemonSet":
		oldObj, newObj = &appsv1.DaemonSet{}, &appsv1.DaemonSet{}
	default:
		return admission.Allowed("")
	}
	if err := h.Decoder.DecodeRaw(req.OldObject, oldObj); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if err := h.Decoder.DecodeRaw(req.Object, newObj); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	u := workload.Update{Old: oldObj, New: newObj, FromRollgate: fieldManager(req) == workload.FieldOwner}
	if !u.FromRollgate {
		ro, err := workload.RolloutFor(ctx, h.Rollouts, req.Namespace, req.Kind.Kind, req.Name)
		if err != nil {
			return admission.Errored(http.StatusInternalServerError, err)
		}
		u.Rollout = ro
	}
	verdict, err := workload.Admit(u)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	resp, err := patch(req.Object.Raw, newObj)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if len(resp.Patches) == 0 {
		return admission.Allowed("")
	}
	log.FromContext(ctx).Info("workload update admitted", "kind", req.Kind.Kind, "namespace", req.Namespace,
		"name", req.Name, "verdict", verdict, "manager", fieldManager(req))
	if w := warning(verdict, u.Rollout); w != "" {
		resp = resp.WithWarnings(w)
	}
	return resp
}

func warning(v workload.Verdict, ro *v1alpha1.Rollout) string {
	switch v {
	case workload.Held:
		return fmt.Sprintf("rollgate: Rollout %s releases this new revision in steps; the workload is held at the old revision", ro.Name)
	case workload.Reasserted:
		return fmt.Sprintf("rollgate: a release by Rollout %s is in progress; its update strategy is kept and the declared one is restored at the end", ro.Name)
	case workload.Released:
		return "rollgate: no enabled Rollout covers this workload any more; the declared update strategy is restored"
	}
	return ""
}

// fieldManager returns the field manager of the request's options.
func fieldManager(req admission.Request) string {
	var opts struct {
		FieldManager string `json:"fieldManager"`
	}
	if len(req.Options.Raw) == 0 || json.Unmarshal(req.Options.Raw, &opts) != nil {
		return ""
	}
	return opts.FieldManager
}

// patchedPaths are the only spec fields Admit changes (besides rollgate's
// label and annotation); the patch touches nothing else, so fields this
// build does not know survive.
func patchedPaths() [][]string {
	return [][]string{{"spec", "paused"}, {"spec", "strategy"}, {"spec", "updateStrategy"}}
}

// patch returns the JSON patch from the raw object to the raw object with
// the changed fields of obj copied in.
func patch(raw []byte, obj client.Object) (admission.Response, error) {
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // keep every number exactly as sent
	if err := dec.Decode(&doc); err != nil {
		return admission.Response{}, err
	}
	typed, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return admission.Response{}, err
	}
	for _, path := range patchedPaths() {
		copyPath(doc, typed, path)
	}
	meta, _ := doc["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		doc["metadata"] = meta
	}
	copyKey(meta, "annotations", v1alpha1.AnnotationControl, obj.GetAnnotations())
	copyKey(meta, "labels", v1alpha1.LabelControlled, obj.GetLabels())
	out, err := json.Marshal(doc)
	if err != nil {
		return admission.Response{}, err
	}
	return admission.PatchResponseFromRaw(raw, out), nil
}

// copyKey sets key of meta[field] (labels or annotations) to its value in
// from, or removes it there.
func copyKey(meta map[string]any, field, key string, from map[string]string) {
	m, _ := meta[field].(map[string]any)
	v, ok := from[key]
	switch {
	case ok && m == nil:
		meta[field] = map[string]any{key: v}
	case ok:
		m[key] = v
	default:
		delete(m, key)
	}
}

// copyPath sets path in dst to its value in src, or removes it there.
func copyPath(dst, src map[string]any, path []string) {
	for _, k := range path[:len(path)-1] {
		d, _ := dst[k].(map[string]any)
		s, _ := src[k].(map[string]any)
		if d == nil {
			if s == nil {
				return
			}
			d = map[string]any{}
			dst[k] = d
		}
		dst, src = d, s
	}
	last := path[len(path)-1]
	if v, ok := src[last]; ok {
		dst[last] = v
	} else {
		delete(dst, last)
	}
}
