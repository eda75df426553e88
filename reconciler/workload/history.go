package workload

import (
	"context"
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// history maps the revision labels the StatefulSet and DaemonSet
// controllers put on pods (controller-revision-hash: the ControllerRevision
// name for a StatefulSet, its hash for a DaemonSet) to rollgate revisions,
// and keeps the template of each revision.
type history struct {
	revs      map[string]string
	templates map[string]*corev1.PodTemplateSpec
	// values maps a revision to the controller-revision-hash its pods
	// carry; "" when two ControllerRevisions have the revision's template
	// and its pods may carry either.
	values map[string]string
}

// revOf returns the rollgate revision of a pod ("" when unknown).
func (h *history) revOf(p *corev1.Pod) string {
	return h.revs[p.Labels[appsv1.ControllerRevisionHashLabelKey]]
}

// labelValues maps revisions stable and canary to the
// controller-revision-hash their pods carry, for the Services of a release
// to select them by. ok is false when the stable revision has no single
// value, or the canary two: the Services then select by
// rollgate.dev/revision. pending is the canary revision when it has no
// ControllerRevision yet (its controller, or rollgate's cache, has not
// caught up with the new template).
func (h *history) labelValues(stable, canary string) (values map[string]string, pending string, ok bool) {
	v, known := h.values[stable]
	if v == "" {
		return nil, "", false
	}
	values = map[string]string{stable: v}
	if canary == "" || canary == stable {
		return values, "", true
	}
	switch v, known = h.values[canary]; {
	case !known:
		return values, canary, true
	case v == "":
		return nil, "", false
	}
	values[canary] = v
	return values, "", true
}

// readHistory reads the ControllerRevisions owner controls. Their data is
// the patch the controllers store, {"spec":{"template":{...}}}; podValue
// is the controller-revision-hash the owner's controller gives the pods
// of a ControllerRevision.
func (b *base) readHistory(ctx context.Context, owner client.Object, selector *metav1.LabelSelector, podValue func(*appsv1.ControllerRevision) string) (*history, error) {
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return nil, fmt.Errorf("selector of %s: %w", owner.GetName(), err)
	}
	crs, err := listOwned(ctx, b, newControllerRevisionList, controllerRevisionItems, owner.GetNamespace(), sel, map[types.UID]bool{owner.GetUID(): true})
	if err != nil {
		return nil, fmt.Errorf("list ControllerRevisions of %s: %w", owner.GetName(), err)
	}
	h := &history{revs: map[string]string{}, templates: map[string]*corev1.PodTemplateSpec{}, values: map[string]string{}}
	for _, cr := range crs {
		var data struct {
			Spec struct {
				Template corev1.PodTemplateSpec `json:"template"`
			} `json:"spec"`
		}
		if err := json.Unmarshal(cr.Data.Raw, &data); err != nil {
			return nil, fmt.Errorf("ControllerRevision %s: %w", cr.Name, err)
		}
		rev := Revision(&data.Spec.Template)
		h.revs[cr.Name] = rev
		if hash := cr.Labels[appsv1.ControllerRevisionHashLabelKey]; hash != "" {
			h.revs[hash] = rev
		}
		h.templates[rev] = &data.Spec.Template
		if v, seen := h.values[rev]; seen && v != podValue(cr) {
			h.values[rev] = ""
		} else if !seen {
			h.values[rev] = podValue(cr)
		}
	}
	return h, nil
}
