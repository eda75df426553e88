package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/rollgate/rollgate/test/kwok"
	"github.com/rollgate/rollgate/test/proc"
	"github.com/rollgate/rollgate/test/repo"
	"github.com/rollgate/rollgate/test/rig"
)

const (
	// sideBySideSizesEnv lists the fleet sizes of BenchmarkSideBySide,
	// comma-separated (default 50,200): ROLLGATE_P5_SIZES=50,200,500.
	sideBySideSizesEnv = "ROLLGATE_P5_SIZES"
	// sideBySideOnlyEnv, when set, runs only the controllers it names
	// (comma-separated: rollgate, kruise-rollout, argo-rollouts).
	sideBySideOnlyEnv = "ROLLGATE_P5_ONLY"
	// sideBySideLogsEnv, when set, is a folder that keeps the controllers'
	// logs (<controller>-<N>.log) after the run, and with sideBySideAuditEnv
	// the API server's audit log (<controller>-<N>-audit.log).
	sideBySideLogsEnv = "ROLLGATE_P5_LOGS"
	// sideBySideReleasesEnv=2 runs a second release after the first, on
	// the same cluster and controller, and prints it as its own row: the
	// steady state, where the stable pods are the last release's new ones
	// (ROLLGATE_P5_RELEASES, default 1).
	sideBySideReleasesEnv = "ROLLGATE_P5_RELEASES"
	// sideBySideCPUProfileEnv, when set, is a folder where rollgate's CPU
	// profile of each release goes (rollgate-<N>-cpu.pprof), and what it
	// allocated meanwhile (rollgate-<N>-allocs.pprof): its first
	// sideBySideCPUProfileSeconds after the images change, read from the
	// controller's --pprof-bind-address.
	sideBySideCPUProfileEnv     = "ROLLGATE_P5_CPUPROFILE"
	sideBySideCPUProfileSeconds = 60
	// sbsReplicas is the size of every Deployment: step 1 is one of its
	// pods.
	sbsReplicas = 4
	// Images: the fleet starts on the first, the floor rolls it to the
	// second with no controller, the release under a controller to the
	// third.
	sbsImageStart, sbsImageFloor, sbsImageRelease = "app:1.0", "app:1.1", "app:2.0"
	// sbsImageRelease2 is the image of the second release, when
	// sideBySideReleasesEnv asks for one.
	sbsImageRelease2 = "app:3.0"
	// reapproveAfter is how long a Rollout may still wait at its gate
	// after an approval before the benchmark approves it again.
	reapproveAfter = 5 * time.Second
)

// contender is one progressive-delivery controller of the side-by-side
// benchmark, run as a local process next to the kwok cluster.
type contender interface {
	// name is how the table names it.
	name() string
	// install applies what the controller needs before it starts: its
	// CRDs, its namespace, its webhook configurations.
	install(f *fleet)
	// start runs the controller and returns once it serves.
	start(f *fleet, dir string) *controllerProcess
	// rolloutGVK is the kind of its Rollout.
	rolloutGVK() schema.GroupVersionKind
	// rolloutYAML is the Rollout of workload name moving traffic through
	// r: step 1 one new pod and 20% of traffic behind a manual gate, step 2
	// every pod.
	rolloutYAML(name string, r router) string
	// ready reports whether a Rollout applied to an existing Deployment
	// is healthy and its Deployment d (nil: not seen) is covered by the
	// controller's webhook, ready for a release.
	ready(ro, d *unstructured.Unstructured) bool
	// gated reports whether ro waits at its step-1 gate of a release, and
	// the revision to approve.
	gated(ro *unstructured.Unstructured) (revision string, ok bool)
	// done reports whether ro finished releasing revision.
	done(ro *unstructured.Unstructured, revision string) bool
	// passed reports whether the controller's own status shows ro past
	// its step-1 gate of revision: what the approval led to, not the
	// approval itself (which for Argo Rollouts and Kruise is a status
	// write of the benchmark's).
	passed(ro *unstructured.Unstructured, revision string) bool
	// approve opens the step-1 gate of revision of the Rollout name, the
	// way the controller's CLI does.
	approve(ctx context.Context, c client.Client, name, revision string) error
}

// controllerProcess is a running contender.
type controllerProcess struct {
	p *proc.Process
	// metricsURL serves its Prometheus metrics; pprofURL, when set, Go's
	// profiles.
	metricsURL, pprofURL string
}

