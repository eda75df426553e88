package workload

import (
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// Update is an update of a covered workload seen at admission.
type Update struct {
	// Old is the workload before the update.
	Old client.Object
	// New is the workload as sent (after defaulting); Admit mutates it.
	New client.Object
	// Rollout is the enabled Rollout that references the workload, nil
	// when there is none (or it is disabled or being deleted).
	Rollout *v1alpha1.Rollout
	// FromRollgate is true when the update was sent with field manager
	// FieldOwner: rollgate's own changes are never rewritten.
	FromRollgate bool
}

// Verdict says what Admit did to an update.
type Verdict string

// Verdicts of Admit.
const (
	// Unchanged: the update passes as sent.
	Unchanged Verdict = "Unchanged"
	// Held: the pod template changed; the update starts a release and the
	// workload is frozen at the old revision.
	Held Verdict = "Held"
	// Reasserted: a release is in progress; its control state was put
	// back and the declared settings recorded.
	Reasserted Verdict = "Reasserted"
	// Released: a release was in progress but no enabled Rollout covers
	// the workload any more; the declared settings were restored.
	Released Verdict = "Released"
	// KeptHeld: the Rollout was deleted mid-release with spec.onDelete
	// Hold; the control state was put back as for Reasserted.
	KeptHeld Verdict = "KeptHeld"
	// Unreadable: the old object's control annotation cannot be read
	// (edited by hand); the update passes as sent, and the Rollout
	// reports the annotation (ErrInvalidControl).
	Unreadable Verdict = "Unreadable"
)

// Admit decides what the admission webhook does with an update of a
// workload labelled rollgate.dev/controlled (before or after the update),
// and mutates u.New accordingly. The decision reads only what the writer
// cannot drop: the old object and the Rollout that names the workload. A
// whole-object write (kubectl replace, a PUT of what Git declares, a patch
// that removes rollgate's label or annotation) is treated like any other
// update, and rollgate's marks are put back:
//
//   - rollgate's own updates pass unchanged;
//   - while an enabled Rollout names the workload, its rollgate.dev/controlled
//     label stays (to take a workload out of rollgate's hands, disable or
//     delete its Rollout);
//   - mid-release (the old object carries the control annotation) every
//     update is re-asserted, or released when no enabled Rollout is left
//     (kept held, label included, when the Rollout was deleted with
//     spec.onDelete Hold);
//   - a control annotation rollgate cannot read lets the update pass as
//     sent (Unreadable): refusing it would refuse every later update of
//     the workload, and the Rollout reports the annotation;
//   - otherwise a pod template change of a workload with pods, referenced
//     by an enabled Rollout, starts a release: the workload is held at the
//     old revision before any pod changes.
func Admit(u Update) (Verdict, error) {
	if u.FromRollgate {
		return Unchanged, nil
	}
	if u.Rollout != nil {
		keepLabel(u.New)
	}
	ctrl, err := ParseControl(u.Old)
	if err != nil {
		return Unreadable, nil
	}
	if ctrl != nil {
		switch {
		case u.Rollout != nil:
			return Reasserted, Reassert(u.New, *ctrl)
		case ctrl.HeldWithoutRollout:
			keepLabel(u.New)
			return KeptHeld, Reassert(u.New, *ctrl)
		}
		return Released, Release(u.New, ctrl)
	}
	// Only rollgate writes the annotation: drop one sent by anyone else.
	if err := setControl(u.New, nil); err != nil {
		return Unchanged, err
	}
	if u.Rollout == nil || !hasPods(u.New) {
		return Unchanged, nil
	}
	oldTpl, err := PodTemplate(u.Old)
	if err != nil {
		return Unchanged, err
	}
	newTpl, err := PodTemplate(u.New)
	if err != nil {
		return Unchanged, err
	}
	stable, canary := Revision(oldTpl), Revision(newTpl)
	if stable == canary {
		return Unchanged, nil
	}
	kind := kindOf(u.New)
	return Held, Hold(u.New, Control{
		Rollout:        u.Rollout.Name,
		Style:          StyleFor(u.Rollout, kind),
		StableRevision: stable,
		CanaryRevision: canary,
	})
}

// keepLabel puts the rollgate.dev/controlled label back on obj.
func keepLabel(obj client.Object) {
	labels := obj.GetLabels()
	if _, ok := labels[v1alpha1.LabelControlled]; ok {
		return
	}
	if labels == nil {
		labels = map[string]string{}
	}
	labels[v1alpha1.LabelControlled] = "true"
	obj.SetLabels(labels)
}

// hasPods reports whether a workload asks for any pod; a Deployment or
// StatefulSet scaled to zero has nothing to release.
func hasPods(obj client.Object) bool {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return o.Spec.Replicas == nil || *o.Spec.Replicas > 0
	case *appsv1.StatefulSet:
		return o.Spec.Replicas == nil || *o.Spec.Replicas > 0
	}
	return true
}

// kindOf returns the kind of a typed workload.
func kindOf(obj client.Object) string {
	switch obj.(type) {
	case *appsv1.Deployment:
		return "Deployment"
	case *appsv1.StatefulSet:
		return "StatefulSet"
	case *appsv1.DaemonSet:
		return "DaemonSet"
	}
	return ""
}
