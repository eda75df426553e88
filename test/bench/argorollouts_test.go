package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/test/proc"
)

// argoNamespace is the namespace Argo Rollouts reads its notification
// configuration from (POD_NAMESPACE); it holds nothing else here.
const argoNamespace = "argo-rollouts"

var argoRolloutGVK = schema.GroupVersionKind{Group: "argoproj.io", Version: "v1alpha1", Kind: "Rollout"}

// releaseShape is implemented by a contender whose release leaves out part
// of what the side-by-side benchmark measures by default (the route at 20%
// and back, the Deployment rolling its own pods).
type releaseShape interface {
	// movesTraffic is false when the controller leaves the routes of r
	// alone: its step 1 and its completion then leave the route out.
	movesTraffic(r router) bool
	// releaseReplicas is the Deployment's spec.replicas in the manifest
	// that changes its image, -1 to keep the fleet's: 0 when the
	// controller runs the pods in ReplicaSets of its own and scaled the
	// Deployment to zero (the manifest a user keeps in Git then).
	releaseReplicas() int
}

// movesTraffic reports whether c moves the route of r during a release.
func movesTraffic(c contender, r router) bool {
	s, ok := c.(releaseShape)
	return !ok || s.movesTraffic(r)
}

// fleetShape is implemented by a contender that needs more per workload
// than the fleet has (appYAML and the router's fleetYAML).
type fleetShape interface {
	// fleetYAML is what workload name needs with router r, "" for
	// nothing.
	fleetYAML(name string, r router) string
}

// contenderFleetYAML is what c needs per workload beside the fleet.
func contenderFleetYAML(c contender, name string, r router) string {
	if s, ok := c.(fleetShape); ok {
		return s.fleetYAML(name, r)
	}
	return ""
}

// releaseReplicas is the Deployment's replicas in the release manifest of
// c, or fleet's when c keeps them.
func releaseReplicas(c contender, fleet int) int {
	if s, ok := c.(releaseShape); ok && s.releaseReplicas() >= 0 {
		return s.releaseReplicas()
	}
	return fleet
}

// step1Parts are the times whose last is step 1 for the tracker's
// contender: the gate, a new pod ready and (when it moves traffic) the
// route at 20%.
func (t *releaseTracker) step1Parts() []*firstTimes {
	if !movesTraffic(t.c, t.rt) {
		return []*firstTimes{t.gate, t.pod}
	}
	return []*firstTimes{t.gate, t.pod, t.route}
}

// completeParts are the times whose last is completion: the Rollout done,
// the Deployment rolled (unless the controller runs the pods itself, when
// done reads them from the Rollout) and the route back on the stable
// Service (when it moves traffic).
func (t *releaseTracker) completeParts() []*firstTimes {
	var parts []*firstTimes
	for _, p := range t.namedCompleteParts() {
		parts = append(parts, p.at)
	}
	return parts
}

// completePart is one of completeParts, with what it is.
type completePart struct {
	what string
	at   *firstTimes
}

// namedCompleteParts are completeParts with their names, as the
// benchmark prints each one's time from the approval.
func (t *releaseTracker) namedCompleteParts() []completePart {
	parts := []completePart{{"the Rollout done", t.done}}
	if releaseReplicas(t.c, sbsReplicas) == sbsReplicas {
		parts = append(parts, completePart{"the Deployment rolled", t.rolled})
	}
	if movesTraffic(t.c, t.rt) {
		parts = append(parts, completePart{"the route back on the stable Service", t.back})
	}
	return parts
}

// argoContender is Argo Rollouts v1.10.2 (bin/argorollouts, `make
// tools-bench`, built as rollgate's image binary is) with its defaults but
// no leader election. Its Rollout takes the fleet's Deployment by
// workloadRef and, once healthy, scales it to zero (scaleDown: onsuccess):
// Argo runs the pods in ReplicaSets of its own. With the nginx router it
// moves the traffic through its built-in NGINX router (a canary Ingress of
// its own beside the user's, and the canary Service the fleet makes for
// it). With the gateway router it moves none: its Gateway API router is a
// plugin (argoproj-labs/rollouts-plugin-trafficrouter-gatewayapi) that the
// Go module proxy does not serve, so step 1 is one new pod of four
// (setWeight 20 without a router sets the ReplicaSets' sizes only).
type argoContender struct{}

func (argoContender) name() string { return "argo-rollouts" }