// sbsResult is one contender's run at one fleet size.
type sbsResult struct {
	controller string
	n          int
	load       float64
	// router is what the controller moved the traffic through.
	router router
	// strategy is the Deployments' rolling update.
	strategy sbsStrategy
	// movesTraffic is false when the controller moved none (Argo
	// Rollouts through the HTTPRoute): its step 1 and completion leave
	// the route out.
	movesTraffic bool
	// floor: per Deployment, image change to its first new pod ready, in
	// a plain rolling update with no controller; floorDone to every pod
	// on the new image.
	floor, floorDone []time.Duration
	// step1: image change to step 1 reached (the Rollout at its gate, one
	// new pod ready, 20% of the route's weight on it); complete: approval
	// to the release finished (the Rollout done, every pod on the new
	// image, the route on the stable Service alone).
	step1, complete []time.Duration
	// completeBy splits complete: approval to each of its parts (the
	// Rollout done, the Deployment rolled, the route back), the last of
	// which is completion.
	completeBy map[string][]time.Duration
	// nextStep: approval to the controller's status past the gate.
	nextStep []time.Duration
	// incomplete, when set, says how many Rollouts made it in time.
	incomplete string
	// reapproved counts approvals sent again because the Rollout still
	// waited reapproveAfter after the last one.
	reapproved int
	// wall is the first image change to the last completion.
	wall time.Duration
	// requests are the controller's API requests from the first image
	// change to the last completion; adopt those from its start to every
	// Rollout ready.
	requests, adopt float64
	// byMethod splits requests by HTTP method.
	byMethod map[string]float64
	// audit, with sideBySideAuditEnv set, counts every client's requests
	// over the same span by verb and resource, from the audit log.
	audit map[string]map[string]float64
	// RSS of the controller process: with every Rollout ready, and its
	// peak over the whole run (VmHWM).
	rssRest, rssPeak float64
	// anonDone and fileDone split the RSS after the release into
	// anonymous memory (heap, stacks) and pages of the binary.
	anonDone, fileDone float64
	// heapRest and heapDone are the Go heap in use (spans) with every
	// Rollout ready and after the release.
	heapRest, heapDone float64
	// cpuAdopt is the controller's CPU time (user and system) from its
	// start to every Rollout ready, cpuRelease from the first image change
	// to the last completion, in seconds.
	cpuAdopt, cpuRelease float64
	// reconciles counts the controller's reconciles (controller-runtime's
	// controller_runtime_reconcile_total, every controller of the process)
	// from the first image change to the last completion; -1 for a
	// controller that serves no such counter (Argo Rollouts).
	reconciles float64
	// wakeups are rollgate's rollgate_rollout_wakeups_total over the same
	// time, by source; nil for the others.
	wakeups map[string]float64
}

// BenchmarkSideBySide is P5 of docs/benchmarks.md: rollgate, OpenKruise
// Rollout and Argo Rollouts, one after the other, each on a fresh kwok
// cluster with the same fleet of N Deployments (4 replicas, a headless
// Service, an HTTPRoute and, with the nginx router, an Ingress each). Each
// controller runs as a local process (bin/image/rollgate-controller,
// bin/kruiserollout/kruise-rollout, bin/argorollouts/rollouts-controller),
// so memory and CPU time are each process's own and API requests are each
// process's own client counter. Every controller moves the traffic through
// the router of sideBySideRouterEnv: by default a canary Ingress with
// NGINX's canary-weight annotation, which no NGINX reads here (the
// benchmark reads the annotation). Per size and controller: the floor (a
// plain Deployment rollout of one new pod, no controller), the time to step
// 1 (one new pod and 20% of traffic, waiting for approval) with every image
// changed at once, the time from approval to completion, the API requests,
// the CPU time and the memory. It prints one figure per line and then a
// table, every line starting with "P5 ".
func BenchmarkSideBySide(b *testing.B) {
	sizes := []int{50, 200}
	if v := os.Getenv(sideBySideSizesEnv); v != "" {
		sizes = nil
		for _, s := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n < 1 {
				b.Fatalf("%s=%q: want fleet sizes separated by commas, such as 50,200", sideBySideSizesEnv, v)
			}
			sizes = append(sizes, n)
		}
	}
	var contenders []contender
	for _, c := range []contender{rollgateContender{}, kruiseContender{}, argoContender{}} {
		if only := os.Getenv(sideBySideOnlyEnv); only == "" || slices.Contains(strings.Split(only, ","), c.name()) {
			contenders = append(contenders, c)
		}
	}
	var results []sbsResult
	for _, n := range sizes {
		for _, c := range contenders {
			b.Run(fmt.Sprintf("%s/rollouts=%d", c.name(), n), func(b *testing.B) {
				for range b.N {
					for _, r := range runSideBySide(b, c, n) {
						printSideBySideFigures(r)
						results = append(results, r)
					}
				}
			})
		}
	}
	printSideBySideTable(results)
}

