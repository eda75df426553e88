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
}

// revOf returns the rollgate revision of a pod ("" when unknown).
func (h *history) revOf(p *corev1.Pod) string {
	return h.revs[p.Labels[appsv1.ControllerRevisionHashLabelKey]]
}

// readHistory reads the ControllerRevisions owner controls. Their data is
// the patch the controllers store, {"spec":{"template":{...}}}.
func (b *base) readHistory(ctx context.Context, owner client.Object, selector *metav1.LabelSelector) (*history, error) {
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return nil, fmt.Errorf("selector of %s: %w", owner.GetName(), err)
	}
	crs, err := listOwned(ctx, b, newControllerRevisionList, controllerRevisionItems, owner.GetNamespace(), sel, map[types.UID]bool{owner.GetUID(): true})
	if err != nil {
		return nil, fmt.Errorf("list ControllerRevisions of %s: %w", owner.GetName(), err)
	}
	h := &history{revs: map[string]string{}, templates: map[string]*corev1.PodTemplateSpec{}}
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
	}
	return h, nil
}
