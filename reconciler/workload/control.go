package workload

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// FieldOwner is the field manager of every write rollgate makes to a
// workload. The admission webhook passes updates from this manager through
// untouched: the reconciler is the one changing the control state.
const FieldOwner = "rollgate"

// HoldPartition is the StatefulSet partition that holds every pod at the
// stable revision: above every ordinal, whatever the replica count, so a
// scale-up between batches (HPA, kubectl scale) creates no canary pods.
const HoldPartition int32 = math.MaxInt32

// Style is how a release holds and moves a workload.
type Style string

// Styles of release.
const (
	// StylePartition: a Deployment held paused with Recreate whose
	// ReplicaSets rollgate scales, or a StatefulSet held by its partition.
	StylePartition Style = "Partition"
	// StyleCanary: a Deployment held paused beside a canary Deployment
	// owned by the Rollout (enableExtraWorkloadForCanary, blue-green).
	StyleCanary Style = "Canary"
	// StyleOnDelete: a DaemonSet held with the OnDelete strategy whose old
	// pods rollgate deletes batch by batch.
	StyleOnDelete Style = "OnDelete"
)

// Control is the release state kept in the workload's annotation
// rollgate.dev/control (JSON). The webhook re-asserts it on every update
// while it is present, and it carries the settings Git declares, which
// are restored at the end.
type Control struct {
	// Rollout is the name of the Rollout releasing the workload.
	Rollout string `json:"rollout"`
	// Style of the release, fixed when the release starts.
	Style Style `json:"style"`
	// StableRevision is the revision released before (see Revision).
	StableRevision string `json:"stableRevision"`
	// CanaryRevision is the revision being released.
	CanaryRevision string `json:"canaryRevision"`
	// Rollback is true when the workload's template returned to the stable
	// revision mid-release (a revert in Git): the release ends by rolling
	// back, without waiting for any step.
	Rollback bool `json:"rollback,omitempty"`
	// HeldWithoutRollout is true when the Rollout was deleted mid-release
	// with spec.onDelete Hold: the workload stays held as it stands until
	// a Rollout names it again (which takes the release over) or it is
	// handed back (HandBack).
	HeldWithoutRollout bool `json:"heldWithoutRollout,omitempty"`
	// Partition is the StatefulSet partition rollgate currently holds.
	Partition *int32 `json:"partition,omitempty"`
	// Declared holds the workload's own settings to restore at the end.
	Declared Declared `json:"declared"`
}

// Declared is what the workload's owner (Git) declares for the settings a
// release overrides. Only the fields of the workload's kind are set.
type Declared struct {
	// Paused is a Deployment's spec.paused.
	Paused *bool `json:"paused,omitempty"`
	// DeploymentStrategy is a Deployment's spec.strategy.
	DeploymentStrategy *appsv1.DeploymentStrategy `json:"deploymentStrategy,omitempty"`
	// StatefulSetStrategy is a StatefulSet's spec.updateStrategy.
	StatefulSetStrategy *appsv1.StatefulSetUpdateStrategy `json:"statefulSetStrategy,omitempty"`
	// DaemonSetStrategy is a DaemonSet's spec.updateStrategy.
	DaemonSetStrategy *appsv1.DaemonSetUpdateStrategy `json:"daemonSetStrategy,omitempty"`
}

// ParseControl returns the Control recorded on obj, or nil when no release
// holds it. An annotation that is not a Control (edited by hand) is an
// ErrInvalidControl naming the annotation and the way out.
func ParseControl(obj client.Object) (*Control, error) {
	raw, ok := obj.GetAnnotations()[v1alpha1.AnnotationControl]
	if !ok {
		return nil, nil
	}
	ctrl := &Control{}
	if err := json.Unmarshal([]byte(raw), ctrl); err != nil {
		kind := kindOf(obj)
		if kind == "" {
			kind = "workload"
		}
		return nil, fmt.Errorf("%w: annotation %s of %s %s is not what rollgate wrote (%v); only rollgate writes it: "+
			"remove it (kubectl annotate %s %s %s-) and apply the workload again from Git",
			ErrInvalidControl, v1alpha1.AnnotationControl, kind, obj.GetName(), err,
			strings.ToLower(kind), obj.GetName(), v1alpha1.AnnotationControl)
	}
	return ctrl, nil
}

