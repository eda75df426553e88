package bench

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler"
	"github.com/rollgate/rollgate/reconciler/metrics"
	"github.com/rollgate/rollgate/test/inproc"
	"github.com/rollgate/rollgate/test/kwok"
	"github.com/rollgate/rollgate/test/repo"
	"github.com/rollgate/rollgate/test/rig"
)

const (
	// ns holds every benchmarked workload.
	ns = "bench"
	// fluxManager is the field manager Flux's kustomize-controller applies
	// with: the benchmark changes images the way Flux does.
	fluxManager = "kustomize-controller"
	// defaultReplicas is the size of every Deployment unless
	// fleetOptions.replicas says otherwise; step 1 releases one pod.
	defaultReplicas = 4
	// applyWorkers apply manifests in parallel, as a GitOps tool applying
	// one large commit does.
	applyWorkers = 8
)

// fleet is a kwok cluster with n Deployments, each under its own Rollout,
// and the rollgate controller running in-process.
type fleet struct {
	b       *testing.B
	cluster *kwok.Cluster
	c       client.Client
	scheme  *runtime.Scheme
	names   []string
	stop    func()
	// stable is each Rollout's stable revision before the next release.
	stable map[string]string
	// heapBase is the process heap before the controller started (MiB).
	heapBase float64
	opts     fleetOptions
	// nsOf is each workload's namespace (ns unless opts.perNamespace).
	nsOf map[string]string
	// apiCalls counts the controller's API requests by verb and resource.
	apiCalls *requestCounter
	// audited says the cluster keeps an audit log (cluster.AuditLog()).
	audited bool
	// wave is the watch of the release in progress (releaseSomeToGate),
	// nil between releases.
	wave atomic.Pointer[gateWatch]
}

// fleetOptions change the fleet; the zero value is the plain fleet.
type fleetOptions struct {
	// gitURL, when set, is the Git repository the Rollouts' spec.git
	// names (through the Repository "app-repo"), holding each Rollout's
	// manifest at apps/<name>/rollout.yaml; interval is its fetch interval.
	gitURL   string
	interval time.Duration
	// gitWebhookPort, when set, is where the controller serves Git push
	// webhooks.
	gitWebhookPort int
	// replicas is the size of every Deployment; 0 means defaultReplicas.
	replicas int
	// strategy is the rolling update of the Deployments of P5's image
	// changes ("": the default).
	strategy sbsStrategy
	// perNamespace, when set, spreads the workloads over namespaces
	// bench-000, bench-001, … of perNamespace each instead of putting them
	// all in ns.
	perNamespace int
	// clientQPS is the cluster's kwok.Options.ClientQPS (0: kwok's
	// defaults).
	clientQPS int
}

// startFleet brings up the cluster and the controller, then n released
// workloads, and waits until every Rollout is Healthy.
func startFleet(b *testing.B, n int) *fleet {
	b.Helper()
	return startFleetWith(b, n, fleetOptions{})
}

// startFleetWith is startFleet with options.
func startFleetWith(b *testing.B, n int, opts fleetOptions) *fleet {
	b.Helper()
	start := time.Now()
	scheme := rig.NewScheme(b)
	// kwok's fake nodes take 110 pods each.
	if opts.replicas == 0 {
		opts.replicas = defaultReplicas
	}
	replicas := opts.replicas
	cl := kwok.Start(b, kwok.Options{Nodes: max(3, n*replicas/80+1), Scheme: scheme, ClientQPS: opts.clientQPS})
	f := &fleet{b: b, cluster: cl, c: cl.Client, scheme: scheme, stable: map[string]string{}, opts: opts}
	f.applyFiles(filepath.Join(repo.Root(), "charts", "rollgate", "crds"))
	f.applyFiles(repo.HTTPRouteCRD("standard"))
	f.ensureNamespace("rollgate-system")
	f.ensureNamespace(ns)
	f.heapBase = heapMiB()
	f.startController()
	b.Cleanup(f.stopController)
	f.nameFleet(n)
	for _, space := range f.namespaces() {
		f.ensureNamespace(space)
	}
	if opts.gitURL != "" {
		f.applyYAML(repositoryYAML(opts.gitURL, opts.interval))
	}
	f.parallel(func(name string) {
		f.applyIn(f.namespace(name), appYAML(name, "app:1.0", replicas)+f.rolloutYAML(name))
	})
	f.waitHealthy(max(5*time.Minute, time.Duration(n)*300*time.Millisecond), nil)
	b.Logf("fleet of %d rollouts (%d pods) healthy %v after start", n, n*replicas, time.Since(start).Round(time.Second))
	return f
}

