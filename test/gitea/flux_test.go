package gitea_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/test/flux"
	"github.com/rollgate/rollgate/test/gitea"
	"github.com/rollgate/rollgate/test/rig"
)

// fluxNamespace holds Flux's objects and the Secret it clones with.
const fluxNamespace = "flux-system"

var (
	gitRepositoryGVK = schema.GroupVersionKind{Group: "source.toolkit.fluxcd.io", Version: "v1", Kind: "GitRepository"}
	kustomizationGVK = schema.GroupVersionKind{Group: "kustomize.toolkit.fluxcd.io", Version: "v1", Kind: "Kustomization"}
)

// fluxSync is Flux on a story's cluster applying a folder of a Gitea
// repository: source-controller clones the repository over HTTPS, trusting
// Gitea's private CA and signing in with a read-only token, and
// kustomize-controller applies the folder every few seconds, as a platform
// team sets Flux up.
type fluxSync struct {
	k    *cluster
	name string // of the GitRepository and the Kustomization
	ctrl *flux.Controllers
	dir  string
}

// fluxInterval is how often Flux fetches the repository and applies the
// folder: short, so that Flux applies many times while a gate waits.
const fluxInterval = "2s"

// startFlux installs Flux's CRDs, starts source-controller and
// kustomize-controller against the cluster, and makes them apply path of
// repo's main: a Secret in flux-system with the keys source-controller
// v1.9 reads for HTTPS (username, password and ca.crt), a GitRepository
// and a Kustomization (prune: true), all named name.
func (k *cluster) startFlux(s *gitea.Server, repo gitea.Repo, name, path string) *fluxSync {
	k.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := flux.InstallCRDs(ctx, k.kubeconfig, ""); err != nil {
		k.T.Fatal(err)
	}
	rig.EnsureNamespace(k.T, k.C, fluxNamespace)
	f := &fluxSync{k: k, name: name, dir: k.T.TempDir()}
	var err error
	if f.ctrl, err = flux.Start(ctx, flux.Options{Kubeconfig: k.kubeconfig, Dir: f.dir}); err != nil {
		k.T.Fatal(err)
	}
	k.T.Cleanup(func() {
		if k.T.Failed() {
			k.T.Logf("Flux's logs: %s, %s", filepath.Join(f.dir, flux.SourceController+".log"), filepath.Join(f.dir, flux.KustomizeController+".log"))
		}
		if err := f.ctrl.Stop(); err != nil {
			k.T.Errorf("stop Flux: %v", err)
		}
	})
	// A token of its own that can read the repository and nothing more.
	token, err := s.CreateToken(ctx, s.Admin, "flux-"+repo.Name, "read:repository")
	if err != nil {
		k.T.Fatal(err)
	}
	k.CreateSecret(fluxNamespace, name+"-git", map[string][]byte{
		"username": []byte(s.Admin.Name), "password": []byte(token), "ca.crt": s.CA,
	})
	rig.ApplyYAML(k.T, k.C, fmt.Sprintf(`
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  interval: %[3]s
  timeout: 30s
  url: %[4]s
  ref: {branch: main}
  secretRef: {name: %[1]s-git}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  interval: %[3]s
  retryInterval: %[3]s
  timeout: 1m
  prune: true
  path: %[5]s
  sourceRef: {kind: GitRepository, name: %[1]s}
`, name, fluxNamespace, fluxInterval, repo.CloneURL, path), "platform-team")
	return f
}

// suspend sets the Kustomization's spec.suspend, as `flux suspend
// kustomization` and `flux resume kustomization` do.
func (f *fluxSync) suspend(on bool) {
	f.k.T.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(kustomizationGVK)
	u.SetNamespace(fluxNamespace)
	u.SetName(f.name)
	patch := fmt.Sprintf(`{"spec":{"suspend":%t}}`, on)
	if err := f.k.C.Patch(context.Background(), u, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		f.k.T.Fatal(err)
	}
}

// kustomization is what the Kustomization's status says: Ready's status,
// reason, message and last transition, and the revision last applied
// ("main@sha1:<commit>").
type kustomization struct {
	ready, reason, message, since string
	applied                       string
}

func (f *fluxSync) kustomization(ctx context.Context) (kustomization, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(kustomizationGVK)
	if err := f.k.C.Get(ctx, client.ObjectKey{Namespace: fluxNamespace, Name: f.name}, u); err != nil {
		return kustomization{}, err
	}
	var ks kustomization
	ks.applied, _, _ = unstructured.NestedString(u.Object, "status", "lastAppliedRevision")
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == "Ready" {
			ks.ready, _ = m["status"].(string)
			ks.reason, _ = m["reason"].(string)
			ks.message, _ = m["message"].(string)
			ks.since, _ = m["lastTransitionTime"].(string)
		}
	}
	return ks, nil
}

// source is the GitRepository's Ready message, for failure messages.
func (f *fluxSync) source(ctx context.Context) string {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gitRepositoryGVK)
	if err := f.k.C.Get(ctx, client.ObjectKey{Namespace: fluxNamespace, Name: f.name}, u); err != nil {
		return err.Error()
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == "Ready" {
			return fmt.Sprintf("%v %v: %v", m["status"], m["reason"], m["message"])
		}
	}
	return "no Ready condition"
}

