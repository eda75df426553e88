package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/gitserver"
)

// fleet is the clusters of a fleet story, each a kwok cluster with its
// own controller, all sharing one Git server: their Rollout demo/web and
// its Deployment are in clusters/<name>/ in Git.
type fleet struct {
	t   *testing.T
	git *gitserver.Server
	url string
	// clusters are the clusters started so far.
	clusters map[string]*world
	// gates are the clusters whose first step is an approval gate.
	gates map[string]bool
	// waits are each cluster's spec.fleet, a YAML flow mapping.
	waits map[string]string
}

// newFleet creates the Git repository of a story with the manifests of
// the clusters names, web:1 in each; start starts them.
func newFleet(t *testing.T, gates map[string]bool, waits map[string]string, names ...string) *fleet {
	f := &fleet{t: t, git: gitserver.Start(t, gitserver.Options{}), clusters: map[string]*world{}, gates: gates, waits: waits}
	files := map[string]string{}
	for _, name := range names {
		files["clusters/"+name+"/web.yaml"] = f.rollout(name, "")
		files["clusters/"+name+"/app.yaml"] = fleetApp(name, "web:1")
	}
	var err error
	if f.url, err = f.git.CreateRepo("fleet", files); err != nil {
		t.Fatal(err)
	}
	return f
}

// start starts one cluster per name, applies its Repository, Deployment
// (web:1) and Rollout, and waits until each runs web:1 under its Rollout,
// Healthy.
func (f *fleet) start(names ...string) {
	f.t.Helper()
	began := time.Now()
	started := map[string]*world{}
	for _, name := range names {
		w := newWorldWith(f.t, f.git)
		f.clusters[name], started[name] = w, w
		w.EnsureNamespace("demo")
		w.ApplyYAML(fleetRepository(f.url, name, ""))
		w.ApplyYAML(fleetApp(name, "web:1"))
		w.ApplyYAML(f.rollout(name, ""))
	}
	// After the clusters' own cleanups are registered: it runs before
	// they stop.
	reportFleet(f.t, f.git, started)
	for _, name := range names {
		f.healthy(name, "web:1")
	}
	f.t.Logf("clusters %s up, web:1 Healthy in each, after %s", strings.Join(names, ", "), time.Since(began).Round(100*time.Millisecond))
}

// rollout is cluster name's Rollout, with extra appended to its spec.
func (f *fleet) rollout(name, extra string) string {
	if w := f.waits[name]; w != "" {
		extra = "  fleet: " + w + "\n" + extra
	}
	return fleetRollout(name, f.gates[name], extra)
}

// healthy waits until cluster name runs image on all its pods under its
// Rollout, Healthy.
func (f *fleet) healthy(name, image string) {
	f.t.Helper()
	w := f.clusters[name]
	w.Eventually(120*time.Second, name+" released "+image, func(ctx context.Context) (bool, error) {
		return conditions.IsReady(w.Rollout("demo", "web")) && w.Pods("demo", "web")[image] == [2]int{3, 3}, nil
	})
}

// release commits image to the manifests of the clusters names in Git
// (every cluster started when none) and applies it, as each cluster's
// GitOps agent would: all at once.
func (f *fleet) release(image string, names ...string) {
	f.t.Helper()
	if len(names) == 0 {
		for name := range f.clusters {
			names = append(names, name)
		}
	}
	files := map[string]string{}
	for _, name := range names {
		files["clusters/"+name+"/app.yaml"] = fleetApp(name, image)
	}
	if _, err := f.git.Commit("fleet", "main", "release "+image, files); err != nil {
		f.t.Fatal(err)
	}
	for _, name := range names {
		f.clusters[name].ApplyYAML(fleetApp(name, image))
	}
}

// atGate waits until cluster name's release other than revision not
// waits at its gate, and its status file on the status branch says so,
// and returns that release's revision. The other clusters learn of the
// gate from that file only: the waits for what they say start once it is
// in Git. How long the write took is logged; on a loaded machine it is
// most of a downstream cluster's reaction (more than a minute at load 19,
// fresh-clone run of dc833ac, against about a second on a quiet one).
func (f *fleet) atGate(name, not string) string {
	f.t.Helper()
	w := f.clusters[name]
	var rev string
	w.Eventually(90*time.Second, name+" at its gate", func(ctx context.Context) (bool, error) {
		ro := w.Rollout("demo", "web")
		rev = ro.Status.CanaryRevision
		return ro.Status.AwaitingApproval != nil && rev != not, nil
	})
	w.Eventually(2*time.Minute, name+"'s gate in its status file", func(ctx context.Context) (bool, error) {
		file, err := f.git.ReadFile("fleet", "rollgate/status", name+"/demo/web.yaml")
		return err == nil && strings.Contains(file, "revision: "+rev) && strings.Contains(file, "state: StepPaused"), nil
	})
	return rev
}