// runSideBySide measures contender c on a fresh cluster with n workloads:
// one release, or two one after the other (sideBySideReleasesEnv), a
// result each.
func runSideBySide(b *testing.B, c contender, n int) []sbsResult {
	rt := sideBySideRouter(b)
	st := sideBySideStrategy(b)
	r := sbsResult{controller: c.name(), n: n, load: loadAvg(), router: rt, strategy: st, movesTraffic: movesTraffic(c, rt)}
	// The benchmark's clients log through controller-runtime, which warns
	// with a stack trace when no logger was ever set.
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	scheme := rig.NewScheme(b)
	kopts := kwok.Options{Nodes: max(3, n*sbsReplicas/80+1), Scheme: scheme}
	switch audit := os.Getenv(sideBySideAuditEnv); audit {
	case "":
	case "1", "request":
		kopts.AuditPolicy = auditPolicy(b, audit == "request")
	default:
		b.Fatalf("%s=%q: want 1 (requests counted) or request (bodies of writes kept too)", sideBySideAuditEnv, audit)
	}
	cl := kwok.Start(b, kopts)
	f := &fleet{b: b, cluster: cl, c: cl.Client, scheme: scheme, stable: map[string]string{}, opts: fleetOptions{replicas: sbsReplicas, strategy: st},
		audited: kopts.AuditPolicy != ""}
	for i := range n {
		f.names = append(f.names, fmt.Sprintf("app-%03d", i))
	}
	f.applyFiles(repo.HTTPRouteCRD("standard"))
	c.install(f)
	f.ensureNamespace(ns)
	f.parallel(func(name string) {
		f.applyYAML(st.apply(appYAML(name, sbsImageStart, sbsReplicas)) + rt.fleetYAML(name) + contenderFleetYAML(c, name, rt))
	})
	f.waitRolled(sbsImageStart)

	// The floor, before any controller runs: every Deployment rolled to a
	// new image at once by the Deployment controller alone.
	r.floor, r.floorDone = f.measureFloor(sbsImageFloor)

	dir := b.TempDir()
	cp := c.start(f, dir)
	if keep := os.Getenv(sideBySideLogsEnv); keep != "" {
		b.Cleanup(func() { keepLog(b, cp.p.Log, filepath.Join(keep, fmt.Sprintf("%s-%d.log", c.name(), n))) })
	}
	b.Cleanup(func() {
		if err := cp.p.Stop(10 * time.Second); err != nil {
			b.Errorf("%s: %v", c.name(), err)
		}
		if b.Failed() {
			b.Logf("last lines of %s:\n%s", cp.p.Log, proc.Tail(cp.p.Log, 30))
		}
	})
	req0, _ := f.requests(cp)
	f.parallel(func(name string) { f.applyYAML(c.rolloutYAML(name, rt)) })
	f.waitReady(c)
	req1, m1 := f.requests(cp)
	r.adopt = req1 - req0
	r.cpuAdopt = f.cpu(cp)
	r.rssRest = f.rss(cp, "VmRSS")
	r.heapRest = f.heap(cp)

	f.opts.replicas = releaseReplicas(c, f.opts.replicas)
	rs := []sbsResult{r}
	f.release(c, cp, &rs[0], sbsImageRelease, req1, m1)
	if releases(b) == 2 && rs[0].incomplete == "" {
		// The second release, on the same cluster and controller: its
		// stable pods are the first release's new ones.
		r2 := sbsResult{controller: c.name() + ", release 2", n: n, load: loadAvg(), router: rt, strategy: st, movesTraffic: r.movesTraffic,
			floor: r.floor, floorDone: r.floorDone, adopt: r.adopt, rssRest: r.rssRest, heapRest: r.heapRest, cpuAdopt: r.cpuAdopt}
		req, m := f.requests(cp)
		f.release(c, cp, &r2, sbsImageRelease2, req, m)
		rs = append(rs, r2)
	}
	if err := cp.p.Exited(); err != nil {
		b.Fatal(err)
	}
	return rs
}

// releases is how many releases BenchmarkSideBySide runs per controller
// (sideBySideReleasesEnv: 1, the default, or 2).
func releases(b *testing.B) int {
	switch v := os.Getenv(sideBySideReleasesEnv); v {
	case "", "1":
		return 1
	case "2":
		return 2
	default:
		b.Fatalf("%s=%q: want 1 or 2", sideBySideReleasesEnv, v)
		return 0
	}
}

