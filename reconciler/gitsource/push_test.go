package gitsource

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/gitpush"
	"github.com/rollgate/rollgate/reconciler/internal/rollouttest"
	"github.com/rollgate/rollgate/test/gitserver"
)

// TestPushWakesOnlyRolloutsGatedOnAChangedManifest: a push webhook for a
// Repository makes its controller fetch at once, and a fetch that moves
// the tracked branch wakes exactly the Rollouts that wait at a gate, on
// that branch of that Repository, whose manifest the new commits changed:
// not the Rollouts of the Repository whose manifest is the same, not one
// whose manifest changed but that waits at no gate, not one tracking
// another branch or another Repository. A push that brings no change
// wakes none, and a merge that another read of the branch fetched first
// is not missed. (A Rollout woken for nothing only costs a reconcile; one
// not woken waits for the next fetch interval, up to ten minutes here.)
func TestPushWakesOnlyRolloutsGatedOnAChangedManifest(t *testing.T) {
	ctx, cfg, c, scheme := rollouttest.StartAPIServer(t)

	// The Rollouts, by what they are.
	const (
		approved  = "approved"   // gated, its manifest changes: woken
		unchanged = "unchanged"  // gated, its manifest stays: not woken
		notGated  = "not-gated"  // manifest changes, no gate
		onRelease = "on-release" // gated, tracks branch release
		otherRepo = "other-repo" // gated, in another Repository
	)
	names := []string{approved, unchanged, notGated, onRelease, otherRepo}
	srv := gitserver.Start(t, gitserver.Options{})
	files := map[string]string{}
	for _, n := range names {
		files[manifestPath(n)] = "# " + n + " v1\n"
	}
	appURL, err := srv.CreateRepo("app", files)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Commit("app", "release", "release branch", map[string]string{manifestPath(onRelease): "# on release\n"}); err != nil {
		t.Fatal(err)
	}
	otherURL, err := srv.CreateRepo("other", files)
	if err != nil {
		t.Fatal(err)
	}

	ns := "push-wake"
	rollouttest.MustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	interval := &metav1.Duration{Duration: 10 * time.Minute} // only a push makes it fetch
	app := &v1alpha1.Repository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-repo"},
		Spec: v1alpha1.RepositorySpec{URL: appURL, Branch: "main", Interval: interval}}
	other := &v1alpha1.Repository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other-repo"},
		Spec: v1alpha1.RepositorySpec{URL: otherURL, Branch: "main", Interval: interval}}
	rollouttest.MustCreate(t, c, app)
	rollouttest.MustCreate(t, c, other)
	for _, n := range names {
		git := &v1alpha1.GitReference{Repository: app.Name, Path: manifestPath(n)}
		switch n {
		case onRelease:
			git.Branch = "release"
		case otherRepo:
			git.Repository = other.Name
		}
		ro := rollouttest.GatedRollout(t, ns, n, git)
		rollouttest.MustCreate(t, c, ro)
		if n != notGated {
			waitAtGate(ctx, t, c, ro)
		}
	}

	// The pool lists Rollouts from a cache indexed by Repository, as in
	// the manager; it reads Repositories from the API server.
	rollouts := indexedRolloutCache(ctx, t, cfg, scheme, ns, len(names)-1)
	g := NewPool(c, Options{InsecureHTTP: true, DefaultInterval: time.Hour})
	g.rollouts = rollouts
	go func() { _ = g.Start(ctx) }()
	hook := startPushServer(ctx, t, g)

	// The Repository controller's first look fetches the tracked branch
	// of each and every other branch a gate waits on; without a head
	// before it, every gate on a fetched branch is woken.
	appHandle := openAndCheck(ctx, t, g, app)
	openAndCheck(ctx, t, g, other)
	if got, want := woken(g), []string{approved, onRelease, otherRepo, unchanged}; !slices.Equal(got, want) {
		t.Fatalf("first fetch woke %v, want %v (every gated Rollout)", got, want)
	}

	// A merge on main changes the manifests of approved, not-gated and
	// on-release (read on main, but on-release tracks release), and the
	// other Repository's copy of approved's path; then the forge calls the
	// webhook of app-repo.
	changed := map[string]string{}
	for _, n := range []string{approved, notGated, onRelease} {
		changed[manifestPath(n)] = "# " + n + " v2, approved\n"
	}
	if _, err := srv.Commit("app", "main", "merge the approvals", changed); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Commit("other", "main", "a change elsewhere", map[string]string{manifestPath(otherRepo): "# changed\n"}); err != nil {
		t.Fatal(err)
	}
	push(t, hook, ns, app.Name)
	fetchAsRepositoryController(ctx, t, g, appHandle)
	if got, want := woken(g), []string{approved}; !slices.Equal(got, want) {
		t.Errorf("push after the merge woke %v, want %v", got, want)
	}

	// A merge brought by another read of the tracked branch (proposing
	// an approval branch reads it, fetching) is compared all the same at
	// the next fetch, even when that fetch itself brings nothing new.
	unchangedV2 := map[string]string{manifestPath(unchanged): "# unchanged v2, approved\n"}
	if _, err := srv.Commit("app", "main", "merge the approval of unchanged", unchangedV2); err != nil {
		t.Fatal(err)
	}
	if _, err := appHandle.clone.ReadFile(ctx, "main", manifestPath(unchanged)); err != nil {
		t.Fatal(err)
	}
	push(t, hook, ns, app.Name)
	fetchAsRepositoryController(ctx, t, g, appHandle)
	if got, want := woken(g), []string{unchanged}; !slices.Equal(got, want) {
		t.Errorf("push after a merge another read had fetched woke %v, want %v", got, want)
	}

	// A push that brings a commit touching no gated manifest wakes none.
	if _, err := srv.Commit("app", "main", "docs", map[string]string{"README.md": "hello\n"}); err != nil {
		t.Fatal(err)
	}
	push(t, hook, ns, app.Name)
	fetchAsRepositoryController(ctx, t, g, appHandle)
	if got := woken(g); len(got) != 0 {
		t.Errorf("push of an unrelated commit woke %v, want none", got)
	}
}