// waitApplied waits until the Kustomization is Ready with commit (main's
// head) as its last applied revision, and says how long that took.
func (f *fluxSync) waitApplied(commit, what string) {
	f.k.T.Helper()
	what = "Flux applied " + short(commit) + " (" + what + ")"
	took, err := rig.Wait(context.Background(), 90*time.Second, what, func(ctx context.Context) (bool, string, error) {
		ks, err := f.kustomization(ctx)
		if err != nil {
			return false, "", client.IgnoreNotFound(err)
		}
		return ks.ready == "True" && ks.applied == "main@sha1:"+commit, fmt.Sprintf("Kustomization Ready=%s %s: %s, last applied %s; GitRepository %s",
			ks.ready, ks.reason, ks.message, ks.applied, f.source(ctx)), nil
	})
	if err != nil {
		f.k.T.Fatal(err)
	}
	f.k.T.Logf("%s: after %s", what, took.Round(time.Millisecond))
}

// short is the first 8 characters of a commit.
func short(commit string) string { return commit[:min(8, len(commit))] }

// noFight samples, every 200 ms from start to stop, what a fight between
// Flux and rollgate would show: the pods of app, which during a release
// move forward only (the new image's ready pods never fewer, the old
// image's pods never more), and the Kustomization, which must never be
// Ready=False and must apply main's heads in order, never an older one
// after a newer one.
type noFight struct {
	f             *fluxSync
	ns, app       string
	oldImg, newIm string
	stop, done    chan struct{}

	mu    sync.Mutex
	heads []string // main's heads in the order the story made them

	samples, reconciles int
	backwards           []string // pods moving back
	notReady            []string // Ready=False samples
	applied             []string // the Kustomization's last applied revisions, in the order seen
	maxNew, minOld      int
	span                time.Duration
}

// watchNoFight starts sampling the release of app from oldImg to newImg;
// heads are main's heads so far, oldest first: Flux may still be applying
// any of them.
func (f *fluxSync) watchNoFight(ns, app, oldImg, newImg string, heads ...string) *noFight {
	w := &noFight{f: f, ns: ns, app: app, oldImg: oldImg, newIm: newImg, heads: heads,
		stop: make(chan struct{}), done: make(chan struct{}), minOld: -1}
	go w.run()
	return w
}

// merged tells the sampler main's new head, before Flux can apply it.
func (w *noFight) merged(head string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.heads = append(w.heads, head)
}

func (w *noFight) run() {
	defer close(w.done)
	ctx := context.Background()
	start := time.Now()
	seen := map[string]bool{} // Ready=True transitions: one per reconcile that applied
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-w.stop:
			w.span = time.Since(start)
			w.reconciles = len(seen)
			return
		case <-tick.C:
		}
		at := time.Since(start).Round(100 * time.Millisecond)
		if pods, err := rig.PodsByImage(ctx, w.f.k.C, w.ns, w.app); err == nil {
			if n := pods[w.newIm][0]; n < w.maxNew {
				w.backwards = append(w.backwards, fmt.Sprintf("+%v: %s ready pods %d after %d", at, w.newIm, n, w.maxNew))
			} else {
				w.maxNew = n
			}
			if n := pods[w.oldImg][1]; w.minOld >= 0 && n > w.minOld {
				w.backwards = append(w.backwards, fmt.Sprintf("+%v: %s pods %d after %d", at, w.oldImg, n, w.minOld))
			} else {
				w.minOld = n
			}
		}
		ks, err := w.f.kustomization(ctx)
		if err != nil {
			continue
		}
		w.samples++
		if ks.ready == "False" {
			w.notReady = append(w.notReady, fmt.Sprintf("+%v: %s: %s", at, ks.reason, ks.message))
		}
		if ks.ready == "True" {
			seen[ks.since] = true
		}
		if n := len(w.applied); n == 0 || w.applied[n-1] != ks.applied {
			w.applied = append(w.applied, ks.applied)
		}
	}
}

// outOfOrder returns the applied revisions that were not main's heads in
// order: one that was never main's head, or an older head after a newer.
func (w *noFight) outOfOrder() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var bad []string
	last := -1
	for _, rev := range w.applied {
		i := slices.Index(w.heads, strings.TrimPrefix(rev, "main@sha1:"))
		switch {
		case i < 0:
			bad = append(bad, rev+" (never main's head)")
		case i < last:
			bad = append(bad, rev+" (after a newer head)")
		default:
			last = i
		}
	}
	return bad
}

// check stops the sampler, prints what it saw and fails the test for
// pods that moved back, a Kustomization that was not Ready, a revision
// applied out of order, or too few applies for the check to mean anything
// (at least minReconciles).
func (w *noFight) check(phase string, minReconciles int) {
	t := w.f.k.T
	t.Helper()
	close(w.stop)
	<-w.done
	revisions := w.outOfOrder()
	t.Logf("%s: %d samples over %v; Flux applied the folder %d times (Ready=True transitions); %s ready pods up to %d, %s pods down to %d; %d moves back, %d samples Ready=False, %d revisions out of order",
		phase, w.samples, w.span.Round(100*time.Millisecond), w.reconciles, w.newIm, w.maxNew, w.oldImg, w.minOld,
		len(w.backwards), len(w.notReady), len(revisions))
	if w.samples == 0 {
		t.Fatalf("%s: the Kustomization was never read", phase)
	}
	if len(w.backwards) > 0 {
		t.Errorf("%s: the pods moved back (Flux fought rollgate?): %s", phase, strings.Join(w.backwards, "; "))
	}
	if len(w.notReady) > 0 {
		t.Errorf("%s: the Kustomization was not Ready: %s", phase, strings.Join(w.notReady, "; "))
	}
	if len(revisions) > 0 {
		t.Errorf("%s: Flux applied %s; main's heads were %s", phase, strings.Join(revisions, ", "), strings.Join(w.heads, ", "))
	}
	if w.reconciles < minReconciles {
		t.Errorf("%s: Flux applied the folder %d times, want at least %d for the check to mean something", phase, w.reconciles, minReconciles)
	}
	if t.Failed() {
		t.FailNow()
	}
}