// release changes every Deployment to image at once under controller cp,
// waits for step 1, approves every gate and waits for completion, and
// records in r the times, the requests counted from req0 and m0 (the
// controller's counters before the images changed) and the memory.
func (f *fleet) release(c contender, cp *controllerProcess, r *sbsResult, image string, req0 float64, m0 map[string]float64) {
	b := f.b
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr := f.trackRelease(ctx, c, r.router, image)
	cpu0 := f.cpu(cp)
	rec0 := f.reconciles(cp)
	var woken0 map[string]float64
	if c.name() == (rollgateContender{}).name() {
		woken0 = f.wakeups(cp)
	}
	profiled := f.profileCPU(c, cp, r.n)
	defer profiled()
	bumped := f.applyImages(image)
	timeout := max(15*time.Minute, time.Duration(r.n)*3*time.Second)
	// measure reads the controller's requests and memory at the end.
	measure := func() {
		req, m := f.requests(cp)
		r.requests = req - req0
		r.byMethod = map[string]float64{}
		for k, v := range m {
			r.byMethod[k] = v - m0[k]
		}
		r.rssPeak = f.rss(cp, "VmHWM")
		r.anonDone, r.fileDone = f.rss(cp, "RssAnon"), f.rss(cp, "RssFile")
		r.heapDone = f.heap(cp)
		r.cpuRelease = f.cpu(cp) - cpu0
		if r.reconciles = -1; rec0 >= 0 {
			r.reconciles = f.reconciles(cp) - rec0
		}
		if woken0 != nil {
			r.wakeups = map[string]float64{}
			for k, v := range f.wakeups(cp) {
				r.wakeups[k] = v - woken0[k]
			}
		}
		if f.audited {
			var err error
			if r.audit, err = auditCounts(f.cluster.AuditLog(), firstOf(bumped), time.Now()); err != nil {
				b.Error(err)
			}
			if keep := os.Getenv(sideBySideLogsEnv); keep != "" {
				// The log so far, kept again (and whole) after a second release.
				keepLog(b, f.cluster.AuditLog(), filepath.Join(keep, fmt.Sprintf("%s-%d-audit.log", c.name(), r.n)))
			}
		}
	}
	if r.incomplete = f.waitAll(tr.step1, timeout, "at step 1", cp, tr.explain, nil); r.incomplete != "" {
		measure()
		r.collect(f.names, tr, bumped, nil)
		tr.timeline.print(r.controller, r.n, bumped[tr.timeline.name], time.Time{})
		return
	}
	f.checkStep1(tr)
	approved := map[string]time.Time{}
	var mu sync.Mutex
	f.parallel(func(name string) {
		rev, _ := tr.revision(name)
		at := time.Now()
		if err := c.approve(context.Background(), f.c, name, rev); err != nil {
			f.b.Errorf("approve %s: %v", name, err)
		}
		mu.Lock()
		approved[name] = at
		mu.Unlock()
	})
	// An approval can be lost (Kruise writes a status computed before the
	// approval over it): one still waiting reapproveAfter after its last
	// approval is approved again, as a person would, and counted.
	lastApproval := maps.Clone(approved)
	r.incomplete = f.waitAll(tr.complete, timeout, "complete", cp, tr.explain, func() {
		for _, name := range f.names {
			ro := tr.latest(name)
			if ro == nil || time.Since(lastApproval[name]) < reapproveAfter {
				continue
			}
			if rev, still := c.gated(ro); still {
				lastApproval[name] = time.Now()
				r.reapproved++
				if err := c.approve(context.Background(), f.c, name, rev); err != nil {
					f.b.Logf("approve %s again: %v", name, err)
				}
			}
		}
	})
	measure()
	r.collect(f.names, tr, bumped, approved)
	tr.timeline.print(r.controller, r.n, bumped[tr.timeline.name], approved[tr.timeline.name])
}

// profileCPU starts reading the CPU profile of cp, and the allocations of
// the same window, into the folder of sideBySideCPUProfileEnv, when set and
// cp serves profiles; the function it returns waits for both.
func (f *fleet) profileCPU(c contender, cp *controllerProcess, n int) func() {
	dir := os.Getenv(sideBySideCPUProfileEnv)
	if dir == "" || cp.pprofURL == "" {
		return func() {}
	}
	var wg sync.WaitGroup
	for _, pr := range []struct{ kind, name string }{{"profile", "cpu"}, {"allocs", "allocs"}} {
		kind, name := pr.kind, pr.name
		path := filepath.Join(dir, fmt.Sprintf("%s-%d-%s.pprof", c.name(), n, name))
		url := fmt.Sprintf("%s/debug/pprof/%s?seconds=%d", cp.pprofURL, kind, sideBySideCPUProfileSeconds)
		wg.Go(func() {
			if err := fetchProfile(url, path); err != nil {
				f.b.Logf("%s profile: %v", name, err)
				return
			}
			fmt.Printf("P5 %s profile, %s, %d Rollouts: %s\n", name, c.name(), n, path)
		})
	}
	return wg.Wait
}

// fetchProfile writes the profile that url serves into path.
func fetchProfile(url, path string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, resp.Body)
	return errors.Join(err, out.Close())
}