// setControl records ctrl in obj's annotation, or removes it when nil.
func setControl(obj client.Object, ctrl *Control) error {
	ann := obj.GetAnnotations()
	if ctrl == nil {
		delete(ann, v1alpha1.AnnotationControl)
		obj.SetAnnotations(ann)
		return nil
	}
	data, err := json.Marshal(ctrl)
	if err != nil {
		return err
	}
	if ann == nil {
		ann = map[string]string{}
	}
	ann[v1alpha1.AnnotationControl] = string(data)
	obj.SetAnnotations(ann)
	return nil
}

// StyleFor returns the style a Rollout releases a workload kind with.
func StyleFor(ro *v1alpha1.Rollout, kind string) Style {
	switch kind {
	case "DaemonSet":
		return StyleOnDelete
	case "Deployment":
		s := ro.Spec.Strategy
		if s.BlueGreen != nil || (s.Canary != nil && s.Canary.EnableExtraWorkloadForCanary) {
			return StyleCanary
		}
	}
	return StylePartition
}

// Hold starts a release on obj, the updated workload: it records the
// settings obj declares in ctrl.Declared, applies the control state and
// writes ctrl into the annotation.
func Hold(obj client.Object, ctrl Control) error {
	ctrl.Declared = Declared{}
	if _, ok := obj.(*appsv1.StatefulSet); ok && ctrl.Partition == nil {
		ctrl.Partition = ptr.To(HoldPartition)
	}
	if err := capture(obj, &ctrl, true); err != nil {
		return err
	}
	return enforce(obj, &ctrl)
}

// Reassert re-applies an in-progress release to obj, an update sent by
// someone other than rollgate (a GitOps re-apply, kubectl): settings that
// differ from the control state are recorded as the new declared ones and
// the control state is put back. A new template is tracked: back to the
// stable revision marks a rollback, another revision becomes the canary.
func Reassert(obj client.Object, ctrl Control) error {
	tpl, err := PodTemplate(obj)
	if err != nil {
		return err
	}
	rev := Revision(tpl)
	switch rev {
	case ctrl.StableRevision:
		ctrl.Rollback = true
	case ctrl.CanaryRevision:
		ctrl.Rollback = false
	default:
		ctrl.CanaryRevision, ctrl.Rollback = rev, false
		if _, ok := obj.(*appsv1.StatefulSet); ok {
			ctrl.Partition = ptr.To(HoldPartition)
		}
	}
	if err := capture(obj, &ctrl, false); err != nil {
		return err
	}
	return enforce(obj, &ctrl)
}

// Release ends a release on obj: where obj carries the control state the
// declared settings are put back, and the annotation is removed. Settings
// obj already changed to something else are left as they are.
func Release(obj client.Object, ctrl *Control) error {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		if o.Spec.Paused && ctrl.Declared.Paused != nil {
			o.Spec.Paused = *ctrl.Declared.Paused
		}
		if ctrl.Style != StyleCanary && o.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType &&
			o.Spec.Strategy.RollingUpdate == nil && ctrl.Declared.DeploymentStrategy != nil {
			o.Spec.Strategy = *ctrl.Declared.DeploymentStrategy.DeepCopy()
		}
	case *appsv1.StatefulSet:
		if stsHeld(o, ctrl) {
			o.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType}
			if d := ctrl.Declared.StatefulSetStrategy; d != nil {
				o.Spec.UpdateStrategy = *d.DeepCopy()
			}
		}
	case *appsv1.DaemonSet:
		if o.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType && ctrl.Declared.DaemonSetStrategy != nil {
			o.Spec.UpdateStrategy = *ctrl.Declared.DaemonSetStrategy.DeepCopy()
		}
	default:
		return fmt.Errorf("unsupported workload type %T", obj)
	}
	return setControl(obj, nil)
}

