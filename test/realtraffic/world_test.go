package realtraffic

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/gitserver"
	"github.com/rollgate/rollgate/test/proc"
	"github.com/rollgate/rollgate/test/realnode"
	"github.com/rollgate/rollgate/test/repo"
	"github.com/rollgate/rollgate/test/rig"
)

// fluxManager is the field manager Flux's kustomize-controller applies with:
// every change to the application and its Rollout is applied as Flux applies
// a commit.
const fluxManager = "kustomize-controller"

const (
	controllerImage = "localhost/rollgate:test"
	release         = "rollgate"
	releaseNS       = "rollgate-system"
)

// world is one story's part of the package's real node (rollgate from its
// chart): the sample application under a Rollout in the story's namespace,
// and a Traefik of its own in front of it.
type world struct {
	// World's namespace is the story's: its application, Rollout and
	// Repository (the stories declare them in demo; see World.InNS).
	rig.World
	node    *realnode.Cluster
	helm    string
	traefik *proc.Process
	// git serves the application's repository on the node's address, where
	// the controller's pod reaches it.
	git *gitserver.Server
	// url is the application's address through the gateway.
	url    string
	gwPort int
	// metricsPort is where Traefik serves its Prometheus metrics, on
	// loopback.
	metricsPort int
}

func (w *world) port() int { return w.gwPort }

func (w *world) chart() string { return chartDir() }

func newWorld(t testing.TB, ctx context.Context, steps string) *world {
	return newWorldOf(t, ctx, worldOptions{rollout: rollout(steps)})
}

// worldOptions change what newWorldOf declares.
type worldOptions struct {
	// rollout is the Rollout as Git declares it (or rolloutOf).
	rollout string
	// app is the application as Git declares it at image; nil means app.
	app func(image string, port int) string
	// rolloutOf, when set, replaces rollout: the Rollout once the world's
	// addresses are known (after extra ran).
	rolloutOf func(w *world) string
	// extra returns more documents to apply with the application, once the
	// world's addresses (w.gwPort, w.metricsPort) are known.
	extra func(w *world) string
	// fetchInterval is the Repository's spec.interval; "" is 1s.
	fetchInterval string
}