// collect gathers the times of the workloads that reached step 1 and
// (with approved) completion.
func (r *sbsResult) collect(names []string, tr *releaseTracker, bumped, approved map[string]time.Time) {
	var first, last time.Time
	for _, name := range names {
		if s, ok := tr.step1(name); ok {
			r.step1 = append(r.step1, s.Sub(bumped[name]))
		}
		if first.IsZero() || bumped[name].Before(first) {
			first = bumped[name]
		}
		if d, ok := tr.next.get(name); ok && approved != nil {
			r.nextStep = append(r.nextStep, d.Sub(approved[name]))
		}
		if d, ok := tr.complete(name); ok && approved != nil {
			for _, p := range tr.namedCompleteParts() {
				at, _ := p.at.get(name)
				if r.completeBy == nil {
					r.completeBy = map[string][]time.Duration{}
				}
				r.completeBy[p.what] = append(r.completeBy[p.what], at.Sub(approved[name]))
			}
			r.complete = append(r.complete, d.Sub(approved[name]))
			if d.After(last) {
				last = d
			}
		}
	}
	if !last.IsZero() {
		r.wall = last.Sub(first)
	}
}

// firstOf is the earliest of the times.
func firstOf(at map[string]time.Time) time.Time {
	var first time.Time
	for _, t := range at {
		if first.IsZero() || t.Before(first) {
			first = t
		}
	}
	return first
}

// keepLog copies a controller's log to path once it stopped.
func keepLog(b *testing.B, log, path string) {
	data, err := os.ReadFile(log)
	if err == nil {
		err = os.MkdirAll(filepath.Dir(path), 0o755)
	}
	if err == nil {
		err = os.WriteFile(path, data, 0o644)
	}
	if err != nil {
		b.Errorf("keeping the log: %v", err)
	}
}

// applyImages changes the image of every Deployment, 8 in parallel as a
// GitOps tool applying one commit does, and returns when each change was
// sent.
func (f *fleet) applyImages(image string) map[string]time.Time {
	var mu sync.Mutex
	at := map[string]time.Time{}
	f.parallel(func(name string) {
		t := time.Now()
		f.applyYAML(f.opts.strategy.apply(deploymentYAML(name, image, f.opts.replicas)))
		mu.Lock()
		at[name] = t
		mu.Unlock()
	})
	return at
}

// waitRolled waits until every Deployment runs image on all its pods.
func (f *fleet) waitRolled(image string) {
	f.b.Helper()
	f.pollFleet("every Deployment on "+image, func(ctx context.Context) (int, error) {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(deploymentGVK.GroupVersion().WithKind("DeploymentList"))
		if err := f.c.List(ctx, list, client.InNamespace(ns)); err != nil {
			return 0, nil
		}
		rolled := 0
		for i := range list.Items {
			if deploymentRolled(&list.Items[i], image, int64(f.opts.replicas)) {
				rolled++
			}
		}
		return rolled, nil
	})
}

// measureFloor changes every Deployment's image with no controller running
// and returns, per Deployment, the time to its first pod of image ready
// and to all its pods on image.
func (f *fleet) measureFloor(image string) (first, all []time.Duration) {
	f.b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready, rolled := newFirstTimes(), newFirstTimes()
	f.watchKind(ctx, podGVK, func(pod *unstructured.Unstructured, at time.Time) {
		if podReadyWith(pod, image) {
			ready.mark(pod.GetLabels()["app"], at)
		}
	})
	f.watchKind(ctx, deploymentGVK, func(d *unstructured.Unstructured, at time.Time) {
		if deploymentRolled(d, image, int64(f.opts.replicas)) {
			rolled.mark(d.GetName(), at)
		}
	})
	bumped := f.applyImages(image)
	f.pollFleet("every Deployment rolled to "+image, func(context.Context) (int, error) {
		return min(ready.len(), rolled.len()), nil
	})
	for _, name := range f.names {
		at, _ := ready.get(name)
		done, _ := rolled.get(name)
		first = append(first, at.Sub(bumped[name]))
		all = append(all, done.Sub(bumped[name]))
	}
	return first, all
}

// waitReady waits until every Rollout of c is ready for a release.
func (f *fleet) waitReady(c contender) {
	f.b.Helper()
	f.pollFleet("every "+c.name()+" Rollout ready", func(ctx context.Context) (int, error) {
		ros := &unstructured.UnstructuredList{}
		ros.SetGroupVersionKind(c.rolloutGVK().GroupVersion().WithKind(c.rolloutGVK().Kind + "List"))
		ds := &unstructured.UnstructuredList{}
		ds.SetGroupVersionKind(deploymentGVK.GroupVersion().WithKind("DeploymentList"))
		if err := f.c.List(ctx, ros, client.InNamespace(ns)); err != nil {
			return 0, nil
		}
		if err := f.c.List(ctx, ds, client.InNamespace(ns)); err != nil {
			return 0, nil
		}
		byName := map[string]*unstructured.Unstructured{}
		for i := range ds.Items {
			byName[ds.Items[i].GetName()] = &ds.Items[i]
		}
		ready := 0
		for i := range ros.Items {
			if c.ready(&ros.Items[i], byName[ros.Items[i].GetName()]) {
				ready++
			}
		}
		return ready, nil
	})
}