// nameFleet names n workloads app-000, app-001, … and, with
// opts.perNamespace, gives each its namespace.
func (f *fleet) nameFleet(n int) {
	f.nsOf = map[string]string{}
	for i := range n {
		name := fmt.Sprintf("app-%03d", i)
		f.names = append(f.names, name)
		f.nsOf[name] = ns
		if f.opts.perNamespace > 0 {
			f.nsOf[name] = fmt.Sprintf("%s-%03d", ns, i/f.opts.perNamespace)
		}
	}
}

// namespace is the namespace of workload name.
func (f *fleet) namespace(name string) string {
	if space, ok := f.nsOf[name]; ok {
		return space
	}
	return ns
}

// namespaces are the fleet's namespaces, in order.
func (f *fleet) namespaces() []string {
	seen := map[string]bool{}
	var out []string
	for _, name := range f.names {
		if space := f.namespace(name); !seen[space] {
			seen[space] = true
			out = append(out, space)
		}
	}
	return out
}

// listNamespace is the namespace the fleet's lists and watches cover: ns,
// or every namespace when the fleet is spread (items outside the fleet's
// namespaces are skipped by inFleet).
func (f *fleet) listNamespace() string {
	if f.opts.perNamespace > 0 {
		return ""
	}
	return ns
}

// inFleet reports whether obj is one of the fleet's workloads or Rollouts.
func (f *fleet) inFleet(obj client.Object) bool {
	space, ok := f.nsOf[obj.GetName()]
	if !ok {
		return obj.GetNamespace() == ns
	}
	return obj.GetNamespace() == space
}

// listPage is how many objects one list request returns: lists of 10,000
// Rollouts in one response would cost the API server and this process
// (whose memory the benchmark measures) tens of MiB each.
const listPage = 500

// eachRollout calls fn for every Rollout of the fleet, listing page by
// page.
func (f *fleet) eachRollout(ctx context.Context, fn func(ro *v1alpha1.Rollout)) error {
	return f.eachPage(ctx, func() client.ObjectList { return &v1alpha1.RolloutList{} }, func(l client.ObjectList) {
		list := l.(*v1alpha1.RolloutList)
		for i := range list.Items {
			if f.inFleet(&list.Items[i]) {
				fn(&list.Items[i])
			}
		}
	})
}

// eachDeployment calls fn for every Deployment of the fleet, listing page
// by page.
func (f *fleet) eachDeployment(ctx context.Context, fn func(d *appsv1.Deployment)) error {
	return f.eachPage(ctx, func() client.ObjectList { return &appsv1.DeploymentList{} }, func(l client.ObjectList) {
		list := l.(*appsv1.DeploymentList)
		for i := range list.Items {
			if f.inFleet(&list.Items[i]) {
				fn(&list.Items[i])
			}
		}
	})
}

// eachPage lists the fleet's namespace listPage objects at a time, each
// page into a list newList makes, and gives every page to fn.
func (f *fleet) eachPage(ctx context.Context, newList func() client.ObjectList, fn func(client.ObjectList)) error {
	cont := ""
	for {
		list := newList()
		if err := f.c.List(ctx, list, client.InNamespace(f.listNamespace()), client.Limit(listPage), client.Continue(cont)); err != nil {
			return err
		}
		fn(list)
		if cont = list.GetContinue(); cont == "" {
			return nil
		}
	}
}

