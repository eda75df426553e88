package realtraffic

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/rig"
)

// The cost over a native rollout (P6 in docs/benchmarks.md).
const (
	// costPods is the size of both Deployments.
	costPods = 10
	// costPairs is how many native / rollgate pairs run, interleaved.
	costPairs = 5
	// costRunLimit bounds one run, from the image change to the
	// workload reported complete.
	costRunLimit = 5 * time.Minute
	// costPairsEnv overrides costPairs (a shorter run while changing the
	// benchmark).
	costPairsEnv = "ROLLGATE_P6_PAIRS"
	// costWeightsEnv=1 runs rollgate's side with costWeightSteps instead
	// of costRollout.
	costWeightsEnv = "ROLLGATE_P6_WEIGHTS"
	// costSettle separates two runs: the previous run's tail (the last
	// pod status writes, rollgate's write to Git) stays out of the next
	// run's count of API requests.
	costSettle = 5 * time.Second
)

// costStrategy is both Deployments' update strategy: a quarter of the
// pods surged at a time, and no pod taken away before its replacement is
// ready (maxUnavailable 0, not the default 25%), so that no request has to
// find a pod that is going.
const costStrategy = `  strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: "25%", maxUnavailable: 0}}
`

// costRollout is what a user writes for four batches with no pause and no
// gate: a quarter of the pods per step. It routes no traffic: with no
// pause nothing holds a share of traffic on the new pods, so the
// Service's selector spreads the requests over old and new pods, as it
// does in the native rollout.
func costRollout() string {
	return rig.Rollout{
		Name: "echoserver", Namespace: "demo", GitPath: rolloutPath, WithoutTraffic: true,
		Steps: []string{`{replicas: "25%"}`, `{replicas: "50%"}`, `{replicas: "75%"}`, `{replicas: "100%"}`},
	}.YAML()
}

// costWeightSteps are costRollout's steps with traffic weights, for
// rollout() (which routes them through the HTTPRoute): what a user who
// wants each batch's share of traffic set by the gateway writes.
const costWeightSteps = `
      - {traffic: "25%", replicas: "25%"}
      - {traffic: "50%", replicas: "50%"}
      - {traffic: "75%", replicas: "75%"}
      - {traffic: "100%", replicas: "100%"}`

// costKind is the name of rollgate's runs: "rollgate", or with weights
// "rollgate with traffic weights" (a name the summary's P6 goals do not
// read: they hold for the default Rollout).
func costKind(weights bool) string {
	if weights {
		return "rollgate with traffic weights"
	}
	return "rollgate"
}

// costWorkload is the application's Deployment (named name) and Service
// at costPods pods, costStrategy, image and run: every run sets the pod's
// RUN variable too, so that each run is a new revision even where the
// image cycles back (v1, v2, v3, v4, v1, ...).
func costWorkload(name, image string, run int) string {
	doc := workload(image)
	for _, r := range []struct{ old, new string }{
		{"  replicas: 5\n", fmt.Sprintf("  replicas: %d\n", costPods) + costStrategy},
		{"        env:\n", fmt.Sprintf("        env:\n        - {name: RUN, value: \"%d\"}\n", run)},
	} {
		if !strings.Contains(doc, r.old) {
			panic(fmt.Sprintf("workload() no longer declares %q", r.old))
		}
		doc = strings.Replace(doc, r.old, r.new, 1)
	}
	return strings.ReplaceAll(doc, "echoserver", name)
}

// nativeRoute sends /native through the package's Gateway to Deployment
// native, which no Rollout names.
const nativeRoute = `
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: native, namespace: demo}
spec:
  parentRefs: [{name: public}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /native}}]
    backendRefs: [{name: native, port: 80}]
`

// costRun is one measured update.
type costRun struct {
	kind string // "native", or rollgate's (costKind)
	n    int
	// pods is the image change to every pod Ready on the new revision
	// and no old pod left (terminating ones included); complete is the
	// image change to the workload's controller (and the Rollout, for
	// rollgate) reporting the update complete.
	pods, complete time.Duration
	// api is the API server's requests during the run by verb and
	// resource ("PATCH pods/status"), without the benchmark's own.
	api map[string]int
	// newReady is the image change to every pod Ready on the new
	// revision, old ones perhaps still shutting down.
	newReady time.Duration
	// requests and failed are the load's answers from the image change
	// until the run is complete.
	requests, failed int
	errs             map[string]int
	// timeline is every change of the observed moment, in seconds after
	// the image change.
	timeline []string
}

func (r costRun) apiTotal() int {
	n := 0
	for _, v := range r.api {
		n += v
	}
	return n
}