// newWorldOf is newWorld with what opts declares: the story's application
// in a namespace of its own on the package's node, with its own Traefik and
// Git server. t is a story's or a benchmark's (BenchmarkNativeCost).
func newWorldOf(t testing.TB, ctx context.Context, opts worldOptions) *world {
	if opts.app == nil {
		opts.app = app
	}
	start := time.Now()
	traefik := repo.Tool(t, "traefik")
	dir := t.TempDir()
	node, err := theNode.get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if theNode.ready != "" {
		t.Logf("the package's node: %s", theNode.ready)
	}
	w := &world{World: rig.World{T: t, C: node.Client, NS: rig.StoryNamespace(t.Name())}, node: node, helm: repo.Tool(t, "helm")}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("real node logs:\n%s", node.LogTails(15))
		}
		// The story's namespace goes, with everything in it; the node stays
		// for the next story.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if out, err := node.Kubectl(ctx, "delete", "namespace", w.NS, "--wait=false"); err != nil {
			t.Errorf("delete namespace %s: %v\n%s", w.NS, err, out)
		}
	})

	// Traefik's ports (its entry point and its metrics), known before
	// anything is declared.
	ports, err := proc.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	port := ports[0]
	w.url = fmt.Sprintf("http://127.0.0.1:%d/", port)
	w.gwPort, w.metricsPort = port, ports[1]
	var extra string
	if opts.extra != nil {
		extra = opts.extra(w)
	}
	ro := opts.rollout
	if opts.rolloutOf != nil {
		ro = opts.rolloutOf(w)
	}
	// The application's repository, on the node's address so that the
	// controller's pod reaches it; approvals are merges there.
	w.git = gitserver.Start(t, gitserver.Options{Host: realnode.NodeIP})
	repoURL, err := w.git.CreateRepo("app", map[string]string{rolloutPath: rig.InNamespace(ro, w.NS)})
	if err != nil {
		t.Fatal(err)
	}

	docs := opts.app("localhost/verserver:v1", port) + "---" + ro
	if extra != "" {
		docs += "---" + extra
	}
	w.ApplyYAML(docs + "---" + fmt.Sprintf(`
apiVersion: rollgate.dev/v1alpha1
kind: Repository
metadata: {name: app-repo, namespace: demo}
spec: {url: %q, branch: main, interval: %s, status: {window: 1s}}
`, repoURL, cmp.Or(opts.fetchInterval, "1s")))
	// Traefik starts once the application serves. Traefik v3.6 rebuilds
	// its configuration on an EndpointSlice update only when an address or
	// a port changed, not when an endpoint's Ready or Serving condition
	// did (upstream's "Detect EndpointSlice condition changes" fixed it in
	// v3.7, which cannot be built as a module dependency). A Traefik that
	// first saw the pods' addresses before they were ready never learnt
	// that they became ready: the route's service stayed missing and the
	// gateway answered 404 for good (TestMirrorThroughTraefikService,
	// fresh-clone run of dc833ac). Later in a story every pod becomes
	// ready before rollgate moves traffic to it, and that move is itself
	// a change Traefik reloads on.
	w.Until(ctx, 2*time.Minute, "the application serves before Traefik starts", func() (bool, string) {
		return w.serving(ctx)
	})
	// Traefik on loopback, with the Gateway API provider and its own
	// CRDs' provider (IngressRoute, TraefikService), reading the story's
	// namespace only.
	p, err := proc.Start(dir, "traefik", traefik, []string{
		fmt.Sprintf("--entryPoints.web.address=127.0.0.1:%d", port),
		"--providers.kubernetesgateway=true", "--providers.kubernetesgateway.namespaces=" + w.NS,
		"--providers.kubernetescrd=true", "--providers.kubernetescrd.namespaces=" + w.NS,
		"--ping=false", "--log.level=INFO", "--global.checkNewVersion=false",
		"--global.sendAnonymousUsage=false",
		// Prometheus metrics on their own entry point, for the stories
		// that analyse what the gateway measured.
		fmt.Sprintf("--entryPoints.metrics.address=127.0.0.1:%d", w.metricsPort),
		"--metrics.prometheus=true", "--metrics.prometheus.entryPoint=metrics",
	}, []string{"KUBECONFIG=" + node.Kubeconfig})
	if err != nil {
		t.Fatal(err)
	}
	w.traefik = p
	nudgeCtx, stopNudging := context.WithCancel(context.Background())
	nudged := make(chan struct{})
	go func() {
		defer close(nudged)
		w.nudgeTraefik(nudgeCtx)
	}()
	t.Cleanup(func() {
		stopNudging()
		<-nudged
		if t.Failed() {
			t.Logf("traefik log:\n%s", proc.Tail(p.Log, 20))
			t.Logf("controller log:\n%s", w.controllerLog(30))
		}
		_ = p.Stop(5 * time.Second)
	})
	w.Until(ctx, 2*time.Minute, "v1 answers through the gateway and the Rollout is healthy", func() (bool, string) {
		if err := p.Exited(); err != nil {
			t.Fatal(err)
		}
		body, err := get(w.url)
		ro := w.rollout(ctx)
		return err == nil && strings.HasPrefix(body, "v1 ") && ro.Status.Phase == v1alpha1.PhaseHealthy,
			fmt.Sprintf("gateway: %q %v; rollout phase %s", body, err, ro.Status.Phase)
	})
	t.Logf("world ready in %s", time.Since(start).Round(time.Millisecond))
	return w
}