// TestPushWakesGatesOfASigningPolicyOnEveryHead: under an approval
// policy (here mergeOnly) a gate's verdict depends on the head commit, not
// only on the manifest (an approver signs a merge after it landed, which
// changes no file), so a fetch that moves the branch wakes every gated
// Rollout of the Repository, its manifest changed or not.
func TestPushWakesGatesOfASigningPolicyOnEveryHead(t *testing.T) {
	ctx, cfg, c, scheme := rollouttest.StartAPIServer(t)
	const gated, ns = "gated", "push-policy"
	srv, url := gatedRepo(t, c, ns, gated)
	repo := &v1alpha1.Repository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-repo"},
		Spec: v1alpha1.RepositorySpec{URL: url, Branch: "main", Interval: &metav1.Duration{Duration: 10 * time.Minute},
			Approvals: &v1alpha1.ApprovalPolicy{MergeOnly: true}}}
	rollouttest.MustCreate(t, c, repo)
	g := poolWithAGate(ctx, t, cfg, c, scheme, repo, gated)
	go func() { _ = g.Start(ctx) }()
	hook := startPushServer(ctx, t, g)
	e := openAndCheck(ctx, t, g, repo)
	woken(g) // the first fetch wakes every gate

	if _, err := srv.Commit("app", "main", "docs", map[string]string{"README.md": "hello\n"}); err != nil {
		t.Fatal(err)
	}
	push(t, hook, ns, repo.Name)
	fetchAsRepositoryController(ctx, t, g, e)
	if got, want := woken(g), []string{gated}; !slices.Equal(got, want) {
		t.Errorf("a new head under an approval policy woke %v, want %v", got, want)
	}
}