// BenchmarkNativeCost: the cost of releasing through rollgate over the
// Deployment controller's own rolling update, on the real node. Two
// Deployments of costPods pods (maxSurge 25%, maxUnavailable 0) of the
// sample app behind the same Traefik: "native" alone, "echoserver"
// under a Rollout of four steps (25%, 50%, 75%, 100% of the pods; no
// pause, no gate, no traffic routing). Five pairs, interleaved (native,
// rollgate, native, ...); each run changes the image as Flux applies a
// commit, under 150 requests per second through Traefik to that
// Deployment. Per run: the time from the image change to every pod Ready
// on the new version with no old pod left, the API server's requests
// (apiserver_request_total, delta by verb, less the benchmark's own),
// and the load's failed requests. Lines start with "P6 ".
func BenchmarkNativeCost(b *testing.B) {
	for range b.N {
		runNativeCost(b)
	}
}

func runNativeCost(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 35*time.Minute)
	defer cancel()
	weights := false
	switch v := os.Getenv(costWeightsEnv); v {
	case "":
	case "1":
		weights = true
	default:
		b.Fatalf("%s=%q: want 1 (the Rollout moves traffic weights) or nothing", costWeightsEnv, v)
	}
	ro := costRollout()
	if weights {
		ro = rollout(costWeightSteps)
	}
	w := newWorldOf(b, ctx, worldOptions{
		rollout: ro,
		app: func(image string, port int) string {
			// The application with its Deployment at costPods pods.
			route, ok := strings.CutPrefix(app(image, port), workload(image))
			if !ok {
				panic("app() no longer starts with workload()")
			}
			return costWorkload("echoserver", image, 0) + route
		},
		extra: func(*world) string { return costWorkload("native", "localhost/verserver:v1", 0) + "---" + nativeRoute },
	})
	m := newCostMeter(b, w)
	kinds := []string{"native", costKind(weights)}
	for _, kind := range kinds {
		w.Until(ctx, 2*time.Minute, kind+": steady at v1, run 0", func() (bool, string) { return m.steady(ctx, kind, 0) })
	}
	if err := m.checkGatewayAt(costURL(w, "native")); err != nil {
		b.Fatal(err)
	}
	idle := m.background(ctx, 15*time.Second)
	fmt.Printf("P6 native cost, background API requests with nothing moving: %.1f per s (%s)\n", idle.perSecond, verbs(idle.api))

	pairs := costPairs
	if v := os.Getenv(costPairsEnv); v != "" {
		var err error
		if pairs, err = strconv.Atoi(v); err != nil || pairs < 1 {
			b.Fatalf("%s=%q: want a number of pairs, 1 or more", costPairsEnv, v)
		}
	}
	var runs []costRun
	images := []string{"v2", "v3", "v4", "v1"}
	for n := 1; n <= pairs; n++ {
		for _, kind := range kinds {
			time.Sleep(costSettle)
			r := m.run(ctx, kind, n, "localhost/verserver:"+images[(n-1)%len(images)])
			fmt.Printf("P6 native cost, run %d, %s: every pod new and ready, no old pod left %.1f s; %s reports complete %.1f s; API requests %d (%s); load %d requests, %d failed%s\n",
				n, kind, r.pods.Seconds(), completer(kind), r.complete.Seconds(), r.apiTotal(), verbs(r.api), r.requests, r.failed, topErrors(r.errs))
			fmt.Printf("  every new pod ready after %.1f s; API requests by resource: %s\n", r.newReady.Seconds(), largest(r.api, 12))
			fmt.Printf("  timeline: %s\n", strings.Join(r.timeline, "; "))
			runs = append(runs, r)
		}
	}
	printNativeCost(kinds, runs)
	for _, r := range runs {
		if r.failed > 0 {
			b.Errorf("run %d, %s: %d of %d requests failed:%s", r.n, r.kind, r.failed, r.requests, topErrors(r.errs))
		}
	}
}

func completer(kind string) string {
	if kind != "native" {
		return "the Rollout"
	}
	return "the Deployment"
}

// costURL is the address of kind's Deployment through the gateway.
func costURL(w *world, kind string) string {
	if kind == "native" {
		return w.url + "native"
	}
	return w.url
}

func costName(kind string) string {
	if kind == "native" {
		return "native"
	}
	return "echoserver"
}

// costMeter measures runs on w. Its own requests to the API server are
// counted so that they can be taken out of the API server's figures.
type costMeter struct {
	b   *testing.B
	w   *world
	c   client.Client
	raw *kubernetes.Clientset
	// own counts the meter's requests by verb, as the API server counts
	// them.
	own map[string]int
}