// requests reads the controller's API request counter, in all and per
// HTTP method.
func (f *fleet) requests(cp *controllerProcess) (float64, map[string]float64) {
	f.b.Helper()
	v, byMethod, err := restRequests(cp.metricsURL)
	if err != nil {
		f.b.Fatal(err)
	}
	return v, byMethod
}

// reconciles reads the controller's reconcile counter, -1 when it serves
// none.
func (f *fleet) reconciles(cp *controllerProcess) float64 {
	f.b.Helper()
	v, err := metricSum(cp.metricsURL, "controller_runtime_reconcile_total")
	if err != nil {
		f.b.Fatal(err)
	}
	return v
}

// wakeups reads rollgate's rollgate_rollout_wakeups_total by source
// (empty before the first wakeup).
func (f *fleet) wakeups(cp *controllerProcess) map[string]float64 {
	f.b.Helper()
	families, err := scrape(cp.metricsURL)
	if err != nil {
		f.b.Fatal(err)
	}
	_, by := sumBy(families["rollgate_rollout_wakeups_total"], "source")
	return by
}

// rss reads a size of the controller's /proc/<pid>/status (VmRSS, VmHWM,
// RssAnon, RssFile) in MiB.
func (f *fleet) rss(cp *controllerProcess, field string) float64 {
	f.b.Helper()
	v, err := processStatus(cp.p.Pid(), field)
	if err != nil {
		f.b.Fatal(err)
	}
	return v
}

// cpu reads the controller's CPU time so far (user and system), in
// seconds.
func (f *fleet) cpu(cp *controllerProcess) float64 {
	f.b.Helper()
	v, err := processCPUSeconds(cp.p.Pid())
	if err != nil {
		f.b.Fatal(err)
	}
	return v
}

// heap reads the controller's Go heap in use in MiB.
func (f *fleet) heap(cp *controllerProcess) float64 {
	f.b.Helper()
	v, err := goHeapMiB(cp.metricsURL)
	if err != nil {
		f.b.Fatal(err)
	}
	return v
}