// TestABrokenApproversSecretWakesTheGates: when the approvers' Secret of
// a Repository stops holding a usable key, the Rollouts waiting at a gate
// on it are woken once, to hold and say why, not at their next resync;
// the Repository controller looks at the Secret again every interval
// while they wait (a Secret is read, never watched); and once the Secret
// is fixed, the repository's first fetch wakes them again.
func TestABrokenApproversSecretWakesTheGates(t *testing.T) {
	ctx, cfg, c, scheme := rollouttest.StartAPIServer(t)
	const gated, ns = "gated", "broken-keys"
	_, url := gatedRepo(t, c, ns, gated)
	keys := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "approvers"},
		Data: map[string][]byte{"approver.asc": approverKey(t)}}
	rollouttest.MustCreate(t, c, keys)
	const interval = 7 * time.Second
	repo := &v1alpha1.Repository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-repo"},
		Spec: v1alpha1.RepositorySpec{URL: url, Branch: "main", Interval: &metav1.Duration{Duration: interval},
			Approvals: &v1alpha1.ApprovalPolicy{SignedBy: &v1alpha1.LocalObjectReference{Name: keys.Name}}}}
	rollouttest.MustCreate(t, c, repo)
	g := poolWithAGate(ctx, t, cfg, c, scheme, repo, gated)
	openAndCheck(ctx, t, g, repo)
	woken(g)
	rec := &RepositoryReconciler{Client: c, git: g}
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(repo)}

	keys.Data = map[string][]byte{"approver.asc": []byte("not a key")}
	if err := c.Update(ctx, keys); err != nil {
		t.Fatal(err)
	}
	res, err := rec.Reconcile(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := woken(g), []string{gated}; !slices.Equal(got, want) {
		t.Errorf("the Secret broke: woke %v, want %v", got, want)
	}
	if res.RequeueAfter != interval {
		t.Errorf("broken Secret with a gate waiting: next look in %v, want the interval %v", res.RequeueAfter, interval)
	}
	if _, err := rec.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if got := woken(g); len(got) != 0 {
		t.Errorf("the Secret still broken: woke %v again, want none", got)
	}

	keys.Data = map[string][]byte{"approver.asc": approverKey(t)}
	if err := c.Update(ctx, keys); err != nil {
		t.Fatal(err)
	}
	if _, err := rec.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if got, want := woken(g), []string{gated}; !slices.Equal(got, want) {
		t.Errorf("the Secret fixed: woke %v, want %v", got, want)
	}
}

// approverKey is a new approver's armored OpenPGP public key.
func approverKey(t *testing.T) []byte {
	_, public := gitserver.OpenPGPKeyPair(t, "approver")
	return []byte(public)
}