func newCostMeter(b *testing.B, w *world) *costMeter {
	cs, err := kubernetes.NewForConfig(w.node.RESTConfig)
	if err != nil {
		b.Fatal(err)
	}
	return &costMeter{b: b, w: w, c: w.C, raw: cs, own: map[string]int{}}
}

// checkGatewayAt fails unless url answers v1 through the gateway.
func (m *costMeter) checkGatewayAt(url string) error {
	return poll(context.Background(), time.Minute, url+" answers v1", func() (bool, string) {
		body, err := get(url)
		return err == nil && strings.HasPrefix(body, "v1 "), fmt.Sprintf("%q %v", body, err)
	})
}

// costState is what the meter sees of one Deployment.
type costState struct {
	podsDone, complete bool
	// newReady: costPods pods run the new revision and are Ready.
	newReady bool
	desc     string
	// moment names where the update stands (new pods ready, old pods
	// left, and the Rollout's step), for the run's timeline.
	moment string
}

// observe reads kind's pods, Deployment and (rollgate) Rollout, and says
// whether every pod runs image and run and is Ready with no other pod
// left, and whether the workload reports the update complete (for
// rollgate: the Rollout Healthy with a stable revision other than
// stable).
func (m *costMeter) observe(ctx context.Context, kind, image string, run int, stable string) costState {
	name := costName(kind)
	var pods corev1.PodList
	m.own["LIST pods"]++
	if err := m.c.List(ctx, &pods, client.InNamespace(m.w.NS), client.MatchingLabels{"app": name}); err != nil {
		return costState{desc: err.Error()}
	}
	newReady, other := 0, 0
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && podOf(&p, image, run) && podReady(&p) {
			newReady++
		} else if !podOf(&p, image, run) || p.DeletionTimestamp != nil {
			other++
		}
	}
	s := costState{podsDone: newReady == costPods && len(pods.Items) == costPods, newReady: newReady == costPods}
	var d appsv1.Deployment
	m.own["GET deployments"]++
	if err := m.c.Get(ctx, types.NamespacedName{Namespace: m.w.NS, Name: name}, &d); err != nil {
		return costState{desc: err.Error()}
	}
	st := d.Status
	s.complete = d.Status.ObservedGeneration >= d.Generation && !d.Spec.Paused && st.Replicas == costPods &&
		st.UpdatedReplicas == costPods && st.AvailableReplicas == costPods && st.ReadyReplicas == costPods
	s.moment = fmt.Sprintf("%d new ready, %d old", newReady, other)
	s.desc = fmt.Sprintf("%d pods, %d new and ready, %d old or terminating; deployment gen %d/%d paused %v replicas %d updated %d available %d",
		len(pods.Items), newReady, other, st.ObservedGeneration, d.Generation, d.Spec.Paused, st.Replicas, st.UpdatedReplicas, st.AvailableReplicas)
	if kind != "native" {
		m.own["GET rollouts"]++
		ro := m.w.rollout(ctx)
		s.complete = s.complete && ro.Status.Phase == v1alpha1.PhaseHealthy && ro.Status.ObservedGeneration >= ro.Generation &&
			ro.Status.StableRevision != stable
		s.desc += "; rollout " + describe(ro)
		s.moment += fmt.Sprintf(", %s step %d %s", ro.Status.Phase, ro.Status.CurrentStepIndex, ro.Status.CurrentStepState)
	}
	return s
}

// steady says whether kind's update to run is complete in every way.
func (m *costMeter) steady(ctx context.Context, kind string, run int) (bool, string) {
	image := "localhost/verserver:v1"
	if run > 0 {
		image = "localhost/verserver:" + []string{"v2", "v3", "v4", "v1"}[(run-1)%4]
	}
	s := m.observe(ctx, kind, image, run, "")
	return s.podsDone && s.complete, s.desc
}

// podOf says whether p runs image with RUN=run.
func podOf(p *corev1.Pod, image string, run int) bool {
	if len(p.Spec.Containers) == 0 || p.Spec.Containers[0].Image != image {
		return false
	}
	want := strconv.Itoa(run)
	for _, e := range p.Spec.Containers[0].Env {
		if e.Name == "RUN" {
			return e.Value == want
		}
	}
	return false
}

