package workload

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// base holds what every adapter needs.
type base struct {
	c  client.Client
	ro *v1alpha1.Rollout
	// clock tells the time pod availability is judged at.
	clock func() time.Time
	// indexed: c serves OwnerIndex (see OwnerIndexed).
	indexed bool
	// live reads from the API server (APIReader); nil: c.
	live client.Reader
}

// liveReader reads what the cache does not keep (APIReader).
func (b *base) liveReader() client.Reader {
	if b.live != nil {
		return b.live
	}
	return b.c
}

func (b *base) key() client.ObjectKey {
	return client.ObjectKey{Namespace: b.ro.Namespace, Name: b.ro.Spec.WorkloadRef.Name}
}

// get reads the workload into obj.
func (b *base) get(ctx context.Context, obj client.Object) error {
	if err := b.c.Get(ctx, b.key(), obj); err != nil {
		return fmt.Errorf("get %s %s: %w", b.ro.Spec.WorkloadRef.Kind, b.key(), err)
	}
	return nil
}

// update writes what change changes of obj, a workload read from the
// cache, as rollgate (the webhook lets it through as sent): a merge patch
// between obj before and after change, refused if obj is not the API
// server's latest (its resourceVersion). Only what change set is sent: a
// cached Deployment has no pod template (StripDeployment), and an update
// of the whole object would write that back.
func (b *base) update(ctx context.Context, obj client.Object, change func() error) error {
	orig := obj.DeepCopyObject().(client.Object)
	if err := change(); err != nil {
		return err
	}
	patch := client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})
	if err := b.c.Patch(ctx, obj, patch, client.FieldOwner(FieldOwner)); err != nil {
		return fmt.Errorf("update %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
	}
	return nil
}

// setLabel sets (or, with an empty value, removes) one label of obj with a
// merge patch.
func (b *base) setLabel(ctx context.Context, obj client.Object, key, value string) error {
	var v any
	if value != "" {
		v = value
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{key: v}}})
	if err != nil {
		return err
	}
	return b.c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(FieldOwner))
}

// cover sets or removes the controlled label on the workload. Setting it
// also takes over a release a deleted Rollout left held.
func (b *base) cover(ctx context.Context, obj client.Object, on bool) error {
	if err := b.get(ctx, obj); err != nil {
		return err
	}
	if on {
		if err := b.adopt(ctx, obj); err != nil {
			return err
		}
	}
	_, has := obj.GetLabels()[v1alpha1.LabelControlled]
	switch {
	case on && !has:
		return b.setLabel(ctx, obj, v1alpha1.LabelControlled, "true")
	case !on && has:
		return b.setLabel(ctx, obj, v1alpha1.LabelControlled, "")
	}
	return nil
}

// adopt clears the mark a deleted Rollout left on obj, a workload it held
// mid-release: this Rollout names the workload and continues the release.
func (b *base) adopt(ctx context.Context, obj client.Object) error {
	ctrl, err := ParseControl(obj)
	if err != nil || ctrl == nil || !ctrl.HeldWithoutRollout {
		return err
	}
	ctrl.HeldWithoutRollout, ctrl.Rollout = false, b.ro.Name
	return b.update(ctx, obj, func() error { return setControl(obj, ctrl) })
}

// leaveHeld marks the release holding the workload (obj, read here) to
// stay once the Rollout is gone.
func (b *base) leaveHeld(ctx context.Context, obj client.Object) (bool, error) {
	if err := b.get(ctx, obj); err != nil {
		return false, err
	}
	ctrl, err := ParseControl(obj)
	if err != nil || ctrl == nil || ctrl.HeldWithoutRollout {
		return err == nil, err
	}
	ctrl.HeldWithoutRollout = true
	return true, b.update(ctx, obj, func() error { return setControl(obj, ctrl) })
}

