package rollout

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/internal/rollouttest"
)

// releaseAtStep1 starts an API server with Rollout web at step 1 of a
// release, as a reconcile of the Rollout as created writes it; read reads
// the Rollout as stored.
func releaseAtStep1(t *testing.T) (ctx context.Context, c client.Client, read func() *v1alpha1.Rollout) {
	ctx, _, c, _ = rollouttest.StartAPIServer(t)
	const ns = "counts"
	rollouttest.MustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	createWithStatus(ctx, t, c, ns, map[string]v1alpha1.RolloutStatus{"web": {
		Phase: v1alpha1.PhaseProgressing, CurrentStepIndex: 1, Message: "step 1/2: waiting for 1 new pods of v2 to be ready",
		ObservedGeneration: 1,
	}})
	return ctx, c, func() *v1alpha1.Rollout {
		t.Helper()
		ro := &v1alpha1.Rollout{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web"}, ro); err != nil {
			t.Fatal(err)
		}
		return ro
	}
}

// TestCountsAloneWaitForCountsEvery: a status that changed only in its pod
// counts is not written within countsEvery of the last write (the patcher
// says when it is due instead); the next change of anything else writes
// it, counts included; and once countsEvery has passed, counts alone are
// written. Against a real API server, so "not written" is a resource
// version that did not move.
func TestCountsAloneWaitForCountsEvery(t *testing.T) {
	ctx, c, read := releaseAtStep1(t)
	now := time.Now()
	ro := read()
	wrote := now.Add(-time.Second)
	p := newStatusPatcher(c, ro, now, statusRecord{wrote: wrote})
	ro.Status.CanaryReplicas, ro.Status.StableReadyReplicas = 1, 3
	if err := p.patch(ctx, ro); err != nil {
		t.Fatal(err)
	}
	if got := read(); got.ResourceVersion != p.before.ResourceVersion || got.Status.CanaryReplicas != 0 {
		t.Errorf("counts alone 1 s after the last write were written: canaryReplicas %d", got.Status.CanaryReplicas)
	}
	if want := wrote.Add(countsEvery); !p.countsDue.Equal(want) {
		t.Errorf("counts due at %v, want %v", p.countsDue, want)
	}

	// Anything else changes: written at once, with the counts held back.
	ro.Status.CurrentStepState = v1alpha1.StepTrafficRouting
	if err := p.patch(ctx, ro); err != nil {
		t.Fatal(err)
	}
	got := read()
	if got.Status.CurrentStepState != v1alpha1.StepTrafficRouting || got.Status.CanaryReplicas != 1 || got.Status.StableReadyReplicas != 3 {
		t.Errorf("stored state %s, canaryReplicas %d, stableReadyReplicas %d; want StepTrafficRouting, 1 and 3",
			got.Status.CurrentStepState, got.Status.CanaryReplicas, got.Status.StableReadyReplicas)
	}
	if !p.countsDue.IsZero() || !p.lastWrite.Equal(now) {
		t.Errorf("after a write: counts due %v, last write %v; want none and %v", p.countsDue, p.lastWrite, now)
	}

	// countsEvery after the last write, counts alone (seen since then) are
	// written.
	later := now.Add(countsEvery)
	ro = got
	seen := ro.Status.DeepCopy()
	seen.CanaryReadyReplicas = 1
	p = newStatusPatcher(c, ro, later, statusRecord{wrote: now, seen: seenCounts{counts: countsOf(seen), since: now}})
	ro.Status.CanaryReadyReplicas = 1
	if err := p.patch(ctx, ro); err != nil {
		t.Fatal(err)
	}
	if got := read(); got.Status.CanaryReadyReplicas != 1 || !p.countsDue.IsZero() {
		t.Errorf("counts alone %v after the last write: stored canaryReadyReplicas %d, due %v; want written", countsEvery, got.Status.CanaryReadyReplicas, p.countsDue)
	}
}