// says waits until cluster name's Rollout holds with WaitingForFleet and
// a message containing want.
func (f *fleet) says(name, want string) {
	f.t.Helper()
	w := f.clusters[name]
	w.Eventually(60*time.Second, name+" held saying "+want, func(ctx context.Context) (bool, error) {
		ro := w.Rollout("demo", "web")
		return conditions.GetReason(ro, v1alpha1.ProgressingCondition) == v1alpha1.ReasonWaitingForFleet &&
			strings.Contains(ro.Status.Message, want), nil
	})
}

// completedAt is when cluster name's release completed, as its controller
// wrote it (status.stepStartedAt of the completed release; the same time
// goes to its status file). Status times are whole seconds rounded up, so
// that a wait counted from one never ends early (strategy's newPlanner):
// the release completed within the second before it, and a downstream
// cluster that waits for nothing more than that completion may start in
// that second (on 2026-12-02: core's first pod at 02:00:07.84, edge-1's
// stepStartedAt 02:00:08, its Ready condition's transition 02:00:07).
func (f *fleet) completedAt(name string) time.Time {
	return f.clusters[name].Rollout("demo", "web").Status.StepStartedAt.Time
}

// waveOrder samples a fleet while it releases an image: at each sample,
// every cluster that runs a pod of the image must have all its upstream
// clusters Healthy on it. It reads the downstream cluster first, so a
// sample never sees an upstream completion that came after.
type waveOrder struct {
	mu       sync.Mutex
	samples  int
	broken   []string
	messages map[string][]string
}

// sampleOrder samples f every 250 ms until the story ends or stop is
// called; upstreams maps a cluster to the clusters it waits for.
func (f *fleet) sampleOrder(image string, upstreams map[string][]string) (*waveOrder, func()) {
	o := &waveOrder{messages: map[string][]string{}}
	ctx, stop := context.WithCancel(context.Background())
	f.t.Cleanup(stop)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			for down, ups := range upstreams {
				o.sample(ctx, f, image, down, ups)
			}
			o.mu.Lock()
			o.samples++
			o.mu.Unlock()
			time.Sleep(250 * time.Millisecond)
		}
	}()
	return o, func() { stop(); <-done }
}

func (o *waveOrder) sample(ctx context.Context, f *fleet, image, down string, ups []string) {
	w := f.clusters[down]
	ro := &v1alpha1.Rollout{}
	if err := w.C.Get(ctx, client.ObjectKey{Namespace: "demo", Name: "web"}, ro); err == nil {
		o.mu.Lock()
		if m := ro.Status.Message; m != "" && !slices.Contains(o.messages[down], m) {
			o.messages[down] = append(o.messages[down], m)
		}
		o.mu.Unlock()
	}
	pods, err := w.podsByImage(ctx, "demo", "web")
	if err != nil || pods[image][1] == 0 {
		return
	}
	for _, up := range ups {
		u := f.clusters[up]
		ro := &v1alpha1.Rollout{}
		if err := u.C.Get(ctx, client.ObjectKey{Namespace: "demo", Name: "web"}, ro); err != nil {
			continue
		}
		upPods, err := u.podsByImage(ctx, "demo", "web")
		if err != nil {
			continue
		}
		if ro.Status.Phase != v1alpha1.PhaseHealthy || upPods[image] != [2]int{3, 3} {
			o.mu.Lock()
			o.broken = append(o.broken, fmt.Sprintf("%s ran %d %s pod(s) while %s was %s with pods %v (%q)",
				down, pods[image][1], image, up, ro.Status.Phase, upPods, ro.Status.Message))
			o.mu.Unlock()
		}
	}
}

