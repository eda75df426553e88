package realtraffic

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/realnode"
)

// Steps of the autoscaled release: a quarter of the pods and of the
// traffic at a gate, then everything.
const autoscaledSteps = `
      - traffic: "25%"
        replicas: "25%"
        pause: {}
      - traffic: "100%"
        replicas: "100%"`

// autoscaledApp is the application with its replica count left to a
// HorizontalPodAutoscaler: Git declares no spec.replicas (as Flux and Argo
// CD advise when an autoscaler owns it).
func autoscaledApp(image string, port int) string {
	return strings.Replace(app(image, port), "  replicas: 5\n", "", 1)
}

// TestAutoscaledReleaseUnderLoad: a real HorizontalPodAutoscaler (the
// node's kube-controller-manager) scales the Deployment on an external
// metric the test serves through the API server's aggregation layer. v2 is
// released under load: at the 25% gate the autoscaler scales 4 -> 8 -> 4
// pods, and the batch follows (1, 2, then 1 new pod) while the route stays
// at 25%; after the approval merged in Git the release completes, and the
// autoscaler still scales the Deployment afterwards. No request fails; no
// sample runs more new pods than the step allows once a scale event
// settled.
func TestAutoscaledReleaseUnderLoad(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	w := newWorldOf(t, ctx, worldOptions{rollout: rollout(autoscaledSteps), app: autoscaledApp})
	metric := startMetricsAPI(t, w.NS, 4)
	w.ApplyYAML(metric.manifests() + "---" + autoscaler)
	t.Cleanup(func() {
		// The APIService is cluster-wide: once its Service is gone, every
		// discovery on the shared node (helm, kubectl) would report it
		// unavailable.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if out, err := w.node.Kubectl(ctx, "delete", "apiservice", "v1beta1.external.metrics.k8s.io"); err != nil {
			t.Errorf("delete the APIService: %v\n%s", err, out)
		}
	})
	w.waitPods(ctx, "the autoscaler runs 4 pods of v1", map[string]int32{"v1": 4})
	if metric.queries.Load() == 0 {
		t.Fatal("the autoscaler never asked for the metric")
	}
	t.Logf("the autoscaler scaled v1 to 4 pods (%d metric queries so far)", metric.queries.Load())

	l := startLoad(w.url, rate, nil)
	defer l.stop()
	s := w.sampleBatches(ctx)
	defer s.stop()
	measure := func(window, version string, declared float64) {
		t.Helper()
		tl := count(l.since(ctx, l.mark(), perWindow), false)
		got := tl.share(version)
		t.Logf("%-36s %5d requests, %s %.1f%% (declared %.0f%%), failed %d", window, tl.total, version, got, declared, tl.failed)
		if got < declared-tolerance || got > declared+tolerance {
			t.Errorf("%s: %s answered %.1f%% of %d requests, declared %.0f%% (±%.0f)", window, version, got, tl.total, declared, tolerance)
		}
	}

	// Release v2: step 1 runs a quarter of 4 pods.
	stable := w.rollout(ctx).Status.StableRevision
	w.ApplyYAML(autoscaledApp("localhost/verserver:v2", w.port()))
	canary := w.waitStep(ctx, 1, 25).Status.CanaryRevision
	w.waitPods(ctx, "step 1: 1 new pod of 4", map[string]int32{"v1": 3, "v2": 1})
	measure("step 1 at 4 pods, declared 25%", "v2", 25)

	// The autoscaler scales at the gate; the batch follows, the route stays.
	for _, n := range []struct{ pods, v1, v2 int32 }{{8, 6, 2}, {4, 3, 1}} {
		metric.set(n.pods)
		w.waitPods(ctx, fmt.Sprintf("step 1 scaled to %d: %d new pods", n.pods, n.v2), map[string]int32{"v1": n.v1, "v2": n.v2})
		if ro := w.waitStep(ctx, 1, 25); ro.Status.CanaryRevision != canary {
			t.Fatalf("the release restarted: canary %s, was %s", ro.Status.CanaryRevision, canary)
		}
		measure(fmt.Sprintf("step 1 at %d pods, declared 25%%", n.pods), "v2", 25)
	}

	// The approval merged in Git: the release completes on 4 pods.
	w.approveInGit(ctx)
	w.waitHealthy(ctx, stable, canary)
	w.waitPods(ctx, "v2 on the 4 pods", map[string]int32{"v2": 4})
	measure("after completion", "v2", 100)

	// The autoscaler still owns the count: 6 pods of v2, no new release.
	metric.set(6)
	w.waitPods(ctx, "the autoscaler scales v2 to 6 pods", map[string]int32{"v2": 6})
	if ro := w.rollout(ctx); ro.Status.Phase != v1alpha1.PhaseHealthy || ro.Status.StableRevision != canary {
		t.Errorf("after a scale-up at rest: %s", describe(ro))
	}

	l.stop()
	all := count(l.all(), false)
	samples, over, steps := s.stop()
	t.Logf("whole story: %d requests, %d failed, by version %v; %d samples of the pods, %d above the step's share, steps %v; %d metric queries",
		all.total, all.failed, all.byVersion, samples, len(over), steps, metric.queries.Load())
	if all.failed > 0 {
		t.Errorf("%d of %d requests failed: %v\nwhen (UTC, to read beside the controller's log):%s", all.failed, all.total, topErrors(all.errs), burstsAt(l.all()))
	}
	for _, o := range over {
		t.Errorf("more new pods than the step allows: %s", o)
	}
	if fmt.Sprint(steps) != "[1 2]" {
		t.Errorf("steps seen in order %v, want [1 2]", steps)
	}
}