// nudgeTraefik makes Traefik reload whenever an endpoint's conditions
// change in the story's namespace, until ctx ends. Traefik v3.6 ignores an
// EndpointSlice update that changes no address or port (see newWorldOf),
// so it kept sending requests to a pod that had stopped serving until the
// pod's address left the slice: 24 requests failed with 502 in 0.8 s when
// a rolled-back canary pod shut down (TestJobCheckOnTheRealNode,
// fresh-clone run of 5fcf7d0, load 35). Upstream's fix (v3.7) reloads on
// those changes; this does the same from outside: it annotates a Service
// of its own, which Traefik watches and reloads on, whenever the
// endpoints' conditions changed but their addresses did not.
func (w *world) nudgeTraefik(ctx context.Context) {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.NS, Name: "traefik-nudge"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 1}}},
	}
	if err := w.C.Create(ctx, svc); err != nil && !apierrors.IsAlreadyExists(err) {
		w.T.Logf("nudging Traefik: %v", err)
		return
	}
	var lastAddrs, lastConds string
	for n := 0; ; {
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
		var slices discoveryv1.EndpointSliceList
		if err := w.C.List(ctx, &slices, client.InNamespace(w.NS)); err != nil {
			continue
		}
		var addrs, conds strings.Builder
		for _, sl := range slices.Items {
			for _, e := range sl.Endpoints {
				fmt.Fprintf(&addrs, "%s/%v;", sl.Name, e.Addresses)
				fmt.Fprintf(&conds, "%s/%v/%t%t%t;", sl.Name, e.Addresses, ptr.Deref(e.Conditions.Ready, true),
					ptr.Deref(e.Conditions.Serving, true), ptr.Deref(e.Conditions.Terminating, false))
			}
		}
		if conds.String() != lastConds && addrs.String() == lastAddrs {
			n++
			patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"annotations":{"realtraffic.rollgate.dev/nudge":"%d"}}}`, n))
			if err := w.C.Patch(ctx, svc, patch); err != nil && ctx.Err() == nil {
				w.T.Logf("nudging Traefik: %v", err)
			}
		}
		lastAddrs, lastConds = addrs.String(), conds.String()
	}
}

// serving reports whether the story's Rollout is Healthy and every
// endpoint of every EndpointSlice in its namespace is ready (a Service with
// no endpoint, a canary one, is no reason to wait), and says what it saw.
func (w *world) serving(ctx context.Context) (bool, string) {
	ro := w.rollout(ctx)
	var slices discoveryv1.EndpointSliceList
	if err := w.C.List(ctx, &slices, client.InNamespace(w.NS)); err != nil {
		return false, err.Error()
	}
	ready, waiting := 0, 0
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if ptr.Deref(e.Conditions.Ready, true) {
				ready++
			} else {
				waiting++
			}
		}
	}
	return ro.Status.Phase == v1alpha1.PhaseHealthy && ready > 0 && waiting == 0,
		fmt.Sprintf("rollout phase %s; endpoints ready %d, not ready %d", ro.Status.Phase, ready, waiting)
}

func get(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return string(body), fmt.Errorf("%s", resp.Status)
	}
	return strings.TrimSpace(string(body)), nil
}

func (w *world) helmRun(ctx context.Context, args ...string) string {
	w.T.Helper()
	out, err := runHelm(ctx, w.node, w.helm, args...)
	if err != nil {
		w.T.Fatalf("helm %s: %v\n%s\ncontroller log:\n%s", strings.Join(args, " "), err, out, w.controllerLog(30))
	}
	return out
}

// waitWebhookCA waits until the controller's webhook answers again.
func (w *world) waitWebhookCA(ctx context.Context) {
	w.T.Helper()
	if err := waitWebhook(ctx, w.C); err != nil {
		w.T.Fatal(err)
	}
}

// controllerPods lists the controller's pods.
func (w *world) controllerPods(ctx context.Context) []corev1.Pod {
	var list corev1.PodList
	_ = w.C.List(ctx, &list, client.InNamespace(releaseNS))
	return list.Items
}

func (w *world) controllerLog(n int) string { return controllerLog(w.node, n) }

func (w *world) rollout(ctx context.Context) *v1alpha1.Rollout {
	ro := &v1alpha1.Rollout{}
	_ = w.C.Get(ctx, types.NamespacedName{Namespace: w.NS, Name: "echoserver"}, ro)
	return ro
}

// app is the application as Git declares it: namespace demo, Deployment
// echoserver (5 pods of the sample app), its Service, a Gateway on
// Traefik's entry point and the HTTPRoute the Rollout shifts.
//
// A pod keeps serving for 10 s after SIGTERM (-drain), as a production
// app's preStop delay would: a deleted pod leaves the data plane only once
// the EndpointSlice controller and then Traefik have caught up, which took
// more than the 4 s drain used before (21 and 17 requests got 502 Bad
// Gateway in two full `make test` runs, at load 30-35 on 2 cores). No
// controller can know when a proxy dropped an endpoint; the drain covers it.
func app(image string, port int) string {
	return workload(image) + fmt.Sprintf(`
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: traefik}
spec: {controllerName: traefik.io/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: public, namespace: demo}
spec:
  gatewayClassName: traefik
  listeners:
  - {name: web, protocol: HTTP, port: %d, allowedRoutes: {namespaces: {from: Same}}}
