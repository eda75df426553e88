package workload

import (
	"context"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// native is the part of an adapter shared by the workload kinds that run
// their pods themselves and are held through their own update strategy
// (StatefulSet: the partition; DaemonSet: OnDelete). Releasing one gives
// the pods back to its native controller, which finishes the rollout.
type native[T client.Object] struct {
	base
	kind nativeKind[T]
}

// nativeKind is what tells one such workload kind from another.
type nativeKind[T client.Object] struct {
	// empty returns an empty object of the kind, to read into.
	empty func() T
	// selector returns the workload's pod selector.
	selector func(T) *metav1.LabelSelector
	// desired is the number of pods the workload asks for.
	desired func(T) int32
	// minReady is the workload's minReadySeconds.
	minReady func(T) int32
	// complete reports whether the native controller finished rolling
	// out the current spec.
	complete func(T) bool
	// budget resolves the declared maxUnavailable (or the override) as
	// the native controller does, at least 1.
	budget func(obj T, ctrl *Control, override *intstr.IntOrString) int32
	// podValue is the controller-revision-hash the native controller
	// gives the pods of a ControllerRevision.
	podValue func(*appsv1.ControllerRevision) string
}

// ownedState is what one call reads about a natively held workload: the
// object, rollgate's control annotations on it, its revision history and
// its pods.
type ownedState[T client.Object] struct {
	obj  T
	ctrl *Control
	h    *history
	pods []*corev1.Pod
	now  time.Time
}

func (a *native[T]) Cover(ctx context.Context) error {
	return a.cover(ctx, a.kind.empty(), true)
}

func (a *native[T]) Uncover(ctx context.Context) error {
	return a.cover(ctx, a.kind.empty(), false)
}

func (a *native[T]) LeaveHeld(ctx context.Context) (bool, error) {
	return a.leaveHeld(ctx, a.kind.empty())
}

// read reads the workload with its control annotations, history and pods.
func (a *native[T]) read(ctx context.Context) (*ownedState[T], error) {
	obj := a.kind.empty()
	st := &ownedState[T]{obj: obj, now: a.clock()}
	if err := a.get(ctx, obj); err != nil {
		return nil, err
	}
	var err error
	if st.ctrl, err = ParseControl(obj); err != nil {
		return nil, err
	}
	if st.h, err = a.readHistory(ctx, obj, a.kind.selector(obj), a.kind.podValue); err != nil {
		return nil, err
	}
	st.pods, err = a.listPods(ctx, a.kind.selector(obj), map[types.UID]bool{obj.GetUID(): true})
	return st, err
}

func (a *native[T]) Observe(ctx context.Context) (Observation, error) {
	st, err := a.read(ctx)
	if err != nil {
		return Observation{}, err
	}
	o := Observation{Replicas: a.kind.desired(st.obj)}
	if err := observeControl(&o, st.obj); err != nil {
		return o, err
	}
	a.tally(&o, st)
	o.RevisionLabel, o.LabelValues, o.LabelPending = revisionLabel(st.h, o.StableRevision, o.CanaryRevision)
	o.MaxUnavailable = a.kind.budget(st.obj, st.ctrl, nil)
	o.Complete = !o.Held && a.kind.complete(st.obj)
	return o, nil
}

// revisionLabel is the pod label the Services of a release select its
// revisions by, with each revision's value and the revision whose value is
// not known yet (Observation.RevisionLabel, LabelPending):
// controller-revision-hash, which the native controller gives every pod
// at its creation, when the stable revision's value is known for certain;
// otherwise "", rollgate.dev/revision, which rollgate puts on every pod.
func revisionLabel(h *history, stable, canary string) (string, map[string]string, string) {
	if values, pending, ok := h.labelValues(stable, canary); ok {
		return appsv1.ControllerRevisionHashLabelKey, values, pending
	}
	return "", nil, ""
}

// labelsEvery reports whether every pod, stable ones too, needs
// rollgate.dev/revision: the Services select by it (revisionLabel).
func labelsEvery[T client.Object](st *ownedState[T]) bool {
	key, _, _ := revisionLabel(st.h, st.ctrl.StableRevision, st.ctrl.CanaryRevision)
	return key == ""
}

// tally counts the workload's pods into o by revision.
func (a *native[T]) tally(o *Observation, st *ownedState[T]) {
	tally(o, st.pods, st.h.revOf, a.kind.minReady(st.obj), st.now)
}

// deleteWithin deletes pods within the availability budget (see
// base.deleteWithin).
func (a *native[T]) deleteWithin(ctx context.Context, st *ownedState[T], pods []*corev1.Pod, maxUnavailable int32) error {
	return a.base.deleteWithin(ctx, st.pods, pods, a.kind.desired(st.obj), maxUnavailable, a.kind.minReady(st.obj), st.now)
}

// whileHeld reads the workload and, while a release holds it, runs act on
// what it read; once released, done reports whether the native controller
// is complete.
func (a *native[T]) whileHeld(ctx context.Context, act func(st *ownedState[T]) (done bool, err error)) (bool, error) {
	st, err := a.read(ctx)
	if err != nil {
		return false, err
	}
	if st.ctrl == nil {
		return a.kind.complete(st.obj), nil
	}
	return act(st)
}

func (a *native[T]) HandBack(ctx context.Context) (bool, error) {
	return a.whileHeld(ctx, func(st *ownedState[T]) (bool, error) {
		if err := a.labelLastBatch(ctx, st.pods, st.h.revOf, st.ctrl, labelsEvery(st)); err != nil {
			return false, err
		}
		return false, a.release(ctx, st)
	})
}

// release restores the declared settings and removes the annotation: the
// native controller takes the pods back.
func (a *native[T]) release(ctx context.Context, st *ownedState[T]) error {
	return a.update(ctx, st.obj, func() error { return Release(st.obj, st.ctrl) })
}
