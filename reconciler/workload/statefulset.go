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
	base
}

// stsState is what one call reads about a StatefulSet.
type stsState = ownedState[*appsv1.StatefulSet]

func (a *statefulSet) Cover(ctx context.Context) error {
	return a.cover(ctx, &appsv1.StatefulSet{}, true)
}

func (a *statefulSet) Uncover(ctx context.Context) error {
	return a.cover(ctx, &appsv1.StatefulSet{}, false)
}

func (a *statefulSet) LeaveHeld(ctx context.Context) (bool, error) {
	return a.leaveHeld(ctx, &appsv1.StatefulSet{})
}

func (a *statefulSet) read(ctx context.Context) (*stsState, error) {
	return readOwned(ctx, &a.base, &appsv1.StatefulSet{}, func(s *appsv1.StatefulSet) *metav1.LabelSelector { return s.Spec.Selector })
}

func (a *statefulSet) Observe(ctx context.Context) (Observation, error) {
	st, err := a.read(ctx)
	if err != nil {
		return Observation{}, err
	}
	o := Observation{Replicas: ptr.Deref(st.obj.Spec.Replicas, 1)}
	if err := observeControl(&o, st.obj); err != nil {
		return o, err
	}
	tally(&o, st.pods, st.h.revOf, st.obj.Spec.MinReadySeconds, st.now)
	o.MaxUnavailable = stsBudget(st.obj, st.ctrl, nil)
	o.Complete = !o.Frozen && statefulSetComplete(st.obj)
	return o, nil
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
	// Label first: the stable Service is narrowed to the revision label.
	if err := a.labelPods(ctx, st.pods, st.h.revOf, st.ctrl.CanaryRevision, b); err != nil {
		return false, err
	}
	r := ptr.Deref(st.obj.Spec.Replicas, 1)
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
	tally(&o, st.pods, st.h.revOf, st.obj.Spec.MinReadySeconds, st.now)
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
	if err := enforce(st.obj, st.ctrl); err != nil {
		return false, err
	}
	return true, a.update(ctx, st.obj)
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

// deleteWithin deletes pods within the availability budget (see
// base.deleteWithin).
func (a *statefulSet) deleteWithin(ctx context.Context, st *stsState, pods []*corev1.Pod, maxUnavailable int32) error {
	return a.base.deleteWithin(ctx, st.pods, pods, ptr.Deref(st.obj.Spec.Replicas, 1), maxUnavailable, st.obj.Spec.MinReadySeconds, st.now)
}

func (a *statefulSet) Finalize(ctx context.Context) (bool, error) {
	st, err := a.read(ctx)
	if err != nil {
		return false, err
	}
	if st.ctrl != nil {
		if err := a.labelLastBatch(ctx, st.pods, st.h.revOf, st.ctrl); err != nil {
			return false, err
		}
		return false, a.release(ctx, st)
	}
	return statefulSetComplete(st.obj), nil
}

func (a *statefulSet) release(ctx context.Context, st *stsState) error {
	if err := Release(st.obj, st.ctrl); err != nil {
		return err
	}
	return a.update(ctx, st.obj)
}

func (a *statefulSet) Rollback(ctx context.Context) (bool, error) {
	st, err := a.read(ctx)
	if err != nil {
		return false, err
	}
	if st.ctrl == nil {
		return statefulSetComplete(st.obj), nil
	}
	if Revision(&st.obj.Spec.Template) == st.ctrl.StableRevision {
		// Reverted in Git: the native controller rolls the canary pods
		// back with the declared strategy.
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
	tally(&o, st.pods, st.h.revOf, st.obj.Spec.MinReadySeconds, st.now)
	return len(strays) == 0 && o.Stable.Total == ptr.Deref(st.obj.Spec.Replicas, 1), nil
}