// TestFleetGraphThroughGit: four clusters, four controllers, one Git
// server. canary releases first, to an approval gate; prod-eu (after a
// bake of 10 s) and prod-us wait for canary's release (fan-out);
// prod-rest waits for both (fan-in). Sampled all along, no cluster runs a
// pod of web:2 before every cluster it waits for released it, prod-eu not
// before canary's release baked 10 s, and all four release it. The next
// release, web:3, is aborted in canary: every downstream wave holds, and
// prod-rest, which waits on prod-eu and prod-us only, names canary (the
// release that failed) and the path to it.
func TestFleetGraphThroughGit(t *testing.T) {
	t.Parallel()
	const bake = 10 * time.Second
	upstreams := map[string][]string{"prod-eu": {"canary"}, "prod-us": {"canary"}, "prod-rest": {"prod-eu", "prod-us"}}
	names := []string{"canary", "prod-eu", "prod-us", "prod-rest"}
	f := newFleet(t, map[string]bool{"canary": true}, map[string]string{
		"prod-eu":   "{waitFor: [{cluster: canary, bakeTime: 10s}]}",
		"prod-us":   "{waitFor: [{cluster: canary}]}",
		"prod-rest": "{waitFor: [{cluster: prod-eu}, {cluster: prod-us}]}",
	}, names...)
	f.start(names...)
	canary := f.clusters["canary"]

	// When all four get web:2 at once.
	phase := time.Now()
	order, stop := f.sampleOrder("web:2", upstreams)
	euPods := watchImages(f.clusters["prod-eu"], "web:2")
	f.release("web:2")

	// Then canary releases it to its gate and the three waves hold,
	// each naming what it waits for.
	rev := f.atGate("canary", "")
	f.says("prod-eu", "cluster canary: demo/web is at step 1/2")
	f.says("prod-us", "cluster canary: demo/web is at step 1/2")
	// prod-eu's file says web:1 (Healthy) until prod-eu writes that it
	// waits itself (Paused, no images yet): either names prod-eu.
	f.says("prod-rest", "cluster prod-eu: demo/web ")

	// When canary's gate is approved, it completes; prod-us follows, then
	// prod-eu once the bake is over, then prod-rest.
	canary.ApplyYAML(f.rollout("canary", fmt.Sprintf("  approvals: [{revision: %s, step: 1}]\n", rev)))
	f.healthy("canary", "web:2")
	completed := f.completedAt("canary")
	for _, name := range []string{"prod-us", "prod-eu", "prod-rest"} {
		f.healthy(name, "web:2")
	}
	stop()
	// The bake is proven by prod-eu's first pod (below). Its message is a
	// state of at most 10 s that prod-eu shows only if it read canary's
	// completion before the bake ended (it looks at Git every 5 s): a
	// loaded machine may skip it, so it is reported, not required; the
	// message itself is unit-tested (reconciler/rollout TestBakeTime).
	baking := "baking for 10s, until " + completed.Add(bake).UTC().Format(time.RFC3339)
	if !slices.ContainsFunc(order.messages["prod-eu"], func(m string) bool { return strings.Contains(m, baking) }) {
		t.Logf("prod-eu was not seen saying %q: it read canary's completion after the bake", baking)
	}
	t.Logf("web:2 released by all four %s after the commit; %d samples of the order; messages seen: %q",
		time.Since(phase).Round(100*time.Millisecond), order.samples, order.messages)
	if len(order.broken) > 0 {
		t.Fatalf("a wave ran web:2 before its upstream released it, in %d of %d samples; first: %s", len(order.broken), order.samples, order.broken[0])
	}
	if first := euPods.first(); first.Before(completed.Add(bake)) {
		t.Fatalf("prod-eu's first web:2 pod at %s, before canary's release baked %s (completed %s)", first, bake, completed)
	} else {
		t.Logf("canary completed at %s; prod-eu's first web:2 pod %s after", completed.Format(time.StampMilli), first.Sub(completed).Round(time.Millisecond))
	}

	// When canary aborts the next release.
	phase = time.Now()
	var watches []*imageWatch
	for _, name := range []string{"prod-eu", "prod-us", "prod-rest"} {
		watches = append(watches, watchImages(f.clusters[name], "web:3"))
	}
	f.release("web:3")
	rev = f.atGate("canary", rev)
	canary.ApplyYAML(f.rollout("canary", fmt.Sprintf("  abort: {revision: %s, reason: bad latency}\n", rev)))
	canary.Eventually(60*time.Second, "canary rolled web:3 back", func(ctx context.Context) (bool, error) {
		return conditions.IsStalled(canary.Rollout("demo", "web")) && canary.Pods("demo", "web")["web:2"] == [2]int{3, 3}, nil
	})
	// Then every downstream wave holds naming canary: prod-eu and prod-us
	// directly, prod-rest through prod-eu (its first wait).
	failed := "cluster canary: demo/web: the release of web=web:3 failed there"
	f.says("prod-eu", failed)
	f.says("prod-us", failed)
	f.says("prod-rest", "cluster prod-eu: demo/web is held by a failed release upstream of it: "+failed)
	t.Logf("prod-rest: %q", f.clusters["prod-rest"].Rollout("demo", "web").Status.Message)
	f.clusters["prod-rest"].Holds(3*time.Second, "every wave held by canary's failed release", func(ctx context.Context) error {
		for i, name := range []string{"prod-eu", "prod-us", "prod-rest"} {
			if first := watches[i].first(); !first.IsZero() {
				return fmt.Errorf("%s ran a web:3 pod at %s after canary rolled web:3 back", name, first)
			}
		}
		return nil
	})
	t.Logf("web:3 aborted in canary and held everywhere %s after the commit", time.Since(phase).Round(100*time.Millisecond))
}