// waitAll waits until at(name) holds for every workload, calling tick
// (when set) between looks; after timeout it logs explain's summary and
// returns how many made it.
func (f *fleet) waitAll(at func(string) (time.Time, bool), timeout time.Duration, what string, cp *controllerProcess, explain func() string, tick func()) (missed string) {
	f.b.Helper()
	deadline := time.Now().Add(timeout)
	for {
		missing := 0
		for _, name := range f.names {
			if _, ok := at(name); !ok {
				missing++
			}
		}
		if missing == 0 {
			return ""
		}
		if err := cp.p.Exited(); err != nil {
			f.b.Fatal(err)
		}
		if time.Now().After(deadline) {
			f.b.Logf("%d of %d Rollouts not %s after %v: %s", missing, len(f.names), what, timeout, explain())
			return fmt.Sprintf("%d of %d %s after %v", len(f.names)-missing, len(f.names), what, timeout)
		}
		if tick != nil {
			tick()
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// releaseTracker timestamps, from watches, what each workload shows
// during a release to image.
type releaseTracker struct {
	c     contender
	rt    router
	image string
	// gate: the Rollout at its step-1 gate (with revs[name] the revision
	// to approve); pod: the first pod of image ready; route: the route at
	// 20%; done: the Rollout done; rolled: the Deployment wholly on image;
	// back: the route on the stable Service alone again; next: the
	// Rollout past its gate (contender.passed).
	gate, pod, route, done, rolled, back, next *firstTimes
	// timeline follows the first workload.
	timeline *timeline
	mu       sync.Mutex
	revs     map[string]string
	last     map[string]string
	objs     map[string]*unstructured.Unstructured
}

// latest is the last Rollout name the watch showed, or nil.
func (t *releaseTracker) latest(name string) *unstructured.Unstructured {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.objs[name]
}

// trackRelease starts the watches before the images change.
func (f *fleet) trackRelease(ctx context.Context, c contender, rt router, image string) *releaseTracker {
	t := &releaseTracker{
		c: c, rt: rt, image: image, revs: map[string]string{}, last: map[string]string{}, objs: map[string]*unstructured.Unstructured{},
		gate: newFirstTimes(), pod: newFirstTimes(), route: newFirstTimes(),
		done: newFirstTimes(), rolled: newFirstTimes(), back: newFirstTimes(), next: newFirstTimes(),
		timeline: newTimeline(f.names[0]),
	}
	t.timeline.watch(ctx, f)
	f.watchKind(ctx, c.rolloutGVK(), func(ro *unstructured.Unstructured, at time.Time) {
		name := ro.GetName()
		t.timeline.rollout(ro, at)
		t.mu.Lock()
		t.last[name] = summarize(ro)
		t.objs[name] = ro
		t.mu.Unlock()
		if rev, ok := c.gated(ro); ok {
			t.mu.Lock()
			if _, seen := t.revs[name]; !seen {
				t.revs[name] = rev
			}
			t.mu.Unlock()
			t.gate.mark(name, at)
		}
		if rev, ok := t.revision(name); ok {
			if _, gated := t.gate.get(name); gated && c.done(ro, rev) {
				t.done.mark(name, at)
			}
			if _, gated := t.gate.get(name); gated && c.passed(ro, rev) {
				t.next.mark(name, at)
			}
		}
	})
	f.watchKind(ctx, podGVK, func(pod *unstructured.Unstructured, at time.Time) {
		if podReadyWith(pod, image) {
			t.pod.mark(pod.GetLabels()["app"], at)
		}
	})
	rt.watchShares(ctx, f, func(s routeShare, at time.Time) {
		t.timeline.share(s, at)
		if s.share == 20 {
			t.route.mark(s.workload, at)
		}
		if _, routed := t.route.get(s.workload); routed && s.share == 0 {
			t.back.mark(s.workload, at)
		}
	})
	f.watchKind(ctx, deploymentGVK, func(d *unstructured.Unstructured, at time.Time) {
		t.timeline.deployment(d, at)
		if _, gated := t.gate.get(d.GetName()); gated && deploymentRolled(d, image, sbsReplicas) {
			t.rolled.mark(d.GetName(), at)
		}
	})
	return t
}

func (t *releaseTracker) revision(name string) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	rev, ok := t.revs[name]
	return rev, ok
}

// latest is the last of the times of name in every one of ts, or false
// while one is missing.
func latest(name string, ts ...*firstTimes) (time.Time, bool) {
	var last time.Time
	for _, t := range ts {
		at, ok := t.get(name)
		if !ok {
			return time.Time{}, false
		}
		if at.After(last) {
			last = at
		}
	}
	return last, true
}

// step1 is when name reached step 1: at its gate, a new pod ready and 20%
// of the route on it, whichever came last.
func (t *releaseTracker) step1(name string) (time.Time, bool) {
	return latest(name, t.step1Parts()...)
}

// complete is when name finished: the Rollout done, the Deployment wholly
// on the new image and the route back on the stable Service alone.
func (t *releaseTracker) complete(name string) (time.Time, bool) {
	return latest(name, t.completeParts()...)
}

// explain summarizes, for a failure, how many workloads have each part
// and the last statuses the Rollouts showed, with their counts.
func (t *releaseTracker) explain() string {
	var b strings.Builder
	for _, p := range []struct {
		what string
		ts   *firstTimes
	}{{"at the gate", t.gate}, {"new pod ready", t.pod}, {"route at 20%", t.route}, {"done", t.done}, {"Deployment rolled", t.rolled}, {"route back on stable", t.back}} {
		fmt.Fprintf(&b, "\n  %s: %d", p.what, p.ts.len())
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	count, example := map[string]int{}, map[string]string{}
	for name, s := range t.last {
		count[s]++
		example[s] = name
	}
	for s, n := range count {
		fmt.Fprintf(&b, "\n  %d like %s: %s", n, example[s], s)
	}
	return b.String()
}

// summarize is the status of a Rollout of either kind, for failures.
func summarize(ro *unstructured.Unstructured) string {
	st, _, _ := unstructured.NestedMap(ro.Object, "status")
	delete(st, "conditions")
	return fmt.Sprint(st)
}

// checkStep1 fails unless every workload, at step 1, has exactly one pod
// of the new image ready and 20% of its route's weight on the canary.
func (f *fleet) checkStep1(t *releaseTracker) {
	f.b.Helper()
	ctx := context.Background()
	pods := &unstructured.UnstructuredList{}
	pods.SetGroupVersionKind(podGVK.GroupVersion().WithKind("PodList"))
	if err := f.c.List(ctx, pods, client.InNamespace(ns)); err != nil {
		f.b.Fatal(err)
	}
	newReady := map[string]int{}
	for i := range pods.Items {
		if podReadyWith(&pods.Items[i], t.image) {
			newReady[pods.Items[i].GetLabels()["app"]]++
		}
	}
	shares := t.rt.shares(ctx, f)
	for _, name := range f.names {
		if share := shares[name]; (movesTraffic(t.c, t.rt) && share != 20) || newReady[name] != 1 {
			f.b.Fatalf("%s at step 1: %d new pods ready (want 1), %.0f%% of the %s route on the canary (want 20%%)", name, newReady[name], share, t.rt)
		}
	}
}

// printSideBySideFigures prints r one figure per line.
func printSideBySideFigures(r sbsResult) {
	row := func(what string, v float64, unit string) {
		fmt.Printf("P5 side by side, %s, %d Rollouts, %s: %.*f %s\n", r.controller, r.n, what, decimals(v), v, unit)
	}
	row("load average at start", r.load, "")
	fmt.Printf("P5 side by side, %s, %d Rollouts, router: %s%s\n", r.controller, r.n, r.router, map[bool]string{true: "", false: " (moves no traffic)"}[r.movesTraffic])
	fmt.Printf("P5 side by side, %s, %d Rollouts, Deployment strategy: %s\n", r.controller, r.n, r.strategy)
	printAuditCounts(r)
	if r.incomplete != "" {
		fmt.Printf("P5 side by side, %s, %d Rollouts, incomplete: %s\n", r.controller, r.n, r.incomplete)
	}
	for _, p := range []struct {
		what string
		ds   []time.Duration
	}{
		{"floor (plain Deployment, first new pod ready)", r.floor}, {"time to step 1", r.step1},
		{"floor (plain Deployment, every pod new)", r.floorDone}, {"approval to the next step", r.nextStep},
		{"approval to completion", r.complete},
	} {
		row(p.what+" p50", percentile(p.ds, 50).Seconds(), "s")
		row(p.what+" p95", percentile(p.ds, 95).Seconds(), "s")
		row(p.what+" max", percentile(p.ds, 100).Seconds(), "s")
	}
	for _, what := range slices.Sorted(maps.Keys(r.completeBy)) {
		row("approval to "+what+" p50", percentile(r.completeBy[what], 50).Seconds(), "s")
	}
	row("first image change to last completion", r.wall.Seconds(), "s")
	row("approvals sent again (the Rollout still waited 5 s after one)", float64(r.reapproved), "approvals")
	row("API requests from image change to completion", r.requests, "requests")
	row("API requests per Rollout from image change to completion", r.requests/float64(r.n), "requests")
	methods := slices.Sorted(maps.Keys(r.byMethod))
	for _, m := range methods {
		row("API requests from image change to completion, "+m, r.byMethod[m], "requests")
	}
	row("API requests to take the fleet over", r.adopt, "requests")
	row("controller CPU from its start to every Rollout ready", r.cpuAdopt, "s")
	row("controller CPU from image change to completion", r.cpuRelease, "s")
	row("controller CPU per Rollout from image change to completion", 1000*r.cpuRelease/float64(r.n), "ms")
	if r.reconciles >= 0 {
		row("controller reconciles per Rollout from image change to completion", r.reconciles/float64(r.n), "reconciles")
	}
	for _, source := range slices.Sorted(maps.Keys(r.wakeups)) {
		row("controller wakeups per Rollout from image change to completion, by "+source, r.wakeups[source]/float64(r.n), "wakeups")
	}
	row("controller RSS with every Rollout ready", r.rssRest, "MiB")
	row("controller peak RSS", r.rssPeak, "MiB")
	row("controller RSS after the release, anonymous (heap, stacks)", r.anonDone, "MiB")
	row("controller RSS after the release, pages of the binary", r.fileDone, "MiB")
	row("controller Go heap in use with every Rollout ready", r.heapRest, "MiB")
	row("controller Go heap in use after the release", r.heapDone, "MiB")
}

// note is " (incomplete: …)" when set.
func note(incomplete string) string {
	if incomplete == "" {
		return ""
	}
	return " (incomplete: " + incomplete + ")"
}

// printSideBySideTable prints the results as one table, every line
// starting with "P5 ".
func printSideBySideTable(rs []sbsResult) {
	if len(rs) == 0 {
		return
	}
	fmt.Println("P5 | N | controller | router | load | floor: first new pod p50 / p95 / max | step 1 p50 / p95 / max | step 1 p50 / floor p50 | floor: every pod new p50 / p95 / max | approval to the next step p50 / p95 / max | approval to completion p50 / p95 / max | approvals sent again | image change to last completion | API requests (per Rollout) | CPU image change to completion | RSS ready / peak |")
	fmt.Println("P5 |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	s := func(ds []time.Duration) string {
		return fmt.Sprintf("%.2f / %.2f / %.2f s", percentile(ds, 50).Seconds(), percentile(ds, 95).Seconds(), percentile(ds, 100).Seconds())
	}
	for _, r := range rs {
		rt := string(r.router)
		if !r.movesTraffic {
			rt += " (no traffic)"
		}
		if r.strategy != "" {
			rt += ", " + r.strategy.String()
		}
		fmt.Printf("P5 | %d | %s | %s | %.1f | %s | %s | %.2fx | %s | %s | %s | %d | %.1f s | %.0f (%.1f) | %.1f s | %.0f / %.0f MiB |\n",
			r.n, r.controller+note(r.incomplete), rt, r.load, s(r.floor), s(r.step1), percentile(r.step1, 50).Seconds()/max(percentile(r.floor, 50).Seconds(), 1e-9),
			s(r.floorDone), s(r.nextStep), s(r.complete), r.reapproved, r.wall.Seconds(), r.requests, r.requests/float64(r.n), r.cpuRelease, r.rssRest, r.rssPeak)
	}
}