// run updates kind's Deployment to image and run under load and measures
// it.
func (m *costMeter) run(ctx context.Context, kind string, n int, image string) costRun {
	m.b.Helper()
	w := m.w
	r := costRun{kind: kind, n: n}
	// Load first, so that its connections are open before the change.
	l := startLoad(costURL(w, kind), rate, nil)
	defer l.stop()
	l.since(ctx, 0, 2*rate)
	// The image change, as Flux applies a commit: the Deployment alone.
	doc := costWorkload(costName(kind), image, n)
	// The revision the Rollout reports stable before the change: the
	// release is complete once it reports another.
	stable := w.rollout(ctx).Status.StableRevision
	clear(m.own)
	before := m.scrape(ctx)
	mark := l.mark()
	start := time.Now()
	w.ApplyYAML(doc)
	var podsAt, completeAt time.Duration
	last, lastMoment := "", ""
	for podsAt == 0 || completeAt == 0 {
		if time.Since(start) > costRunLimit || ctx.Err() != nil {
			m.b.Fatalf("run %d, %s: not complete within %s; last: %s\ncontroller log:\n%s", n, kind, costRunLimit, last, w.controllerLog(30))
		}
		s := m.observe(ctx, kind, image, n, stable)
		if s.moment != lastMoment {
			r.timeline = append(r.timeline, fmt.Sprintf("+%.1fs %s", time.Since(start).Seconds(), s.moment))
			lastMoment = s.moment
		}
		last = s.desc
		if s.newReady && r.newReady == 0 {
			r.newReady = time.Since(start)
		}
		if s.podsDone && podsAt == 0 {
			podsAt = time.Since(start)
		}
		if s.complete && completeAt == 0 {
			completeAt = time.Since(start)
		}
		time.Sleep(100 * time.Millisecond)
	}
	after := m.scrape(ctx)
	tl := count(l.since(ctx, mark, 0), false)
	r.pods, r.complete = podsAt, completeAt
	r.requests, r.failed, r.errs = tl.total, tl.failed, tl.errs
	r.api = map[string]int{}
	// The image change itself (three server-side applies: the Namespace,
	// the Deployment and its Service, as Flux applies them) is counted in
	// both kinds alike.
	for v, c := range after {
		if d := c - before[v] - m.own[v]; d != 0 {
			r.api[v] = d
		}
	}
	return r
}

// idleFigures are the API server's requests with nothing moving.
type idleFigures struct {
	api       map[string]int
	perSecond float64
}

// background measures the API server's requests over d with nothing
// moving (leases, the kubelet's node status): the part of every run's
// count that neither controller causes.
func (m *costMeter) background(ctx context.Context, d time.Duration) idleFigures {
	clear(m.own)
	before := m.scrape(ctx)
	start := time.Now()
	time.Sleep(d)
	after := m.scrape(ctx)
	el := time.Since(start).Seconds()
	f := idleFigures{api: map[string]int{}}
	total := 0
	for v, c := range after {
		if x := c - before[v]; x != 0 {
			f.api[v] = x
			total += x
		}
	}
	f.perSecond = float64(total) / el
	return f
}

// requestTotal matches a series of apiserver_request_total.
var requestTotal = regexp.MustCompile(`^apiserver_request_total\{(.*)\} ([0-9.e+]+)$`)

var labelRe = regexp.MustCompile(`(\w+)="([^"]*)"`)

// scrape reads apiserver_request_total from the API server's /metrics,
// summed by verb and resource ("PATCH pods/status") over the requests
// for a resource (not /metrics, /healthz or discovery).
func (m *costMeter) scrape(ctx context.Context) map[string]int {
	m.b.Helper()
	body, err := m.raw.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		m.b.Fatalf("API server metrics: %v", err)
	}
	out := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		mm := requestTotal.FindStringSubmatch(sc.Text())
		if mm == nil {
			continue
		}
		labels := map[string]string{}
		for _, l := range labelRe.FindAllStringSubmatch(mm[1], -1) {
			labels[l[1]] = l[2]
		}
		if labels["resource"] == "" {
			continue
		}
		v, err := strconv.ParseFloat(mm[2], 64)
		if err != nil {
			m.b.Fatalf("apiserver_request_total: %q: %v", sc.Text(), err)
		}
		res := labels["resource"]
		if sub := labels["subresource"]; sub != "" {
			res += "/" + sub
		}
		out[labels["verb"]+" "+res] += int(v)
	}
	if len(out) == 0 {
		m.b.Fatalf("API server metrics: no apiserver_request_total for a resource")
	}
	return out
}

// byVerb sums counts by verb and resource by verb.
func byVerb(api map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range api {
		verb, _, _ := strings.Cut(k, " ")
		out[verb] += v
	}
	return out
}

// verbs prints counts by verb (of counts by verb and resource), largest
// first.
func verbs(api map[string]int) string {
	return largest(byVerb(api), 0)
}