// TestGatesMakeTheRepositoryPoll: the Repository controller fetches a
// Repository nobody waits on only every repositoryCheck, and every
// interval each branch a Rollout waits on at a gate, the tracked one and
// any other; a gated Rollout that sees its branch unfetched for longer
// asks the controller for a check; once the gates are gone it goes back
// to repositoryCheck. A merge is seen within one interval of a gate
// waiting for it, and no Rollout has to poll Git for that.
func TestGatesMakeTheRepositoryPoll(t *testing.T) {
	ctx, cfg, c, scheme := rollouttest.StartAPIServer(t)

	srv := gitserver.Start(t, gitserver.Options{})
	url, err := srv.CreateRepo("app", map[string]string{manifestPath("web"): "# v1\n"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Commit("app", "release", "release branch", map[string]string{manifestPath("api"): "# v1\n"}); err != nil {
		t.Fatal(err)
	}
	ns := "gate-poll"
	rollouttest.MustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	const interval = 5 * time.Second
	repo := &v1alpha1.Repository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-repo"},
		Spec: v1alpha1.RepositorySpec{URL: url, Branch: "main", Interval: &metav1.Duration{Duration: interval}}}
	rollouttest.MustCreate(t, c, repo)
	web := rollouttest.GatedRollout(t, ns, "web", &v1alpha1.GitReference{Repository: repo.Name, Path: manifestPath("web")})
	api := rollouttest.GatedRollout(t, ns, "api", &v1alpha1.GitReference{Repository: repo.Name, Path: manifestPath("api"), Branch: "release"})
	rollouttest.MustCreate(t, c, web)
	rollouttest.MustCreate(t, c, api)
	rollouts := indexedRolloutCache(ctx, t, cfg, scheme, ns, 0)
	g := NewPool(c, Options{InsecureHTTP: true})
	g.rollouts = rollouts
	go func() { _ = g.Start(ctx) }()
	e, err := g.forRepository(ctx, repo)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	check := func(now time.Time, wantNext time.Duration, wantGated bool) {
		t.Helper()
		next, gated := g.checkIfDue(ctx, e, now)
		if next != wantNext || gated != wantGated {
			t.Fatalf("check at +%v: next in %v (gated %v), want %v (gated %v)", now.Sub(t0), next, gated, wantNext, wantGated)
		}
	}
	merge := func(branch, path, text string) {
		t.Helper()
		if _, err := srv.Commit("app", branch, "merge", map[string]string{path: text}); err != nil {
			t.Fatal(err)
		}
	}

	// No gate: one fetch, then the next only after repositoryCheck.
	check(at(0), repositoryCheck, false)
	merge("main", manifestPath("web"), "# v2\n")
	check(at(10*time.Second), repositoryCheck-10*time.Second, false)
	if h, err := srv.Head("app", "main"); err != nil || e.health.head == h {
		t.Fatal("the Repository was fetched within repositoryCheck with no gate waiting")
	}

	// web and api reach their gates. web's first look asks for a check
	// (main was last fetched more than an interval ago), and the check
	// fetches main and release at once: both gates are woken.
	for _, ro := range []*v1alpha1.Rollout{web, api} {
		ro.Status.AwaitingApproval = &v1alpha1.ApprovalRequest{Revision: "abc", Step: 1, Since: metav1.Now()}
		if err := c.Status().Update(ctx, ro); err != nil {
			t.Fatal(err)
		}
	}
	waitGated(ctx, t, rollouts, ns, 2)
	g.changed.take()
	g.gateWaits(e, "main", at(12*time.Second))
	if _, ok := g.changed.take()[e.obj]; !ok {
		t.Fatal("a gate on a branch unfetched for 12 s (interval 5 s) did not ask the Repository controller for a check")
	}
	woken(g)
	check(at(12*time.Second), interval, true)
	if got, want := woken(g), []string{"api", "web"}; !slices.Equal(got, want) {
		t.Fatalf("the check after the gates woke %v, want %v", got, want)
	}
	// Every interval after that, both branches are fetched and a merge on
	// either wakes its gate, even with no push webhook; a gate whose
	// branch is fetched on time asks for nothing.
	check(at(15*time.Second), 2*time.Second, true)
	g.changed.take() // the fetches' news for the Repository's status
	g.gateWaits(e, "release", at(16*time.Second))
	if _, ok := g.changed.take()[e.obj]; ok {
		t.Error("a gate asked for a check of a branch fetched 4 s ago (interval 5 s)")
	}
	merge("release", manifestPath("api"), "# v2, approved\n")
	check(at(17*time.Second), interval, true)
	if got, want := woken(g), []string{"api"}; !slices.Equal(got, want) {
		t.Fatalf("the check an interval later woke %v, want %v", got, want)
	}

	// With no gate left, the Repository goes back to repositoryCheck.
	for _, ro := range []*v1alpha1.Rollout{web, api} {
		if err := c.Get(ctx, client.ObjectKeyFromObject(ro), ro); err != nil {
			t.Fatal(err)
		}
		ro.Status.AwaitingApproval = nil
		if err := c.Status().Update(ctx, ro); err != nil {
			t.Fatal(err)
		}
	}
	waitGated(ctx, t, rollouts, ns, 0)
	check(at(22*time.Second), repositoryCheck-5*time.Second, false)
}

// waitGated waits until the cache holds n Rollouts of ns at a gate.
func waitGated(ctx context.Context, t *testing.T, ca cache.Cache, ns string, n int) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var list v1alpha1.RolloutList
		if err := ca.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return false, err
		}
		got := 0
		for _, ro := range list.Items {
			if ro.Status.AwaitingApproval != nil {
				got++
			}
		}
		return got == n, nil
	})
	if err != nil {
		t.Fatalf("cache never showed %d gated Rollouts: %v", n, err)
	}
}

func manifestPath(name string) string { return "apps/" + name + "/rollout.yaml" }

// poolWithAGate creates Rollout name of repo waiting at its gate and
// returns a pool of repositories, with a Rollout cache, for repo's
// namespace.
func poolWithAGate(ctx context.Context, t *testing.T, cfg *rest.Config, c client.Client, scheme *runtime.Scheme, repo *v1alpha1.Repository, name string) *Pool {
	t.Helper()
	ro := rollouttest.GatedRollout(t, repo.Namespace, name, &v1alpha1.GitReference{Repository: repo.Name, Path: manifestPath(name)})
	rollouttest.MustCreate(t, c, ro)
	waitAtGate(ctx, t, c, ro)
	g := NewPool(c, Options{InsecureHTTP: true, DefaultInterval: time.Hour})
	g.rollouts = indexedRolloutCache(ctx, t, cfg, scheme, repo.Namespace, 1)
	return g
}

