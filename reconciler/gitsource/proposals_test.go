package gitsource

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/reconciler/internal/rollouttest"
	"github.com/rollgate/rollgate/test/gitserver"
)

// TestNoGateWaitsForAPush: while the Git server holds a push, nothing a
// merged approval goes through waits for it. A gate's reconcile asks for
// its approval branch (Propose) and goes on (the repository's proposer
// pushes it);
// the fetch that brings another Rollout's merged approval, the wake of
// that Rollout and its reading of the approval do not wait behind the
// push either. Once the push goes through, the asking Rollout is woken
// and its next reconcile records the branch.
//
// Proposing in the reconcile held a Rollout worker for the whole push,
// and the clone's lock with it: in a wave of 50 approvals at load 5-11
// the workers spent three quarters of their time waiting for that lock
// and a merge took 3-4 s (p50) to reach step 2.
func TestNoGateWaitsForAPush(t *testing.T) {
	ctx, cfg, c, scheme := rollouttest.StartAPIServer(t)
	const ns, asking, approved = "held-push", "asking", "approved"
	srv := gitserver.Start(t, gitserver.Options{})
	origin, err := srv.CreateRepo("app", map[string]string{
		manifestPath(asking): rolloutManifest(ns, asking, ""), manifestPath(approved): rolloutManifest(ns, approved, ""),
	})
	if err != nil {
		t.Fatal(err)
	}
	hold := holdPushes(t, origin)

	rollouttest.MustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	repo := &v1alpha1.Repository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-repo"},
		Spec: v1alpha1.RepositorySpec{URL: hold.url, Branch: "main", Interval: &metav1.Duration{Duration: 10 * time.Minute}}}
	rollouttest.MustCreate(t, c, repo)
	for _, name := range []string{asking, approved} {
		ro := rollouttest.GatedRollout(t, ns, name, &v1alpha1.GitReference{Repository: repo.Name, Path: manifestPath(name)})
		rollouttest.MustCreate(t, c, ro)
		waitAtGate(ctx, t, c, ro)
	}
	g := NewPool(c, Options{InsecureHTTP: true, DefaultInterval: time.Hour})
	g.rollouts = indexedRolloutCache(ctx, t, cfg, scheme, ns, 2)
	go func() { _ = g.Start(ctx) }()
	e := openAndCheck(ctx, t, g, repo)
	woken(g) // the first fetch wakes every gate
	// What asking's reconcile asks for (proposeApproval): its branch is
	// yet to be pushed, and its commit keeps the approvals of its stable
	// and canary revisions.
	askingKey := types.NamespacedName{Namespace: ns, Name: asking}
	proposal := Proposal{Tracked: "main", Path: manifestPath(asking),
		Approval: gitsync.Approval{Revision: "abc", Step: 1}, Live: []string{"v1", "abc"}}

	// asking's gate asks for its branch: the reconcile goes on, and the
	// push reaches the server, which holds it.
	returnsWhileHeld(t, "the reconcile asking for its approval branch", func() {
		if res, ok := e.Propose(askingKey, proposal); ok {
			t.Errorf("asking for the approval branch: %+v before its push went through", res)
		}
	})
	hold.waitHeld(t)

	// approved's approval is merged and the forge calls the webhook: the
	// fetch wakes approved, which reads its approval, push or no push.
	if _, err := srv.Commit("app", "main", "Merge approval of "+approved,
		map[string]string{manifestPath(approved): rolloutManifest(ns, approved, "abc")}); err != nil {
		t.Fatal(err)
	}
	g.MarkStale(e.obj)
	returnsWhileHeld(t, "the fetch of the merged approval", func() { g.checkIfDue(ctx, e, time.Now()) })
	if got, want := woken(g), []string{approved}; !slices.Equal(got, want) {
		t.Fatalf("the fetch of the merge woke %v, want %v", got, want)
	}
	var seen Approvals
	returnsWhileHeld(t, "the woken Rollout reading its approval", func() {
		var err error
		if seen, err = e.Approvals(ctx, "main", manifestPath(approved), ns, approved, gitsync.Approval{Revision: "abc", Step: 1}); err != nil {
			t.Errorf("reading the approval: %v", err)
		}
	})
	if want := (gitsync.Approval{Revision: "abc", Step: 1}); !slices.Contains(seen.Found, want) {
		t.Fatalf("approvals read from Git %+v, want %+v", seen.Found, want)
	}

	// The push goes through: asking is woken and records its branch.
	hold.release()
	rollouttest.WaitFor(ctx, t, "asking woken once its branch was pushed", func() bool {
		_, ok := g.proposed.take()[askingKey]
		return ok
	})
	res, ok := e.Propose(askingKey, proposal)
	if !ok || res.Err != nil {
		t.Fatalf("the proposal after its push: %+v, ended %v", res, ok)
	}
	want := gitsync.ApprovalBranch(ns, asking, gitsync.Approval{Revision: "abc", Step: 1})
	if b := res.Branch; b != want {
		t.Fatalf("approval branch %q, want %q", b, want)
	}
	if h, err := srv.Head("app", want); err != nil || h == "" {
		t.Fatalf("approval branch %s not on the server: %v", want, err)
	}
}

// rolloutManifest is the manifest of Rollout ns/name in Git, approving
// step 1 of revision when it is set.
func rolloutManifest(ns, name, revision string) string {
	m := fmt.Sprintf("apiVersion: rollgate.dev/v1alpha1\nkind: Rollout\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n  approvals: []\n", name, ns)
	if revision != "" {
		m = strings.Replace(m, "approvals: []", fmt.Sprintf("approvals:\n  - {revision: %s, step: 1}", revision), 1)
	}
	return m
}

// heldPushes is a proxy in front of a Git repository that holds every
// push until released; reads go through.
type heldPushes struct {
	url     string
	held    chan struct{} // closed when the first push arrives
	once    sync.Once
	release func()
}

// holdPushes starts a heldPushes in front of the repository at origin.
func holdPushes(t *testing.T, origin string) *heldPushes {
	t.Helper()
	u, err := url.Parse(origin)
	if err != nil {
		t.Fatal(err)
	}
	h := &heldPushes{held: make(chan struct{})}
	released := make(chan struct{})
	var releaseOnce sync.Once
	h.release = func() { releaseOnce.Do(func() { close(released) }) }
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: u.Scheme, Host: u.Host})
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/git-receive-pack") {
			h.once.Do(func() { close(h.held) })
			select {
			case <-released:
			case <-req.Context().Done():
				return
			}
		}
		proxy.ServeHTTP(w, req)
	}))
	t.Cleanup(func() {
		h.release()
		s.Close()
	})
	h.url = s.URL + u.Path
	return h
}

// waitHeld waits until a push is held.
func (h *heldPushes) waitHeld(t *testing.T) {
	t.Helper()
	select {
	case <-h.held:
	case <-time.After(30 * time.Second):
		t.Fatal("no push reached the Git server in 30 s")
	}
}

// returnsWhileHeld runs f, which must return while a push is held: a
// reconcile or a fetch that waits for a push does not return until the
// push is released, which the caller does only afterwards.
func returnsWhileHeld(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not return in 30 s while a push was held: it waits for the push", what)
	}
}