// TestCountsAloneWaitToSettle: counts alone that changed in this reconcile
// are not written even countsEvery after the last write: they wait until
// they have stayed so for countsSettle (a move they made possible often
// follows within a second and carries them), and counts that never settle
// are written countsLatest after they first differed from the written ones.
func TestCountsAloneWaitToSettle(t *testing.T) {
	ctx, c, read := releaseAtStep1(t)
	wrote := time.Now()
	last := statusRecord{wrote: wrote, seen: seenCounts{counts: podCounts{}, since: wrote}}
	// A reconcile countsEvery after the last write sees a new pod.
	now := wrote.Add(countsEvery)
	ro := read()
	p := newStatusPatcher(c, ro, now, last)
	ro.Status.CanaryReplicas = 1
	if err := p.patch(ctx, ro); err != nil {
		t.Fatal(err)
	}
	if got := read(); got.Status.CanaryReplicas != 0 {
		t.Errorf("counts that changed just now were written alone (canaryReplicas %d)", got.Status.CanaryReplicas)
	}
	if want := now.Add(countsSettle); !p.countsDue.Equal(want) {
		t.Errorf("counts due at %v, want %v (countsSettle after they changed)", p.countsDue, want)
	}
	// The same counts countsSettle later: written.
	last = p.record()
	settled := now.Add(countsSettle)
	ro = read()
	p = newStatusPatcher(c, ro, settled, last)
	ro.Status.CanaryReplicas = 1
	if err := p.patch(ctx, ro); err != nil {
		t.Fatal(err)
	}
	if got := read(); got.Status.CanaryReplicas != 1 || !p.countsDue.IsZero() {
		t.Errorf("settled counts: stored canaryReplicas %d, due %v; want written", got.Status.CanaryReplicas, p.countsDue)
	}

	// Counts that change at every reconcile, a second apart, are written
	// countsLatest after they first differed from the written ones.
	last = p.record()
	first := settled.Add(countsEvery)
	for i := 0; ; i++ {
		now := first.Add(time.Duration(i) * time.Second)
		ro = read()
		p = newStatusPatcher(c, ro, now, last)
		ro.Status.CanaryReadyReplicas = int32(i + 1)
		if err := p.patch(ctx, ro); err != nil {
			t.Fatal(err)
		}
		last = p.record()
		got := read().Status.CanaryReadyReplicas
		if now.Before(first.Add(countsLatest)) {
			want := now.Add(countsSettle)
			if latest := first.Add(countsLatest); want.After(latest) {
				want = latest
			}
			if got != 0 || !p.countsDue.Equal(want) {
				t.Fatalf("counts changing for %v: stored canaryReadyReplicas %d, due %v; want none yet, due %v", now.Sub(first), got, p.countsDue, want)
			}
			continue
		}
		if got != int32(i+1) {
			t.Fatalf("counts changing for %v: stored canaryReadyReplicas %d, want %d written", now.Sub(first), got, i+1)
		}
		break
	}
}

// TestStatusPatchAfterFinalizerSendsStatusAlone: the reconcile that adds
// the finalizer writes it and no status; a later one that writes both sends
// in its status patch only the status and the resource version it is
// locked on, not the managedFields the finalizer patch answered with
// (which the cache strips). Against a real API server; the client records
// the body of every status patch it sends.
func TestStatusPatchAfterFinalizerSendsStatusAlone(t *testing.T) {
	ctx, cfg, _, scheme := rollouttest.StartAPIServer(t)
	real, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	var sent []map[string]any
	c := interceptor.NewClient(real, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			data, err := patch.Data(obj)
			if err != nil {
				return err
			}
			body := map[string]any{}
			if err := json.Unmarshal(data, &body); err != nil {
				return err
			}
			sent = append(sent, body)
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	const ns = "finalizer"
	rollouttest.MustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	rollouttest.MustCreate(t, c, rollouttest.GatedRollout(t, ns, "web", nil))
	cached := func() *v1alpha1.Rollout {
		t.Helper()
		ro := &v1alpha1.Rollout{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web"}, ro); err != nil {
			t.Fatal(err)
		}
		ro.ManagedFields = nil // as the controller's cache keeps it
		return ro
	}

	ro := cached()
	p := newStatusPatcher(c, ro, time.Now(), statusRecord{})
	p.finalizersOnly = true
	controllerutil.AddFinalizer(ro, Finalizer)
	ro.Status.Message = "not to be written"
	if err := p.patch(ctx, ro); err != nil {
		t.Fatal(err)
	}
	if got := cached(); !controllerutil.ContainsFinalizer(got, Finalizer) || got.Status.Message != "" || len(sent) != 0 {
		t.Fatalf("finalizer-only reconcile: finalizers %v, status message %q, %d status patches; want the finalizer, no status", got.Finalizers, got.Status.Message, len(sent))
	}

	ro = cached()
	ro.Finalizers = nil
	if err := c.Update(ctx, ro); err != nil {
		t.Fatal(err)
	}
	ro = cached()
	p = newStatusPatcher(c, ro, time.Now(), statusRecord{})
	controllerutil.AddFinalizer(ro, Finalizer)
	ro.Status.Message = "written"
	if err := p.patch(ctx, ro); err != nil {
		t.Fatal(err)
	}
	if len(sent) != 1 {
		t.Fatalf("%d status patches, want 1", len(sent))
	}
	meta, _ := sent[0]["metadata"].(map[string]any)
	if _, ok := meta["resourceVersion"]; !ok || len(meta) != 1 || len(sent[0]) != 2 {
		t.Errorf("status patch %v: want only status and metadata.resourceVersion", sent[0])
	}
	if got := cached(); got.Status.Message != "written" || !controllerutil.ContainsFinalizer(got, Finalizer) {
		t.Errorf("stored message %q, finalizers %v; want written with the finalizer", got.Status.Message, got.Finalizers)
	}
}