func (argoContender) movesTraffic(r router) bool { return r == routerNginx }

// fleetYAML: with nginx, the canary Service Argo's NGINX router needs
// (canaryService), which Argo does not create: headless as the stable one,
// selecting the workload's pods until Argo adds its pod-template hash.
func (argoContender) fleetYAML(name string, r router) string {
	if r != routerNginx {
		return ""
	}
	return fmt.Sprintf(`
---
apiVersion: v1
kind: Service
metadata: {name: %[1]s-canary, namespace: %[2]s}
spec:
  clusterIP: None
  selector: {app: %[1]s}
  ports: [{port: 80, targetPort: 8080}]
`, name, ns)
}

func (argoContender) releaseReplicas() int { return 0 }

// argoDir is bin/argorollouts/crds, where tools-argorollouts copies the
// CRDs of the module.
func argoDir(f *fleet) string { return f.contenderDir("argorollouts", "Argo Rollouts") }

func (argoContender) install(f *fleet) {
	f.applyFiles(argoDir(f))
	f.ensureNamespace(argoNamespace)
}

// start runs the controller with the admin kubeconfig, cluster-wide, no
// leader election; its metrics and health servers bind 0.0.0.0 (it has no
// flag for the address).
func (argoContender) start(f *fleet, dir string) *controllerProcess {
	f.b.Helper()
	argoDir(f)
	bin, ports := f.toolAndPorts(filepath.Join("argorollouts", "rollouts-controller"), "Argo Rollouts", 2)
	metrics, healthz := ports[0], ports[1]
	p, err := proc.Start(dir, "argo-rollouts", bin, []string{
		"--kubeconfig", f.cluster.Kubeconfig, "--leader-elect=false",
		"--metricsPort", strconv.Itoa(metrics), "--healthzPort", strconv.Itoa(healthz),
	}, []string{"POD_NAMESPACE=" + argoNamespace})
	if err != nil {
		f.b.Fatal(err)
	}
	metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", metrics)
	f.poll(time.Minute, "argo-rollouts serving", func(context.Context) (bool, error) {
		if err := p.Exited(); err != nil {
			return false, err
		}
		for _, url := range []string{fmt.Sprintf("http://127.0.0.1:%d/healthz", healthz), metricsURL} {
			resp, err := http.Get(url)
			if err != nil {
				return false, nil
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return false, nil
			}
		}
		return true, nil
	})
	// Argo serves its own client counter, not client-go's.
	return &controllerProcess{p: p, metricsURL: argoMetrics(f, metricsURL)}
}

func (argoContender) rolloutGVK() schema.GroupVersionKind { return argoRolloutGVK }

// rolloutYAML: step 1 setWeight 20 (one pod of four, and with nginx 20%
// on the canary Ingress) then a pause with no duration (the manual gate);
// after the last step Argo promotes to every pod. With nginx the old
// ReplicaSet is scaled down 1 s after the promotion
// (scaleDownDelaySeconds: 1, where Argo's default with a router is 30 s),
// as Kruise waits 1 s (gracePeriodSeconds) and rollgate 0. Not 0: Argo
// v1.10.2 with a router and scaleDownDelaySeconds: 0 never scales the old
// ReplicaSet down and requeues the Rollout in a loop (addScaleDownDelay
// sets no deadline for 0, and the old ReplicaSet keeps its replicas until
// one is set).
func (argoContender) rolloutYAML(name string, r router) string {
	routing := ""
	if r == routerNginx {
		routing = fmt.Sprintf(`
      canaryService: %[1]s-canary
      stableService: %[1]s
      scaleDownDelaySeconds: 1
      trafficRouting:
        nginx: {stableIngress: %[1]s}`, name)
	}
	return fmt.Sprintf(`
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  replicas: %[3]d
  workloadRef: {apiVersion: apps/v1, kind: Deployment, name: %[1]s, scaleDown: onsuccess}
  strategy:
    canary:%[4]s
      steps:
      - setWeight: 20
      - pause: {}
`, name, ns, sbsReplicas, routing)
}

// ready: Healthy with a stable ReplicaSet, and the Deployment scaled to
// zero with no pod left.
func (argoContender) ready(ro, d *unstructured.Unstructured) bool {
	phase, _, _ := unstructured.NestedString(ro.Object, "status", "phase")
	stable, _, _ := unstructured.NestedString(ro.Object, "status", "stableRS")
	if phase != "Healthy" || stable == "" || d == nil {
		return false
	}
	want, found, _ := unstructured.NestedInt64(d.Object, "spec", "replicas")
	have, _, _ := unstructured.NestedInt64(d.Object, "status", "replicas")
	return found && want == 0 && have == 0
}