// appYAML is a workload: its Deployment, Service and HTTPRoute. The
// Service is headless (and so is the canary Service rollgate copies from
// it): kwok's API server keeps the default Service range 10.0.0.0/24, whose
// 254 addresses do not hold 200 Services and their 200 canary Services.
func appYAML(name, image string, replicas int) string {
	return strings.Replace(rig.App(ns, name, image, replicas), "kind: Service\nmetadata: {name: "+name+", namespace: "+ns+"}\nspec:\n", "kind: Service\nmetadata: {name: "+name+", namespace: "+ns+"}\nspec:\n  clusterIP: None\n", 1)
}

// deploymentYAML is the Deployment of a workload running image.
func deploymentYAML(name, image string, replicas int) string {
	return rig.Deployment(ns, name, image, replicas)
}

// repositoryYAML is the Repository "app-repo" of url, fetched every
// interval while a gate waits.
func repositoryYAML(url string, interval time.Duration) string {
	return fmt.Sprintf(`
apiVersion: rollgate.dev/v1alpha1
kind: Repository
metadata: {name: app-repo, namespace: %s}
spec: {url: %q, branch: main, interval: %s, status: {window: 10s}}
`, ns, url, interval)
}

// rolloutYAML is rolloutYAML of name, with spec.git when the fleet has a
// Git repository.
func (f *fleet) rolloutYAML(name string) string {
	if f.opts.gitURL != "" {
		return gitRolloutYAML(name)
	}
	return rolloutYAML(name)
}

// rolloutYAML is the Rollout of one workload: batch 1 is one pod and 20%
// of traffic behind a manual gate, batch 2 half the pods and 50% behind
// another.
func rolloutYAML(name string) string {
	return "\n---" + rig.Rollout{Name: name, Namespace: ns, Steps: []string{
		`{traffic: "20%", replicas: 1, pause: {}}`,
		`{traffic: "50%", replicas: "50%", pause: {}}`,
		`{traffic: "100%", replicas: "100%"}`,
	}}.YAML()
}

// parallel runs fn for every workload name on applyWorkers goroutines.
func (f *fleet) parallel(fn func(name string)) {
	f.parallelOver(f.names, fn)
}

// parallelOver runs fn for every name of all on applyWorkers goroutines.
func (f *fleet) parallelOver(all []string, fn func(name string)) {
	names := make(chan string)
	var wg sync.WaitGroup
	for range applyWorkers {
		wg.Go(func() {
			for name := range names {
				fn(name)
			}
		})
	}
	for _, name := range all {
		names <- name
	}
	close(names)
	wg.Wait()
}

// waitHealthy waits until every Rollout is Healthy and Ready, its
// Deployment is covered by the webhook and (when want is set) its stable
// revision differs from want's entry; it records the stable revisions.
func (f *fleet) waitHealthy(timeout time.Duration, unlike map[string]string) {
	f.b.Helper()
	start, lastReport := time.Now(), time.Now()
	f.poll(timeout, "all Rollouts healthy", func(ctx context.Context) (bool, error) {
		stable := map[string]string{}
		seen := 0
		err := f.eachRollout(ctx, func(ro *v1alpha1.Rollout) {
			seen++
			st := ro.Status
			if st.Phase != v1alpha1.PhaseHealthy || st.StableRevision == "" || st.ObservedGeneration != ro.Generation ||
				(unlike != nil && st.StableRevision == unlike[ro.Name]) {
				return
			}
			stable[ro.Name] = st.StableRevision
		})
		if err != nil {
			return false, nil
		}
		// Large fleets take many minutes: say how far they are.
		if len(f.names) > 1000 && time.Since(lastReport) > time.Minute {
			lastReport = time.Now()
			fmt.Printf("setup: %d of %d Rollouts healthy (%d exist) after %v\n", len(stable), len(f.names), seen, time.Since(start).Round(time.Second))
		}
		if len(stable) != len(f.names) {
			return false, nil
		}
		maps.Copy(f.stable, stable)
		return f.allCovered(ctx), nil
	})
}

