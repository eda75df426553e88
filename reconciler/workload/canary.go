package workload

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// LabelCanaryOf marks a canary Deployment (canary style) with the name of
// the Deployment it releases. (Not in api/: it only ever appears on objects
// rollgate creates.)
const LabelCanaryOf = "rollgate.dev/canary-of"

// CanaryName returns the name of the canary Deployment releasing revision
// rev of Deployment name: <name>-canary-<rev>, the name shortened so the
// result stays a valid object name.
func CanaryName(name, rev string) string {
	suffix := "-canary-" + rev
	if max := 253 - len(suffix); len(name) > max {
		name = name[:max]
	}
	return name + suffix
}

// canaryDeployments lists the canary Deployments of d owned by the
// Rollout.
func (a *deployment) canaryDeployments(ctx context.Context, d *appsv1.Deployment) ([]*appsv1.Deployment, error) {
	sel := labels.SelectorFromSet(labels.Set{LabelCanaryOf: d.Name})
	out, err := listOwned(ctx, &a.base, newDeploymentList, deploymentItems, d.Namespace, sel, map[types.UID]bool{a.ro.UID: true})
	if err != nil {
		return nil, fmt.Errorf("list canary Deployments of %s: %w", d.Name, err)
	}
	return out, nil
}

// deleteCanaries deletes the canary Deployments except the one of
// revision keep (with their pods, in the foreground).
func (a *deployment) deleteCanaries(ctx context.Context, canaries []*appsv1.Deployment, keep string) error {
	for _, cd := range canaries {
		if keep != "" && cd.Labels[v1alpha1.LabelRevision] == keep || cd.DeletionTimestamp != nil {
			continue
		}
		err := a.c.Delete(ctx, cd, client.PropagationPolicy(metav1.DeletePropagationForeground), client.Preconditions{UID: &cd.UID})
		if client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete canary Deployment %s: %w", cd.Name, err)
		}
	}
	return nil
}

// ensureCanary realises a batch in the canary style: the held Deployment
// keeps all its pods and a canary Deployment runs the new ones.
func (a *deployment) ensureCanary(ctx context.Context, s *deployState, b Batch) (bool, error) {
	rev := s.ctrl.CanaryRevision
	if err := a.deleteCanaries(ctx, s.canaries, rev); err != nil {
		return false, err
	}
	c := clamp(b.CanaryReplicas, ptr.Deref(s.d.Spec.Replicas, 1))
	var cd *appsv1.Deployment
	for _, d := range s.canaries {
		if d.Labels[v1alpha1.LabelRevision] == rev && d.DeletionTimestamp == nil {
			cd = d
		}
	}
	if cd == nil {
		d, err := a.full(ctx, s)
		if err != nil {
			return false, err
		}
		cd = a.canaryDeployment(d, rev, c)
		if err := a.c.Create(ctx, cd, client.FieldOwner(FieldOwner)); err != nil {
			return false, fmt.Errorf("create canary Deployment %s: %w", cd.Name, err)
		}
		return false, nil
	}
	if ptr.Deref(cd.Spec.Replicas, 1) != c {
		orig := cd.DeepCopy()
		cd.Spec.Replicas = ptr.To(c)
		if err := a.c.Patch(ctx, cd, client.MergeFrom(orig), client.FieldOwner(FieldOwner)); err != nil {
			return false, fmt.Errorf("scale canary Deployment %s: %w", cd.Name, err)
		}
		return false, nil
	}
	var canary Pods
	for _, p := range s.pods {
		if s.revOf(p) == rev {
			canary.count(p, s.d.Spec.MinReadySeconds, s.now)
		}
	}
	done := deploymentComplete(cd) && canary.Total == c && canary.Ready == c
	return done, nil
}

// canaryDeployment builds the canary Deployment of revision rev: the
// Deployment's template with the Rollout's patchPodTemplateMetadata, the
// revision label added to template and selector, owned by the Rollout.
func (a *deployment) canaryDeployment(d *appsv1.Deployment, rev string, replicas int32) *appsv1.Deployment {
	tpl := d.Spec.Template.DeepCopy()
	if c := a.ro.Spec.Strategy.Canary; c != nil && c.PatchPodTemplateMetadata != nil {
		for k, v := range c.PatchPodTemplateMetadata.Labels {
			tpl.Labels = withLabel(tpl.Labels, k, v)
		}
		for k, v := range c.PatchPodTemplateMetadata.Annotations {
			tpl.Annotations = withLabel(tpl.Annotations, k, v)
		}
	}
	tpl.Labels = withLabel(tpl.Labels, v1alpha1.LabelRevision, rev)
	sel := d.Spec.Selector.DeepCopy()
	sel.MatchLabels = withLabel(sel.MatchLabels, v1alpha1.LabelRevision, rev)
	owner := metav1.NewControllerRef(a.ro, v1alpha1.GroupVersion.WithKind("Rollout"))
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Name:            CanaryName(d.Name, rev),
			Namespace:       d.Namespace,
			Labels:          map[string]string{LabelCanaryOf: d.Name, v1alpha1.LabelRevision: rev},
			OwnerReferences: []metav1.OwnerReference{*owner},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas:                ptr.To(replicas),
			Selector:                sel,
			Template:                *tpl,
			MinReadySeconds:         d.Spec.MinReadySeconds,
			ProgressDeadlineSeconds: d.Spec.ProgressDeadlineSeconds,
			RevisionHistoryLimit:    ptr.To[int32](0),
		},
	}
}

// rollbackCanary removes the canary Deployment; the held Deployment never
// left the stable revision. It is released when its template is back at
// the stable revision.
func (a *deployment) rollbackCanary(ctx context.Context, s *deployState) (bool, error) {
	if err := a.deleteCanaries(ctx, s.canaries, ""); err != nil {
		return false, err
	}
	for _, p := range s.pods {
		if rev := s.revOf(p); rev != s.ctrl.StableRevision {
			return false, nil // canary pods still terminating
		}
	}
	if len(s.canaries) > 0 {
		return false, nil
	}
	if DeploymentRevision(s.d) != s.ctrl.StableRevision {
		return true, nil
	}
	return false, a.release(ctx, s)
}