// listPods lists the pods in the Rollout's namespace matching selector
// and controlled by one of owners (by UID).
func (b *base) listPods(ctx context.Context, selector *metav1.LabelSelector, owners map[types.UID]bool) ([]*corev1.Pod, error) {
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return nil, fmt.Errorf("selector of %s: %w", b.key(), err)
	}
	pods, err := listOwned(ctx, b, newPodList, podItems, b.ro.Namespace, sel, owners)
	if err != nil {
		return nil, fmt.Errorf("list pods of %s: %w", b.key(), err)
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	return pods, nil
}

// labelPods labels the pods of the canary revision with the batch's
// rollout id and batch id (pods already labelled for this rollout keep
// the batch that created them) and with their revision, and, with every,
// the other pods with their revision too (the Services narrow by it).
func (b *base) labelPods(ctx context.Context, pods []*corev1.Pod, revOf func(*corev1.Pod) string, canary string, batch Batch, every bool) error {
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		rev := revOf(p)
		if !every && (rev == "" || rev != canary) {
			continue
		}
		want := map[string]string{}
		if rev != "" {
			want[v1alpha1.LabelRevision] = rev
		}
		if rev == canary && batch.RolloutID != "" && p.Labels[v1alpha1.LabelRolloutID] != batch.RolloutID {
			want[v1alpha1.LabelRolloutID] = batch.RolloutID
			want[v1alpha1.LabelBatchID] = fmt.Sprint(batch.BatchID)
		}
		missing := map[string]any{}
		for k, v := range want {
			if p.Labels[k] != v {
				missing[k] = v
			}
		}
		if len(missing) == 0 {
			continue
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": missing}})
		if err != nil {
			return err
		}
		if err := b.c.Patch(ctx, p, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(FieldOwner)); err != nil {
			return client.IgnoreNotFound(fmt.Errorf("label pod %s: %w", p.Name, err))
		}
	}
	return nil
}

// labelRevisions labels every pod with its revision once the workload is
// released: the pods its own controller creates then join the Services
// narrowed to the new revision (a release finishing with Promoted traffic).
// It reports whether every pod already carried its label.
func (b *base) labelRevisions(ctx context.Context, pods []*corev1.Pod, revOf func(*corev1.Pod) string) (bool, error) {
	for _, p := range pods {
		if rev := revOf(p); p.DeletionTimestamp == nil && rev != "" && p.Labels[v1alpha1.LabelRevision] != rev {
			return false, b.labelPods(ctx, pods, revOf, "", Batch{}, true)
		}
	}
	return true, nil
}

// labelLastBatch labels the canary pods that no EnsureBatch labelled, as
// HandBack starts: the pods of the last batch can become available before
// a reconcile sees them, and the release then completes without another
// EnsureBatch. They get the batch id of the Rollout's current step, which
// the reconciler records before it acts: the step that created them.
// With every, the other pods get their revision label too (labelPods).
func (b *base) labelLastBatch(ctx context.Context, pods []*corev1.Pod, revOf func(*corev1.Pod) string, ctrl *Control, every bool) error {
	step := b.ro.Status.CurrentStepIndex
	if ctrl == nil || ctrl.Rollback || step < 1 || b.ro.Status.CanaryRevision != ctrl.CanaryRevision {
		return nil
	}
	return b.labelPods(ctx, pods, revOf, ctrl.CanaryRevision, Batch{RolloutID: RolloutID(b.ro.Name, ctrl.CanaryRevision), BatchID: step}, every)
}

// deleteWithin deletes the candidate pods that are not available at no
// cost, and available ones only while no more than maxUnavailable of the
// workload's desired pods (all is every pod it runs) would be unavailable.
func (b *base) deleteWithin(ctx context.Context, all, candidates []*corev1.Pod, desired, maxUnavailable, minReady int32, now time.Time) error {
	var avail int32
	for _, p := range all {
		if available(p, minReady, now) {
			avail++
		}
	}
	budget := maxUnavailable - (desired - avail)
	var doomed []*corev1.Pod
	for _, p := range candidates {
		switch {
		case !available(p, minReady, now):
			doomed = append(doomed, p)
		case budget > 0:
			doomed = append(doomed, p)
			budget--
		}
	}
	return b.deletePods(ctx, doomed)
}