// allCovered reports whether every Deployment carries the label that makes
// the admission webhook hold it on the next image change, and has all its
// pods ready.
func (f *fleet) allCovered(ctx context.Context) bool {
	covered, seen := true, 0
	err := f.eachDeployment(ctx, func(d *appsv1.Deployment) {
		seen++
		if d.Labels[v1alpha1.LabelControlled] == "" || d.Status.ReadyReplicas != int32(f.opts.replicas) {
			covered = false
		}
	})
	return err == nil && covered && seen == len(f.names)
}

// poll polls cond every second (1 ms per workload for fleets over 1,000)
// until it holds or timeout passes: the lists it runs load the API server
// the benchmark measures, so not more often.
func (f *fleet) poll(timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	f.b.Helper()
	every := max(time.Second, time.Duration(len(f.names))*time.Millisecond)
	if _, err := rig.WaitEvery(context.Background(), every, timeout, what, func(ctx context.Context) (bool, string, error) {
		ok, err := cond(ctx)
		return ok, "", err
	}); err != nil {
		f.b.Fatal(err)
	}
}

// fleetWait is how long a wait for the whole fleet may take: 5 minutes,
// or 2 s per workload in a larger fleet. The simulated cluster's
// controller manager rolls Deployments at a rate of its own (its
// client-side limit), so rolling every Deployment at once takes time in
// proportion to their number (the floor of P5 took 250 s at 200).
func (f *fleet) fleetWait() time.Duration {
	return max(5*time.Minute, time.Duration(len(f.names))*2*time.Second)
}

// pollFleet polls count until it reaches the size of the fleet, within
// fleetWait; when it does not, it fails with how many it reached.
func (f *fleet) pollFleet(what string, count func(ctx context.Context) (int, error)) {
	f.b.Helper()
	every := max(time.Second, time.Duration(len(f.names))*time.Millisecond)
	if _, err := rig.WaitEvery(context.Background(), every, f.fleetWait(), what, func(ctx context.Context) (bool, string, error) {
		n, err := count(ctx)
		return n == len(f.names), fmt.Sprintf("%d of %d", n, len(f.names)), err
	}); err != nil {
		f.b.Fatal(err)
	}
}

func (f *fleet) ensureNamespace(name string) {
	obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := f.c.Create(context.Background(), obj); err != nil && !strings.Contains(err.Error(), "already exists") {
		f.b.Fatal(err)
	}
}

// applyFiles applies every object of a YAML file or folder and waits for
// CRDs to be established.
func (f *fleet) applyFiles(path string) {
	f.b.Helper()
	files := []string{path}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		files, _ = filepath.Glob(filepath.Join(path, "*.yaml"))
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.b.Fatal(err)
		}
		f.applyYAML(string(data))
	}
	f.poll(30*time.Second, "CRDs established", func(ctx context.Context) (bool, error) {
		var crds apiextensionsv1.CustomResourceDefinitionList
		if err := f.c.List(ctx, &crds); err != nil {
			return false, nil
		}
		for _, crd := range crds.Items {
			if !established(&crd) {
				return false, nil
			}
		}
		return true, nil
	})
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}

// applyYAML server-side applies every document of docs as Flux would.
func (f *fleet) applyYAML(docs string) {
	f.applyIn("", docs)
}