// autoscaler scales Deployment echoserver to the value of the external
// metric queue_depth (one pod per unit), at once both ways.
const autoscaler = `
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: echoserver, namespace: demo}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: echoserver}
  minReplicas: 1
  maxReplicas: 10
  metrics:
  - type: External
    external:
      metric: {name: queue_depth}
      target: {type: AverageValue, averageValue: "1"}
  behavior:
    scaleUp: {stabilizationWindowSeconds: 0, policies: [{type: Pods, value: 10, periodSeconds: 1}]}
    scaleDown: {stabilizationWindowSeconds: 0, policies: [{type: Pods, value: 10, periodSeconds: 1}]}
`

// metricsAPI serves external.metrics.k8s.io/v1beta1 with one metric,
// queue_depth, whose value the test sets. The API server reaches it
// through an APIService and a Service whose endpoint is the node address.
type metricsAPI struct {
	value   atomic.Int64
	queries atomic.Int64
	port    int
	// ns is the namespace whose metric it serves.
	ns string
}

func startMetricsAPI(t *testing.T, ns string, value int32) *metricsAPI {
	m := &metricsAPI{ns: ns}
	m.value.Store(int64(value))
	ln, err := net.Listen("tcp", realnode.NodeIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(m.serve))
	srv.Listener = ln
	srv.StartTLS()
	t.Cleanup(srv.Close)
	m.port = ln.Addr().(*net.TCPAddr).Port
	return m
}

func (m *metricsAPI) set(v int32) { m.value.Store(int64(v)) }

const externalGV = "external.metrics.k8s.io/v1beta1"

func (m *metricsAPI) serve(rw http.ResponseWriter, r *http.Request) {
	var body any
	switch p := r.URL.Path; {
	case p == "/apis":
		body = map[string]any{"kind": "APIGroupList", "apiVersion": "v1", "groups": []any{map[string]any{
			"name":             "external.metrics.k8s.io",
			"versions":         []any{map[string]any{"groupVersion": externalGV, "version": "v1beta1"}},
			"preferredVersion": map[string]any{"groupVersion": externalGV, "version": "v1beta1"},
		}}}
	case p == "/apis/"+externalGV:
		body = map[string]any{"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": externalGV, "resources": []any{
			map[string]any{"name": "queue_depth", "singularName": "", "namespaced": true, "kind": "ExternalMetricValueList", "verbs": []string{"get"}},
		}}
	case p == "/apis/"+externalGV+"/namespaces/"+m.ns+"/queue_depth":
		m.queries.Add(1)
		body = map[string]any{"kind": "ExternalMetricValueList", "apiVersion": externalGV, "metadata": map[string]any{}, "items": []any{map[string]any{
			"metricName": "queue_depth", "metricLabels": map[string]string{},
			"timestamp": time.Now().UTC().Format(time.RFC3339), "value": fmt.Sprint(m.value.Load()),
		}}}
	case p == "/healthz" || p == "/readyz" || p == "/livez":
		_, _ = rw.Write([]byte("ok"))
		return
	default:
		http.NotFound(rw, r)
		return
	}
	rw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(rw).Encode(body)
}

