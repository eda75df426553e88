package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/rig"
)

// rolloutLog records every version of a Rollout's status, as a watch
// delivers them, with when each was seen: short-lived states (GitSynced
// False for less than a status window) cannot slip between two polls.
type rolloutLog struct {
	mu       sync.Mutex
	versions []rolloutVersion
}

type rolloutVersion struct {
	at     time.Time
	status v1alpha1.RolloutStatus
}

// watchRollout starts recording the Rollout ns/name until the test ends.
func (w *world) watchRollout(ns, name string) *rolloutLog {
	w.T.Helper()
	wc, err := client.NewWithWatch(w.cluster.RESTConfig, client.Options{Scheme: rig.NewScheme(w.T)})
	if err != nil {
		w.T.Fatal(err)
	}
	watcher, err := wc.Watch(context.Background(), &v1alpha1.RolloutList{}, client.InNamespace(ns), client.MatchingFields{"metadata.name": name})
	if err != nil {
		w.T.Fatal(err)
	}
	w.T.Cleanup(watcher.Stop)
	l := &rolloutLog{}
	go func() {
		for ev := range watcher.ResultChan() {
			if ro, ok := ev.Object.(*v1alpha1.Rollout); ok {
				l.mu.Lock()
				l.versions = append(l.versions, rolloutVersion{at: time.Now(), status: ro.Status})
				l.mu.Unlock()
			}
		}
	}()
	return l
}

func (l *rolloutLog) snapshot() []rolloutVersion {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]rolloutVersion(nil), l.versions...)
}

func gitSynced(st v1alpha1.RolloutStatus) *metav1.Condition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == v1alpha1.GitSyncedCondition {
			return &st.Conditions[i]
		}
	}
	return nil
}

func describeGitSynced(st v1alpha1.RolloutStatus) string {
	c := gitSynced(st)
	if c == nil {
		return "GitSynced absent"
	}
	return fmt.Sprintf("GitSynced=%s/%s %q", c.Status, c.Reason, c.Message)
}

// gitSyncedAfter finds the first recorded version for which state holds,
// requires its GitSynced to be False/GitPending (that state was not in Git
// yet when it appeared), and waits for a later version, still in that
// state, with GitSynced True/GitSynced. It returns both versions.
func (w *world) gitSyncedAfter(l *rolloutLog, what string, state func(v1alpha1.RolloutStatus) bool) (pending, synced rolloutVersion) {
	w.T.Helper()
	found := false
	w.Eventually(30*time.Second, what+": GitSynced True", func(context.Context) (bool, error) {
		for _, v := range l.snapshot() {
			switch {
			case !found && state(v.status):
				found, pending = true, v
			case found && state(v.status):
				if c := gitSynced(v.status); c != nil && c.Status == metav1.ConditionTrue {
					synced = v
					return true, nil
				}
			}
		}
		return false, nil
	})
	if c := gitSynced(pending.status); c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonGitPending {
		w.T.Fatalf("%s: first seen with %s; want False/%s until it is in Git", what, describeGitSynced(pending.status), v1alpha1.ReasonGitPending)
	}
	if c := gitSynced(synced.status); c.Reason != v1alpha1.ReasonGitSynced || synced.status.Git == nil ||
		len(synced.status.Git.StatusCommit) < 7 || !strings.Contains(c.Message, synced.status.Git.StatusCommit[:7]) {
		w.T.Fatalf("%s: %s with status.git %+v; want reason %s naming status.git.statusCommit", what, describeGitSynced(synced.status), synced.status.Git, v1alpha1.ReasonGitSynced)
	}
	return pending, synced
}

// assertKstatusIgnoresGitSynced fails when, between two recorded versions
// in the same phase, step and step state, Ready, Reconciling or Stalled
// changed: GitSynced alone must never move kstatus.
func assertKstatusIgnoresGitSynced(t *testing.T, versions []rolloutVersion) {
	t.Helper()
	kstatus := func(st v1alpha1.RolloutStatus) string {
		ro := &v1alpha1.Rollout{Status: st}
		var b strings.Builder
		for _, typ := range []string{v1alpha1.ReadyCondition, v1alpha1.ReconcilingCondition, v1alpha1.StalledCondition} {
			if c := conditions.Get(ro, typ); c != nil {
				fmt.Fprintf(&b, "%s=%s/%s ", typ, c.Status, c.Reason)
			}
		}
		return b.String()
	}
	for i := 1; i < len(versions); i++ {
		a, b := versions[i-1].status, versions[i].status
		if a.Phase != b.Phase || a.CurrentStepIndex != b.CurrentStepIndex || a.CurrentStepState != b.CurrentStepState {
			continue
		}
		if ka, kb := kstatus(a), kstatus(b); ka != kb && describeGitSynced(a) != describeGitSynced(b) {
			t.Errorf("kstatus moved with GitSynced at step %d %s: %s(%s) -> %s(%s)", a.CurrentStepIndex, a.CurrentStepState, ka, describeGitSynced(a), kb, describeGitSynced(b))
		}
	}
}

// repository reads a Repository.
func (w *world) repository(ns, name string) *v1alpha1.Repository {
	w.T.Helper()
	r := &v1alpha1.Repository{}
	if err := w.C.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, r); err != nil {
		w.T.Fatal(err)
	}
	return r
}

func describeRepository(r *v1alpha1.Repository) string {
	c := conditions.Get(r, v1alpha1.ReadyCondition)
	if c == nil {
		return fmt.Sprintf("no Ready condition; status %+v", r.Status)
	}
	return fmt.Sprintf("Ready=%s/%s %q, commit %q, status commit %q, observedGeneration %d/%d",
		c.Status, c.Reason, c.Message, r.Status.LastFetchedCommit, r.Status.LastStatusCommit, r.Status.ObservedGeneration, r.Generation)
}

// gitProxy stands between the controller and the Git server on a fixed
// loopback address, so the story can stop "the Git server" (connections
// refused) and start it again at the same URL while the server keeps its
// repositories.
type gitProxy struct {
	t    *testing.T
	addr string
	rp   *httputil.ReverseProxy

	mu  sync.Mutex
	srv *http.Server // nil while stopped
}

func newGitProxy(t *testing.T, backend string) *gitProxy {
	t.Helper()
	target, err := url.Parse(backend)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &gitProxy{t: t, addr: ln.Addr().String(), rp: httputil.NewSingleHostReverseProxy(target)}
	p.serve(ln)
	t.Cleanup(p.stop)
	return p
}

// URL is the base URL of the proxied server.
func (p *gitProxy) URL() string { return "http://" + p.addr }

func (p *gitProxy) serve(ln net.Listener) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.srv = &http.Server{Handler: p.rp, ReadHeaderTimeout: 10 * time.Second}
	go func(s *http.Server) { _ = s.Serve(ln) }(p.srv)
}

// stop closes the listener and every connection.
func (p *gitProxy) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.srv != nil {
		_ = p.srv.Close()
		p.srv = nil
	}
}

// start listens again on the same address.
func (p *gitProxy) start() {
	p.t.Helper()
	var ln net.Listener
	var err error
	for range 50 {
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			p.serve(ln)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	p.t.Fatalf("listening again on %s: %v", p.addr, err)
}