// capture records obj's settings in ctrl.Declared: all of them, or only
// those that differ from the control state.
func capture(obj client.Object, ctrl *Control, all bool) error {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		if all || !o.Spec.Paused {
			ctrl.Declared.Paused = ptr.To(o.Spec.Paused)
		}
		if ctrl.Style != StyleCanary && (all || o.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType) {
			ctrl.Declared.DeploymentStrategy = o.Spec.Strategy.DeepCopy()
		}
	case *appsv1.StatefulSet:
		if all || !stsHeld(o, ctrl) {
			ctrl.Declared.StatefulSetStrategy = o.Spec.UpdateStrategy.DeepCopy()
		}
	case *appsv1.DaemonSet:
		if all || o.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType {
			ctrl.Declared.DaemonSetStrategy = o.Spec.UpdateStrategy.DeepCopy()
		}
	default:
		return fmt.Errorf("unsupported workload type %T", obj)
	}
	return nil
}

// enforce applies ctrl's control state to obj and records ctrl in obj.
func enforce(obj client.Object, ctrl *Control) error {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		o.Spec.Paused = true
		if ctrl.Style != StyleCanary {
			o.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
		}
	case *appsv1.StatefulSet:
		ru := &appsv1.RollingUpdateStatefulSetStrategy{}
		if cur := o.Spec.UpdateStrategy.RollingUpdate; cur != nil {
			ru.MaxUnavailable = cur.MaxUnavailable
		} else if d := ctrl.Declared.StatefulSetStrategy; d != nil && d.RollingUpdate != nil {
			ru.MaxUnavailable = d.RollingUpdate.MaxUnavailable
		}
		ru.Partition = ptr.To(ptr.Deref(ctrl.Partition, HoldPartition))
		o.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType, RollingUpdate: ru}
	case *appsv1.DaemonSet:
		o.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
	default:
		return fmt.Errorf("unsupported workload type %T", obj)
	}
	return setControl(obj, ctrl)
}

// stsHeld reports whether a StatefulSet carries the partition ctrl holds.
func stsHeld(o *appsv1.StatefulSet, ctrl *Control) bool {
	s := o.Spec.UpdateStrategy
	return s.Type == appsv1.RollingUpdateStatefulSetStrategyType && s.RollingUpdate != nil &&
		s.RollingUpdate.Partition != nil && *s.RollingUpdate.Partition == ptr.Deref(ctrl.Partition, HoldPartition)
}

// PodTemplate returns the pod template of a Deployment, StatefulSet or
// DaemonSet.
func PodTemplate(obj client.Object) (*corev1.PodTemplateSpec, error) {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return &o.Spec.Template, nil
	case *appsv1.StatefulSet:
		return &o.Spec.Template, nil
	case *appsv1.DaemonSet:
		return &o.Spec.Template, nil
	}
	return nil, fmt.Errorf("unsupported workload type %T", obj)
}

// IsHeld reports whether obj's spec carries ctrl's control state, so that
// its own controller moves no pod: a paused Deployment (with Recreate in
// the partition style), a StatefulSet at the held partition, a DaemonSet
// with OnDelete.
func IsHeld(obj client.Object, ctrl *Control) (bool, error) {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return o.Spec.Paused && (ctrl.Style == StyleCanary || o.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType), nil
	case *appsv1.StatefulSet:
		return stsHeld(o, ctrl), nil
	case *appsv1.DaemonSet:
		return o.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType, nil
	}
	return false, fmt.Errorf("unsupported workload type %T", obj)
}