---`, port) + route("echoserver", "public")
}

// route is HTTPRoute name in namespace demo, attached to Gateway gateway,
// sending every path to Service echoserver. It starts with a newline.
func route(name, gateway string) string {
	return fmt.Sprintf(`
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: %s, namespace: demo}
spec:
  parentRefs: [{name: %s}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /}}]
    backendRefs: [{name: echoserver, port: 80}]
`, name, gateway)
}

// workload is the application without its route: namespace demo,
// Deployment echoserver (5 pods of the sample app at image) and its
// Service.
func workload(image string) string {
	return fmt.Sprintf(`
apiVersion: v1
kind: Namespace
metadata: {name: demo}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: echoserver, namespace: demo}
spec:
  replicas: 5
  selector: {matchLabels: {app: echoserver}}
  template:
    metadata: {labels: {app: echoserver}}
    spec:
      terminationGracePeriodSeconds: 15
      containers:
      - name: app
        image: %s
        imagePullPolicy: Never
        args: ["-drain=10s"]
        env:
        - name: POD_NAME
          valueFrom: {fieldRef: {fieldPath: metadata.name}}
        ports: [{name: http, containerPort: 8080}]
        readinessProbe:
          httpGet: {path: /readyz, port: http}
          periodSeconds: 1
        resources:
          requests: {cpu: 10m, memory: 16Mi}
          limits: {memory: 64Mi}
---
apiVersion: v1
kind: Service
metadata: {name: echoserver, namespace: demo}
spec:
  selector: {app: echoserver}
  ports: [{name: http, port: 80, targetPort: 8080}]
`, image)
}

// rollout is the Rollout of Deployment echoserver with steps, routing
// through the HTTPRoute.
func rollout(steps string) string {
	return echoserverRollout(false, "      steps:"+steps+"\n"+echoserverRoute)
}

// echoserverRollout is the Rollout of Deployment echoserver in namespace
// demo, kept in Git at rolloutPath, whose strategy.canary (or blueGreen)
// is the YAML strategy (lines indented by six spaces).
func echoserverRollout(blueGreen bool, strategy string) string {
	return rig.Rollout{Name: "echoserver", Namespace: "demo", BlueGreen: blueGreen, Strategy: strategy, GitPath: rolloutPath}.YAML()
}

// echoserverRoute routes a Rollout's traffic through HTTPRoute echoserver,
// waiting the default grace period after each change (rig.Rollout's own
// routing waits none): real clients and a real data plane settle.
const echoserverRoute = `      trafficRoutings:
      - service: echoserver
        gateway: {httpRouteName: echoserver}
`

// rolloutPath is where the Rollout lives in the application's repository.
const rolloutPath = "apps/echoserver/rollout.yaml"

// approveInGit merges the approval branch of the gate ro waits at, as a
// reviewer merges the pull request, then applies the Rollout as Git now
// declares it, as Flux would.
func (w *world) approveInGit(ctx context.Context) {
	w.T.Helper()
	w.mergeApproval(ctx)
	w.applyDeclared(ctx)
}

// mergeApproval merges the approval branch of the gate the Rollout waits
// at into main, as a reviewer merges its pull request.
func (w *world) mergeApproval(ctx context.Context) {
	w.T.Helper()
	var branch string
	w.Until(ctx, time.Minute, "the approval branch is in Git", func() (bool, string) {
		ro := w.rollout(ctx)
		if ro.Status.AwaitingApproval == nil || ro.Status.AwaitingApproval.Branch == "" {
			return false, describe(ro)
		}
		branch = ro.Status.AwaitingApproval.Branch
		_, err := w.git.Head("app", branch)
		return err == nil, fmt.Sprintf("branch %s: %v", branch, err)
	})
	if _, err := w.git.Merge("app", "main", branch, "Merge approval "+branch); err != nil {
		w.T.Fatal(err)
	}
}

// applyDeclared applies the Rollout as main declares it, as the GitOps
// tool does after a merge.
func (w *world) applyDeclared(ctx context.Context) {
	w.T.Helper()
	declared, err := w.git.ReadFile("app", "main", rolloutPath)
	if err != nil {
		w.T.Fatal(err)
	}
	w.ApplyYAML(declared)
}