// deletePods deletes pods (already running ones with a precondition on
// their UID, so a replacement is never deleted by mistake).
func (b *base) deletePods(ctx context.Context, pods []*corev1.Pod) error {
	for _, p := range pods {
		err := b.c.Delete(ctx, p, client.Preconditions{UID: &p.UID})
		if client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete pod %s: %w", p.Name, err)
		}
	}
	return nil
}

// count adds pod p to c.
func (c *Pods) count(p *corev1.Pod, minReady int32, now time.Time) {
	if p.DeletionTimestamp != nil {
		return
	}
	c.Total++
	if available(p, minReady, now) {
		c.Ready++
	}
}

// available reports whether a pod is Ready since at least minReady
// seconds and not terminating.
func available(p *corev1.Pod, minReady int32, now time.Time) bool {
	if p.DeletionTimestamp != nil {
		return false
	}
	since, ready := readySince(p)
	return ready && (minReady == 0 || !since.Add(time.Duration(minReady)*time.Second).After(now))
}

// becomesAvailable is when pod p, Ready for less than minReady seconds at
// now, becomes available; zero for any other pod.
func becomesAvailable(p *corev1.Pod, minReady int32, now time.Time) time.Time {
	since, ready := readySince(p)
	if minReady == 0 || p.DeletionTimestamp != nil || !ready {
		return time.Time{}
	}
	if at := since.Add(time.Duration(minReady) * time.Second); at.After(now) {
		return at
	}
	return time.Time{}
}

// scaled resolves an int-or-percent against total.
func scaled(v *intstr.IntOrString, def intstr.IntOrString, total int32, roundUp bool) int32 {
	if v == nil {
		v = &def
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(v, int(total), roundUp)
	if err != nil || n < 0 {
		return 0
	}
	return int32(n)
}

// clamp limits v to [0, max].
func clamp(v, max int32) int32 {
	if v < 0 {
		return 0
	}
	if v > max {
		return max
	}
	return v
}

// observeControl fills the release fields of o from the workload.
func observeControl(o *Observation, obj client.Object) error {
	ctrl, err := ParseControl(obj)
	if err != nil {
		return err
	}
	tpl, err := PodTemplate(obj)
	if err != nil {
		return err
	}
	if o.Revision, err = TemplateRevision(obj); err != nil {
		return err
	}
	o.Images = Images(tpl)
	o.StableRevision = o.Revision
	if ctrl == nil {
		return nil
	}
	o.Held, o.Control, o.HeldWithoutRollout = true, ctrl, ctrl.HeldWithoutRollout
	o.StableRevision, o.CanaryRevision = ctrl.StableRevision, ctrl.CanaryRevision
	o.Rollback = ctrl.Rollback || o.Revision == ctrl.StableRevision
	return nil
}

// tally counts pods into o by revision, and sets o.AvailableAt.
func tally(o *Observation, pods []*corev1.Pod, revOf func(*corev1.Pod) string, minReady int32, now time.Time) {
	for _, p := range pods {
		if at := becomesAvailable(p, minReady, now); !at.IsZero() && (o.AvailableAt.IsZero() || at.Before(o.AvailableAt)) {
			o.AvailableAt = at
		}
		if p.DeletionTimestamp != nil && o.Revision != "" && revOf(p) != o.Revision {
			o.Leaving++
		}
		switch rev := revOf(p); {
		case rev == o.StableRevision:
			o.Stable.count(p, minReady, now)
		case o.CanaryRevision != "" && rev == o.CanaryRevision:
			o.Canary.count(p, minReady, now)
		default:
			o.Other.count(p, minReady, now)
		}
	}
}