// TestFleetShareThroughGit: core waits until at least half of the
// clusters named edge-* released its version (spec.fleet.waitFor
// clusters: [edge-*], atLeast: 50%). Before any edge cluster wrote a
// status file, the set is empty and core holds, saying so. With two edge
// clusters at their gates it holds, counting; once edge-1 released, core
// releases while edge-2 still waits at its gate.
func TestFleetShareThroughGit(t *testing.T) {
	t.Parallel()
	f := newFleet(t, map[string]bool{"edge-1": true, "edge-2": true},
		map[string]string{"core": "{waitFor: [{clusters: ['edge-*'], atLeast: '50%'}]}"}, "core", "edge-1", "edge-2")
	f.start("core")
	core := f.clusters["core"]
	corePods := watchImages(core, "web:2")

	// When core gets web:2 before any edge cluster runs.
	f.release("web:2", "core")
	// Then the set is empty, and core holds: an empty set never opens.
	f.says("core", "clusters edge-*: demo/web: no cluster of the set has a status file of it on the status branch")
	core.Holds(3*time.Second, "core held by an empty set", func(ctx context.Context) error {
		if first := corePods.first(); !first.IsZero() {
			return fmt.Errorf("core ran a web:2 pod at %s with no edge cluster in the set", first)
		}
		return nil
	})

	// When the two edge clusters come up (web:1) and get web:2 too.
	f.start("edge-1", "edge-2")
	f.says("core", "clusters edge-*: demo/web: 0 of 2 clusters released web=web:2, at least 1 needed (atLeast 50%)")
	f.release("web:2", "edge-1", "edge-2")
	rev := f.atGate("edge-1", "")
	f.atGate("edge-2", "")
	// Then core holds, counting, and naming where each edge is.
	f.says("core", "0 of 2 clusters released web=web:2, at least 1 needed (atLeast 50%): cluster edge-1: demo/web is at step 1/2 (StepPaused) of web=web:2")

	// When edge-1's gate is approved and its release completes, core
	// releases web:2, while edge-2 still waits at its gate.
	f.clusters["edge-1"].ApplyYAML(f.rollout("edge-1", fmt.Sprintf("  approvals: [{revision: %s, step: 1}]\n", rev)))
	f.healthy("edge-1", "web:2")
	completed := f.completedAt("edge-1")
	f.healthy("core", "web:2")
	if first := corePods.first(); first.Before(completed.Add(-time.Second)) {
		t.Fatalf("core's first web:2 pod at %s, before edge-1 completed (in the second before %s)", first, completed)
	} else {
		t.Logf("edge-1 completed at %s; core's first web:2 pod %s after", completed.Format(time.StampMilli), first.Sub(completed).Round(time.Millisecond))
	}
	if ro := f.clusters["edge-2"].Rollout("demo", "web"); ro.Status.AwaitingApproval == nil {
		t.Fatalf("edge-2 left its gate (phase %s, %q): the share was not what opened core's wait", ro.Status.Phase, ro.Status.Message)
	}
}