// applyIn is applyYAML with every namespaced document moved to namespace
// (none: as written).
func (f *fleet) applyIn(namespace, docs string) {
	objs, err := rig.DecodeAll(docs)
	if err != nil {
		f.b.Error(err)
		return
	}
	for _, u := range objs {
		if namespace != "" && u.GetNamespace() != "" {
			u.SetNamespace(namespace)
		}
		err := f.c.Patch(context.Background(), u, client.Apply, client.FieldOwner(fluxManager), client.ForceOwnership)
		if err != nil {
			f.b.Errorf("apply %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
}

// concurrentEnv sets the controller's concurrent reconciles (default 4,
// `rollgate controller --concurrent`'s default).
const concurrentEnv = "ROLLGATE_BENCH_CONCURRENT"

// concurrentFromEnv reads concurrentEnv (default 4).
func concurrentFromEnv(b *testing.B) int {
	v := os.Getenv(concurrentEnv)
	if v == "" {
		return 4
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a number of workers, such as 8", concurrentEnv, v)
	}
	return n
}

// startController runs the controller in-process with the production
// defaults (4 concurrent reconciles unless concurrentEnv says otherwise, client-side rate limiting off as
// ctrl.GetConfig sets it in a cluster), its webhook on a loopback URL and
// its logs discarded.
func (f *fleet) startController() {
	f.b.Helper()
	cfg := *f.cluster.RESTConfig
	cfg.QPS, cfg.Burst = -1, 0
	f.apiCalls = &requestCounter{count: map[string]float64{}}
	cfg.Wrap(f.apiCalls.wrap)
	// The event recorder logs through ctrl.Log, which warns with a stack
	// trace when no logger was ever set.
	discard := zap.New(zap.WriteTo(io.Discard))
	ctrl.SetLogger(discard)
	// Its Prometheus metrics too, as cmd/rollgate-controller has them:
	// their series per Rollout are part of its memory, and scraped as a
	// Prometheus would (the gauges make their series when scraped, so a
	// scrape's garbage is the controller's too).
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		f.b.Fatal(err)
	}
	scrapeCtx, stopScrapes := context.WithCancel(context.Background())
	go scrapeEvery(scrapeCtx, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), scrapeInterval)
	c, err := inproc.Run(inproc.Config{REST: &cfg, Manager: reconciler.ManagerOptions{Logger: discard, Restartable: true}, Options: reconciler.Options{
		Namespace: "rollgate-system", Concurrent: concurrentFromEnv(f.b), LuaConfigMap: "rollgate-lua",
		WebhookSecret: "rollgate-webhook-cert", GitWebhookAddr: f.gitWebhookAddr(), GitDefaultInterval: time.Minute,
		Metrics: m,
	}})
	if err != nil {
		f.b.Fatal(err)
	}
	f.stop = func() {
		stopScrapes()
		if err := c.Stop(); err != nil {
			f.b.Errorf("controller: %v", err)
		}
	}
	if _, err := c.Ready(context.Background(), f.c, 30*time.Second); err != nil {
		f.b.Fatal(err)
	}
}

func (f *fleet) gitWebhookAddr() string {
	if f.opts.gitWebhookPort == 0 {
		return "0"
	}
	return fmt.Sprintf("127.0.0.1:%d", f.opts.gitWebhookPort)
}

func (f *fleet) stopController() {
	if f.stop != nil {
		f.stop()
		f.stop = nil
	}
}

// scrapeInterval is how often the fleet's controller is scraped: a
// common setting (kube-prometheus' global interval; Prometheus' own
// default is 1 min).
const scrapeInterval = 30 * time.Second

// scrapeEvery serves a scrape of h every interval until ctx ends, the
// response encoded as for Prometheus and then dropped.
func scrapeEvery(ctx context.Context, h http.Handler, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/metrics", nil)
		req.Header.Set("Accept", "text/plain;version=0.0.4")
		h.ServeHTTP(&discardResponse{header: http.Header{}}, req)
	}
}

// discardResponse is an http.ResponseWriter that keeps nothing.
type discardResponse struct{ header http.Header }

func (d *discardResponse) Header() http.Header         { return d.header }
func (d *discardResponse) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardResponse) WriteHeader(int)             {}