// gated: paused at the pause step (index 1) with a new pod-template hash.
func (argoContender) gated(ro *unstructured.Unstructured) (string, bool) {
	step, _, _ := unstructured.NestedInt64(ro.Object, "status", "currentStepIndex")
	hash, _, _ := unstructured.NestedString(ro.Object, "status", "currentPodHash")
	stable, _, _ := unstructured.NestedString(ro.Object, "status", "stableRS")
	conds, _, _ := unstructured.NestedSlice(ro.Object, "status", "pauseConditions")
	paused := false
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["reason"] == "CanaryPauseStep" {
			paused = true
		}
	}
	return hash, step == 1 && paused && hash != "" && hash != stable
}

// done: Healthy with revision stable and every one of the 4 pods on it,
// ready and available, and no other pod (status.replicas counts the pods
// of every ReplicaSet of the Rollout).
// passed: Argo Rollouts moved past the pause (currentStepIndex 2, the
// end of its two steps), which it writes once it has seen the approval.
func (argoContender) passed(ro *unstructured.Unstructured, revision string) bool {
	step, _, _ := unstructured.NestedInt64(ro.Object, "status", "currentStepIndex")
	hash, _, _ := unstructured.NestedString(ro.Object, "status", "currentPodHash")
	return step >= 2 && hash == revision
}

func (argoContender) done(ro *unstructured.Unstructured, revision string) bool {
	phase, _, _ := unstructured.NestedString(ro.Object, "status", "phase")
	stable, _, _ := unstructured.NestedString(ro.Object, "status", "stableRS")
	hash, _, _ := unstructured.NestedString(ro.Object, "status", "currentPodHash")
	if phase != "Healthy" || stable != revision || hash != revision {
		return false
	}
	for _, field := range []string{"replicas", "updatedReplicas", "readyReplicas", "availableReplicas"} {
		if v, _, _ := unstructured.NestedInt64(ro.Object, "status", field); v != sbsReplicas {
			return false
		}
	}
	return true
}

// approve clears the pause conditions in the Rollout's status, as
// `kubectl argo rollouts promote` does at a canary pause step; only while
// revision waits at step 1 (a JSON patch whose tests fail otherwise), so
// an approval sent again never lands on a later step.
func (argoContender) approve(ctx context.Context, c client.Client, name, revision string) error {
	return patchStatus(ctx, c, argoRolloutGVK, name, fmt.Appendf(nil, `[{"op":"test","path":"/status/currentStepIndex","value":1},`+
		`{"op":"test","path":"/status/currentPodHash","value":%q},`+
		`{"op":"remove","path":"/status/pauseConditions"}]`, revision))
}

// argoMetrics serves, on a loopback port of the benchmark, Argo Rollouts'
// metrics with its own client counter (controller_clientset_k8s_request_total,
// which counts every request through the transport of its one REST config:
// every client of the process) written as rest_client_requests_total with
// the HTTP method of its verb, which Argo does not serve; every other line
// as it is. It stops when the benchmark ends.
func argoMetrics(f *fleet, upstream string) string {
	f.b.Helper()
	methods := map[string]string{
		"Get": "GET", "List": "GET", "Watch": "GET", "Create": "POST", "Update": "PUT",
		"Patch": "PATCH", "Delete": "DELETE", "DeleteCollection": "DELETE",
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, err := http.Get(upstream)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			http.Error(w, "upstream: "+resp.Status, http.StatusBadGateway)
			return
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if rest, ok := strings.CutPrefix(line, "controller_clientset_k8s_request_total{"); ok {
				method := "unknown"
				if _, v, ok := strings.Cut(rest, `verb="`); ok {
					verb, _, _ := strings.Cut(v, `"`)
					if m, ok := methods[verb]; ok {
						method = m
					}
				}
				fields := strings.Fields(line)
				line = fmt.Sprintf("rest_client_requests_total{method=%q} %s", method, fields[len(fields)-1])
			}
			fmt.Fprintln(w, line)
		}
	}))
	f.b.Cleanup(srv.Close)
	return srv.URL
}
