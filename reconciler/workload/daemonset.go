package workload

import (
	"context"
	"fmt"
	"sort"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// daemonSet releases a DaemonSet held with OnDelete by deleting old pods;
// the DaemonSet controller recreates them from the current template.
type daemonSet struct {
	native[*appsv1.DaemonSet]
}

// dsState is what one call reads about a DaemonSet.
type dsState = ownedState[*appsv1.DaemonSet]

// newDaemonSet returns the adapter of the DaemonSet b names.
func newDaemonSet(b base) *daemonSet {
	return &daemonSet{native[*appsv1.DaemonSet]{base: b, kind: nativeKind[*appsv1.DaemonSet]{
		empty:    func() *appsv1.DaemonSet { return &appsv1.DaemonSet{} },
		selector: func(ds *appsv1.DaemonSet) *metav1.LabelSelector { return ds.Spec.Selector },
		desired:  func(ds *appsv1.DaemonSet) int32 { return ds.Status.DesiredNumberScheduled },
		minReady: func(ds *appsv1.DaemonSet) int32 { return ds.Spec.MinReadySeconds },
		complete: daemonSetComplete,
		budget:   dsBudget,
		podValue: func(cr *appsv1.ControllerRevision) string { return cr.Labels[appsv1.ControllerRevisionHashLabelKey] },
	}}}
}

// daemonSetComplete reports whether the DaemonSet controller finished
// rolling out the current spec.
func daemonSetComplete(ds *appsv1.DaemonSet) bool {
	st := ds.Status
	return st.ObservedGeneration >= ds.Generation && st.UpdatedNumberScheduled == st.DesiredNumberScheduled &&
		st.NumberAvailable == st.DesiredNumberScheduled && st.CurrentNumberScheduled == st.DesiredNumberScheduled
}

// dsBudget resolves the declared maxUnavailable (or the override) as the
// DaemonSet controller does (default 1, percentages rounded up), and at
// least 1: a held DaemonSet cannot surge.
func dsBudget(ds *appsv1.DaemonSet, ctrl *Control, override *intstr.IntOrString) int32 {
	strategy := ds.Spec.UpdateStrategy
	if ctrl != nil && ctrl.Declared.DaemonSetStrategy != nil {
		strategy = *ctrl.Declared.DaemonSetStrategy
	}
	mu := override
	if ru := strategy.RollingUpdate; mu == nil && ru != nil {
		mu = ru.MaxUnavailable
	}
	return max(scaled(mu, intstr.FromInt32(1), ds.Status.DesiredNumberScheduled, true), 1)
}

func (a *daemonSet) EnsureBatch(ctx context.Context, b Batch) (bool, error) {
	st, err := a.read(ctx)
	if err != nil {
		return false, err
	}
	if st.ctrl == nil {
		return false, fmt.Errorf("DaemonSet %s: %w", a.key(), ErrNotHeld)
	}
	// Label first: where the Services select by rollgate.dev/revision, the
	// stable one is narrowed to it (labelsEvery).
	if err := a.labelPods(ctx, st.pods, st.h.revOf, st.ctrl.CanaryRevision, b, labelsEvery(st)); err != nil {
		return false, err
	}
	r := a.kind.desired(st.obj)
	c := clamp(b.CanaryReplicas, r)
	var o Observation
	o.StableRevision, o.CanaryRevision = st.ctrl.StableRevision, st.ctrl.CanaryRevision
	a.tally(&o, st)
	// Replace old pods, those of an abandoned canary first.
	var old []*corev1.Pod
	for _, p := range st.pods {
		if p.DeletionTimestamp == nil && st.h.revOf(p) != st.ctrl.CanaryRevision {
			old = append(old, p)
		}
	}
	sort.SliceStable(old, func(i, j int) bool {
		return st.h.revOf(old[i]) != st.ctrl.StableRevision && st.h.revOf(old[j]) == st.ctrl.StableRevision
	})
	if need := int(c - o.Canary.Total); need > 0 && len(old) > 0 {
		if err := a.deleteWithin(ctx, st, old[:min(need, len(old))], dsBudget(st.obj, st.ctrl, b.MaxUnavailable)); err != nil {
			return false, err
		}
	}
	done := o.Canary.Total >= c && o.Canary.Ready >= c && o.Canary.Total+o.Stable.Total+o.Other.Total == r &&
		terminating(st.pods) == 0
	return done, nil
}

// terminating counts the pods being deleted.
func terminating(pods []*corev1.Pod) int {
	n := 0
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			n++
		}
	}
	return n
}

// Rollback puts the stable template back (the DaemonSet controller can only
// create pods from the current template, as `kubectl rollout undo` does),
// still held, then replaces the other pods within the budget and releases
// the DaemonSet.
func (a *daemonSet) Rollback(ctx context.Context) (bool, error) {
	return a.whileHeld(ctx, func(st *dsState) (bool, error) {
		if Revision(&st.obj.Spec.Template) != st.ctrl.StableRevision {
			tpl := st.h.templates[st.ctrl.StableRevision]
			if tpl == nil {
				return false, fmt.Errorf("DaemonSet %s: no ControllerRevision of stable revision %s", a.key(), st.ctrl.StableRevision)
			}
			return false, a.update(ctx, st.obj, func() error {
				st.obj.Spec.Template = *tpl.DeepCopy()
				st.ctrl.Rollback = true
				return enforce(st.obj, st.ctrl)
			})
		}
		var strays []*corev1.Pod
		for _, p := range st.pods {
			if p.DeletionTimestamp == nil && st.h.revOf(p) != st.ctrl.StableRevision {
				strays = append(strays, p)
			}
		}
		if len(strays) > 0 || terminating(st.pods) > 0 {
			return false, a.deleteWithin(ctx, st, strays, dsBudget(st.obj, st.ctrl, nil))
		}
		return false, a.release(ctx, st)
	})
}
