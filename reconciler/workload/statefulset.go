package workload

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// statefulSet releases a StatefulSet through its native partition.
type statefulSet struct {
	native[*appsv1.StatefulSet]
}

// stsState is what one call reads about a StatefulSet.
type stsState = ownedState[*appsv1.StatefulSet]

// newStatefulSet returns the adapter of the StatefulSet b names.
func newStatefulSet(b base) *statefulSet {
	return &statefulSet{native[*appsv1.StatefulSet]{base: b, kind: nativeKind[*appsv1.StatefulSet]{
		empty:    func() *appsv1.StatefulSet { return &appsv1.StatefulSet{} },
		selector: func(s *appsv1.StatefulSet) *metav1.LabelSelector { return s.Spec.Selector },
		desired:  func(s *appsv1.StatefulSet) int32 { return ptr.Deref(s.Spec.Replicas, 1) },
		minReady: func(s *appsv1.StatefulSet) int32 { return s.Spec.MinReadySeconds },
		complete: statefulSetComplete,
		budget:   stsBudget,
		podValue: func(cr *appsv1.ControllerRevision) string { return cr.Name },
	}}}
}

// statefulSetComplete reports whether the StatefulSet controller finished
// rolling out the current spec.
func statefulSetComplete(s *appsv1.StatefulSet) bool {
	r, st := ptr.Deref(s.Spec.Replicas, 1), s.Status
	return st.ObservedGeneration >= s.Generation && st.UpdateRevision == st.CurrentRevision &&
		st.UpdatedReplicas == r && st.Replicas == r && st.AvailableReplicas == r
}

// stsBudget resolves the declared maxUnavailable (or the override) as the
// StatefulSet controller does: default 1, percentages rounded down, and at
// least 1, since a StatefulSet cannot surge.
func stsBudget(s *appsv1.StatefulSet, ctrl *Control, override *intstr.IntOrString) int32 {
	strategy := s.Spec.UpdateStrategy
	if ctrl != nil && ctrl.Declared.StatefulSetStrategy != nil {
		strategy = *ctrl.Declared.StatefulSetStrategy
	}
	mu := override
	if ru := strategy.RollingUpdate; mu == nil && ru != nil {
		mu = ru.MaxUnavailable
	}
	return max(scaled(mu, intstr.FromInt32(1), ptr.Deref(s.Spec.Replicas, 1), false), 1)
}

func (a *statefulSet) EnsureBatch(ctx context.Context, b Batch) (bool, error) {
	st, err := a.read(ctx)
	if err != nil {
		return false, err
	}
	if st.ctrl == nil {
		return false, fmt.Errorf("StatefulSet %s: %w", a.key(), ErrNotHeld)
	}
	// Label first: where the Services select by rollgate.dev/revision, the
	// stable one is narrowed to it (labelsEvery).
	if err := a.labelPods(ctx, st.pods, st.h.revOf, st.ctrl.CanaryRevision, b, labelsEvery(st)); err != nil {
		return false, err
	}
	r := a.kind.desired(st.obj)
	c := clamp(b.CanaryReplicas, r)
	if moved, err := a.hold(ctx, st, r-c); moved || err != nil {
		return false, err
	}
	// Pods below the partition that are not stable (an abandoned canary, or
	// canary pods left below it by a scale-up) come back at the stable
	// revision when deleted.
	strays := a.pods(st, func(p *corev1.Pod, ord int) bool { return ord < int(r-c) && st.h.revOf(p) != st.ctrl.StableRevision })
	if err := a.deleteWithin(ctx, st, strays, stsBudget(st.obj, st.ctrl, b.MaxUnavailable)); err != nil {
		return false, err
	}
	var o Observation
	o.StableRevision, o.CanaryRevision = st.ctrl.StableRevision, st.ctrl.CanaryRevision
	a.tally(&o, st)
	done := len(strays) == 0 && o.Canary.Total == c && o.Canary.Ready == c && o.Stable.Total == r-c && o.Other.Total == 0
	return done, nil
}

// hold makes the StatefulSet carry partition p (recorded in the control
// annotation too); moved is true when it had to be written.
func (a *statefulSet) hold(ctx context.Context, st *stsState, p int32) (moved bool, err error) {
	if ptr.Deref(st.ctrl.Partition, HoldPartition) == p && stsHeld(st.obj, st.ctrl) {
		return false, nil
	}
	st.ctrl.Partition = ptr.To(p)
	return true, a.update(ctx, st.obj, func() error { return enforce(st.obj, st.ctrl) })
}

// pods returns the live pods that match, highest ordinal first.
func (a *statefulSet) pods(st *stsState, match func(p *corev1.Pod, ord int) bool) []*corev1.Pod {
	type indexed struct {
		ord int
		pod *corev1.Pod
	}
	var found []indexed
	for _, p := range st.pods {
		ord, err := strconv.Atoi(strings.TrimPrefix(p.Name, st.obj.Name+"-"))
		if err == nil && p.DeletionTimestamp == nil && match(p, ord) {
			found = append(found, indexed{ord, p})
		}
	}
	sort.Slice(found, func(i, j int) bool { return found[i].ord > found[j].ord })
	out := make([]*corev1.Pod, len(found))
	for i, f := range found {
		out[i] = f.pod
	}
	return out
}

// Rollback releases a StatefulSet reverted in Git (its controller rolls
// the canary pods back with the declared strategy); otherwise it holds
// every ordinal and replaces the canary pods within the budget.
func (a *statefulSet) Rollback(ctx context.Context) (bool, error) {
	return a.whileHeld(ctx, func(st *stsState) (bool, error) {
		if Revision(&st.obj.Spec.Template) == st.ctrl.StableRevision {
			return false, a.release(ctx, st)
		}
		if moved, err := a.hold(ctx, st, HoldPartition); moved || err != nil {
			return false, err
		}
		strays := a.pods(st, func(p *corev1.Pod, _ int) bool { return st.h.revOf(p) != st.ctrl.StableRevision })
		if err := a.deleteWithin(ctx, st, strays, stsBudget(st.obj, st.ctrl, nil)); err != nil {
			return false, err
		}
		var o Observation
		o.StableRevision = st.ctrl.StableRevision
		a.tally(&o, st)
		return len(strays) == 0 && o.Stable.Total == a.kind.desired(st.obj), nil
	})
}