// largest prints the counts, largest first, the first n (all when 0).
func largest(by map[string]int, n int) string {
	keys := slices.Collect(maps.Keys(by))
	sort.Slice(keys, func(i, j int) bool {
		return by[keys[i]] > by[keys[j]] || by[keys[i]] == by[keys[j]] && keys[i] < keys[j]
	})
	if n > 0 && len(keys) > n {
		keys = keys[:n]
	}
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, by[k]))
	}
	return strings.Join(parts, ", ")
}

// printNativeCost prints the medians and maxima over the runs.
func printNativeCost(kinds []string, runs []costRun) {
	by := map[string][]costRun{}
	for _, r := range runs {
		by[r.kind] = append(by[r.kind], r)
	}
	for _, kind := range kinds {
		rs := by[kind]
		pods := durations(rs, func(r costRun) float64 { return r.pods.Seconds() })
		complete := durations(rs, func(r costRun) float64 { return r.complete.Seconds() })
		newReady := durations(rs, func(r costRun) float64 { return r.newReady.Seconds() })
		api := durations(rs, func(r costRun) float64 { return float64(r.apiTotal()) })
		fmt.Printf("P6 native cost, %s, %d pods, wall time median %.1f s, max %.1f s\n", kind, costPods, median(pods), slices.Max(pods))
		fmt.Printf("P6 native cost, %s, %d pods, every new pod ready (old ones still shutting down) median %.1f s, max %.1f s\n", kind, costPods, median(newReady), slices.Max(newReady))
		fmt.Printf("P6 native cost, %s, %d pods, reported complete median %.1f s, max %.1f s\n", kind, costPods, median(complete), slices.Max(complete))
		fmt.Printf("P6 native cost, %s, %d pods, API requests median %.0f, max %.0f\n", kind, costPods, median(api), slices.Max(api))
		verbsSeen := map[string]bool{}
		for _, r := range rs {
			for v := range byVerb(r.api) {
				verbsSeen[v] = true
			}
		}
		for _, v := range slices.Sorted(maps.Keys(verbsSeen)) {
			x := durations(rs, func(r costRun) float64 { return float64(byVerb(r.api)[v]) })
			fmt.Printf("P6 native cost, %s, %d pods, API requests %s median %.0f, max %.0f\n", kind, costPods, v, median(x), slices.Max(x))
		}
		total, failed := 0, 0
		for _, r := range rs {
			total += r.requests
			failed += r.failed
		}
		fmt.Printf("P6 native cost, %s, failed requests %d of %d\n", kind, failed, total)
	}
	var ratios []float64
	for i := 0; i+1 < len(runs); i += 2 {
		if runs[i].kind == "native" && runs[i+1].kind == kinds[1] && runs[i].pods > 0 {
			ratios = append(ratios, runs[i+1].pods.Seconds()/runs[i].pods.Seconds())
		}
	}
	if len(ratios) > 0 {
		fmt.Printf("P6 native cost, rollgate / native wall time per pair, median %.2f x, max %.2f x\n", median(ratios), slices.Max(ratios))
	}
	printCostByResource(by["native"], by[kinds[1]])
	fmt.Printf("P6 native cost, load %.2f (1-minute load average at the end)\n", loadAverage())
}

// printCostByResource prints the median requests by verb and resource of
// both kinds where they differ, the largest difference first: where
// rollgate's requests go.
func printCostByResource(native, rollgate []costRun) {
	keys := map[string]bool{}
	for _, r := range append(slices.Clone(native), rollgate...) {
		for k := range r.api {
			keys[k] = true
		}
	}
	type row struct {
		key  string
		n, r float64
	}
	var rows []row
	for k := range keys {
		n := median(durations(native, func(r costRun) float64 { return float64(r.api[k]) }))
		g := median(durations(rollgate, func(r costRun) float64 { return float64(r.api[k]) }))
		if n != g {
			rows = append(rows, row{k, n, g})
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		di, dj := rows[i].r-rows[i].n, rows[j].r-rows[j].n
		return di > dj || di == dj && rows[i].key < rows[j].key
	})
	for _, x := range rows {
		fmt.Printf("P6 native cost, API requests %s, median native %.0f, rollgate %.0f (%+.0f)\n", x.key, x.n, x.r, x.r-x.n)
	}
}

func durations(rs []costRun, f func(costRun) float64) []float64 {
	var out []float64
	for _, r := range rs {
		out = append(out, f(r))
	}
	return out
}

func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// loadAverage is the machine's 1-minute load average, 0 when unknown.
func loadAverage() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseFloat(strings.Fields(string(data))[0], 64)
	return f
}