// waitAtGate makes ro wait at step 1's gate for an approval on its branch.
func waitAtGate(ctx context.Context, t *testing.T, c client.Client, ro *v1alpha1.Rollout) {
	t.Helper()
	ro.Status.AwaitingApproval = &v1alpha1.ApprovalRequest{Revision: "abc", Step: 1, Since: metav1.Now(), Branch: "rollgate/approve/" + ro.Name}
	if err := c.Status().Update(ctx, ro); err != nil {
		t.Fatal(err)
	}
}

// indexedRolloutCache starts a cache of Rollouts indexed by Repository
// (repositoryIndex) and waits until it holds gated Rollouts of ns at a
// gate.
func indexedRolloutCache(ctx context.Context, t *testing.T, cfg *rest.Config, scheme *runtime.Scheme, ns string, gated int) cache.Cache {
	t.Helper()
	ca, err := cache.New(cfg, cache.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.IndexField(ctx, &v1alpha1.Rollout{}, repositoryIndex, func(o client.Object) []string {
		if g := o.(*v1alpha1.Rollout).Spec.Git; g != nil {
			return []string{g.Repository}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	go func() { _ = ca.Start(ctx) }()
	if !ca.WaitForCacheSync(ctx) {
		t.Fatal("Rollout cache did not sync")
	}
	waitGated(ctx, t, ca, ns, gated)
	return ca
}

// startPushServer serves the push webhook on a free loopback port, calling
// the pool's MarkStale as Setup wires it, and returns its base URL. Unlike
// Setup it has no readers and no Interval: every call is accepted as for a
// Repository without a webhook secret and none is limited, so these tests
// cover what a push does, not which pushes are refused (package gitpush
// tests that).
func startPushServer(ctx context.Context, t *testing.T, g *Pool) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	s := &gitpush.Server{Addr: addr, Stale: g.MarkStale}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := s.Start(ctx); err != nil {
			t.Errorf("push server: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	base := "http://" + addr
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("push server at %s: %v", addr, err)
	}
	return base
}

// openAndCheck opens r in the pool and runs the Repository controller's
// first check (a fetch of the tracked branch).
func openAndCheck(ctx context.Context, t *testing.T, g *Pool, r *v1alpha1.Repository) *Repo {
	t.Helper()
	e, err := g.forRepository(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	g.checkIfDue(ctx, e, time.Now())
	if e.health.fetchErr != nil {
		t.Fatalf("fetch of %s: %v", r.Name, e.health.fetchErr)
	}
	return e
}

// push calls the webhook as a forge does after a push.
func push(t *testing.T, base, ns, repo string) {
	t.Helper()
	resp, err := http.Post(fmt.Sprintf("%s/hook/%s/%s", base, ns, repo), "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("webhook answered %s, want 202 Accepted", resp.Status)
	}
}

// fetchAsRepositoryController does what the Repository controller does
// when the webhook asks it for a reconcile: it checks that the push
// reached it (the changed notifier holds the Repository) and fetches,
// the interval notwithstanding.
func fetchAsRepositoryController(ctx context.Context, t *testing.T, g *Pool, e *Repo) {
	t.Helper()
	if _, ok := g.changed.take()[e.obj]; !ok {
		t.Fatalf("the push did not ask for a reconcile of Repository %s", e.obj)
	}
	g.checkIfDue(ctx, e, time.Now())
	if e.health.fetchErr != nil {
		t.Fatalf("fetch: %v", e.health.fetchErr)
	}
}

// woken takes the names of the Rollouts the pool woke since the last call.
func woken(g *Pool) []string {
	var out []string
	for k := range g.moved.take() {
		out = append(out, k.Name)
	}
	slices.Sort(out)
	return out
}

// gatedRepo creates namespace ns and starts a Git server whose repository
// app holds the first version of Rollout name's manifest; it returns the
// server and the repository's URL.
func gatedRepo(t *testing.T, c client.Client, ns, name string) (*gitserver.Server, string) {
	t.Helper()
	srv := gitserver.Start(t, gitserver.Options{})
	url, err := srv.CreateRepo("app", map[string]string{manifestPath(name): "# " + name + " v1\n"})
	if err != nil {
		t.Fatal(err)
	}
	rollouttest.MustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	return srv, url
}
