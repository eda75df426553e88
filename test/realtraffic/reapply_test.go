package realtraffic

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// argoManager is the field manager of Argo CD's application controller.
const argoManager = "argocd-controller"

// reapplyFromGit re-applies docs (the application as Git declares it) once
// a second, as a GitOps tool that does not know about the release would:
// first for d as a server-side apply by Argo CD's field manager with
// force, then for d as a client-side full-object Update (the live object's
// spec replaced by Git's). It returns the writes made and refused.
func (w *world) reapplyFromGit(ctx context.Context, docs string, d time.Duration) (writes, refused int) {
	objs := decodeDocs(w, docs)
	for _, mode := range []string{"ssa", "update"} {
		for end := time.Now().Add(d); time.Now().Before(end) && ctx.Err() == nil; time.Sleep(time.Second) {
			for _, u := range objs {
				var err error
				if mode == "ssa" {
					err = w.C.Patch(ctx, u.DeepCopy(), client.Apply, client.FieldOwner(argoManager), client.ForceOwnership)
				} else {
					err = w.replaceSpec(ctx, u)
				}
				writes++
				if err != nil {
					refused++
					w.T.Logf("re-apply (%s) %s %s: %v", mode, u.GetKind(), u.GetName(), err)
				}
			}
		}
	}
	return writes, refused
}

// replaceSpec updates the live object with Git's spec, keeping its
// metadata (a client-side full-object write).
func (w *world) replaceSpec(ctx context.Context, u *unstructured.Unstructured) error {
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(u.GroupVersionKind())
	if err := w.C.Get(ctx, types.NamespacedName{Namespace: u.GetNamespace(), Name: u.GetName()}, live); err != nil {
		return err
	}
	spec, ok := u.Object["spec"]
	if !ok {
		return nil // a Namespace, say
	}
	live.Object["spec"] = spec
	return w.C.Update(ctx, live, client.FieldOwner(argoManager))
}

func decodeDocs(w *world, docs string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, u := range w.Decode(docs) {
		if u.GetKind() == "Namespace" || u.GetKind() == "GatewayClass" {
			continue
		}
		out = append(out, u)
	}
	return out
}

// routeSampler reads the HTTPRoute every 50 ms and counts the samples that
// do not carry the step's canary rule (a backend on the canary Service),
// and the longest time between two samples.
type routeSampler struct {
	cancel context.CancelFunc
	done   sync.WaitGroup

	mu            sync.Mutex
	samples, flat int
	last          time.Time
	maxGap        time.Duration
}

func (w *world) sampleRoute(ctx context.Context) *routeSampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &routeSampler{cancel: cancel, last: time.Now()}
	s.done.Add(1)
	go func() {
		defer s.done.Done()
		for ctx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(gatewayv1.SchemeGroupVersion.WithKind("HTTPRoute"))
			if err := w.C.Get(ctx, types.NamespacedName{Namespace: w.NS, Name: "echoserver"}, u); err != nil {
				continue
			}
			var r gatewayv1.HTTPRoute
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &r); err != nil {
				continue
			}
			canary := false
			for _, rule := range r.Spec.Rules {
				for _, b := range rule.BackendRefs {
					canary = canary || b.Name == "echoserver-canary"
				}
			}
			s.mu.Lock()
			s.samples++
			if !canary {
				s.flat++
			}
			now := time.Now()
			s.maxGap = max(s.maxGap, now.Sub(s.last))
			s.last = now
			s.mu.Unlock()
		}
	}()
	return s
}

// stop ends the sampling; it returns the samples, those without the
// canary rule, and the longest time without a sample (from the start to
// the end of the sampling).
func (s *routeSampler) stop() (samples, flat int, maxGap time.Duration) {
	s.cancel()
	s.done.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	maxGap = max(s.maxGap, time.Since(s.last))
	return s.samples, s.flat, maxGap
}