// manifests register the API: a Service without selector whose endpoint is
// the test's listener on the node address, and the APIService.
func (m *metricsAPI) manifests() string {
	return fmt.Sprintf(`
apiVersion: v1
kind: Service
metadata: {name: metrics-api, namespace: demo}
spec:
  ports: [{name: https, port: 443, targetPort: %[1]d}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: metrics-api-1
  namespace: demo
  labels: {kubernetes.io/service-name: metrics-api}
addressType: IPv4
endpoints: [{addresses: [%[2]q]}]
ports: [{name: https, port: %[1]d, protocol: TCP}]
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1beta1.external.metrics.k8s.io}
spec:
  group: external.metrics.k8s.io
  version: v1beta1
  service: {namespace: demo, name: metrics-api, port: 443}
  insecureSkipTLSVerify: true
  groupPriorityMinimum: 100
  versionPriority: 100
`, m.port, realnode.NodeIP)
}

// census counts the ready, not terminating pods of echoserver by version
// (the image tag), and returns the Deployment's replicas.
func (w *world) census(ctx context.Context) (map[string]int32, int32, error) {
	var d appsv1.Deployment
	if err := w.C.Get(ctx, types.NamespacedName{Namespace: w.NS, Name: "echoserver"}, &d); err != nil {
		return nil, 0, err
	}
	var list corev1.PodList
	if err := w.C.List(ctx, &list, client.InNamespace(w.NS), client.MatchingLabels{"app": "echoserver"}); err != nil {
		return nil, 0, err
	}
	out := map[string]int32{}
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		version := p.Spec.Containers[0].Image[strings.LastIndex(p.Spec.Containers[0].Image, ":")+1:]
		if podReady(&p) {
			out[version]++
		} else {
			out[version+" not ready"]++
		}
	}
	return out, ptr.Deref(d.Spec.Replicas, 1), nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitPods waits until exactly want runs: that many ready pods of each
// version, no other pod.
func (w *world) waitPods(ctx context.Context, what string, want map[string]int32) {
	w.T.Helper()
	w.Until(ctx, 3*time.Minute, what, func() (bool, string) {
		got, replicas, err := w.census(ctx)
		if err != nil {
			return false, err.Error()
		}
		return fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprintf("pods %v of %d replicas; %s", got, replicas, describe(w.rollout(ctx)))
	})
}

// batchSampler samples the pods every 200 ms during the release.
type batchSampler struct {
	cancel context.CancelFunc
	done   sync.WaitGroup

	mu      sync.Mutex
	samples int
	over    []string
	steps   []int32
}

// settleAfterScale is how long after a change of the replica count the
// pods may lag behind it.
const settleAfterScale = 10 * time.Second

// autoscaledShare is the share of the pods each of autoscaledSteps asks for.
var autoscaledShare = []float64{0.25, 1}

func (w *world) sampleBatches(ctx context.Context) *batchSampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &batchSampler{cancel: cancel}
	s.done.Add(1)
	go func() {
		defer s.done.Done()
		var last int32
		var changed time.Time
		for ctx.Err() == nil {
			time.Sleep(200 * time.Millisecond)
			ro := w.rollout(ctx)
			pods, replicas, err := w.census(ctx)
			if err != nil {
				continue
			}
			if replicas != last {
				last, changed = replicas, time.Now()
			}
			st := ro.Status
			s.mu.Lock()
			s.samples++
			if st.Phase == v1alpha1.PhaseProgressing && st.CurrentStepIndex >= 1 && int(st.CurrentStepIndex) <= len(autoscaledShare) {
				if k := len(s.steps); k == 0 || s.steps[k-1] != st.CurrentStepIndex {
					s.steps = append(s.steps, st.CurrentStepIndex)
				}
				limit := int32(autoscaledShare[st.CurrentStepIndex-1]*float64(replicas) + 0.999)
				if n := pods["v2"] + pods["v2 not ready"]; n > limit && time.Since(changed) > settleAfterScale {
					s.over = append(s.over, fmt.Sprintf("%d new pods of %d replicas at step %d (limit %d)", n, replicas, st.CurrentStepIndex, limit))
				}
			}
			s.mu.Unlock()
		}
	}()
	return s
}

// stop ends the sampling and returns what it saw.
func (s *batchSampler) stop() (samples int, over []string, steps []int32) {
	s.cancel()
	s.done.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples, s.over, s.steps
}
