package bench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The kinds the side-by-side benchmark watches in the fleet's namespace.
var (
	podGVK        = schema.GroupVersionKind{Version: "v1", Kind: "Pod"}
	deploymentGVK = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	httpRouteGVK  = schema.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "HTTPRoute"}
)

// watchKind calls fn with the arrival time of every added or modified
// object of gvk in the fleet's namespace until ctx ends (a watch the API
// server closes is resumed: see resumingWatch).
func (f *fleet) watchKind(ctx context.Context, gvk schema.GroupVersionKind, fn func(u *unstructured.Unstructured, at time.Time)) {
	f.b.Helper()
	wc, err := client.NewWithWatch(f.cluster.RESTConfig, client.Options{Scheme: f.scheme})
	if err != nil {
		f.b.Fatal(err)
	}
	newList := func() client.ObjectList {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		return list
	}
	_, err = startResumingWatch(ctx, wc, newList, []client.ListOption{client.InNamespace(ns)}, func(obj client.Object, at time.Time) {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			fn(u, at)
		}
	})
	if err != nil {
		f.b.Fatalf("watch %s: %v", gvk.Kind, err)
	}
}

// watchKindDeletes is watchKind with deletions too (deleted true, the
// object as it was last): it resumes a watch the API server closes from
// the last resourceVersion it saw, and starts over when that version is no
// longer served. opts narrow the watch (a label selector).
func (f *fleet) watchKindDeletes(ctx context.Context, gvk schema.GroupVersionKind, fn func(u *unstructured.Unstructured, deleted bool, at time.Time), opts ...client.ListOption) {
	f.b.Helper()
	wc, err := client.NewWithWatch(f.cluster.RESTConfig, client.Options{Scheme: f.scheme})
	if err != nil {
		f.b.Fatal(err)
	}
	open := func(rv string) (watch.Interface, error) {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		raw := &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}
		return wc.Watch(ctx, list, append([]client.ListOption{client.InNamespace(ns), &client.ListOptions{Raw: raw}}, opts...)...)
	}
	w, err := open("")
	if err != nil {
		f.b.Fatalf("watch %s: %v", gvk.Kind, err)
	}
	go func() {
		rv := ""
		for {
			for ev := range w.ResultChan() {
				if ev.Type == watch.Error {
					if err := apierrors.FromObject(ev.Object); apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
						rv = ""
					}
					continue
				}
				u, ok := ev.Object.(*unstructured.Unstructured)
				if !ok {
					continue
				}
				rv = u.GetResourceVersion()
				if ev.Type != watch.Bookmark {
					fn(u, ev.Type == watch.Deleted, time.Now())
				}
			}
			w.Stop()
			for {
				if ctx.Err() != nil {
					return
				}
				var err error
				if w, err = open(rv); err == nil {
					break
				}
				if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
					rv = ""
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
	}()
}

// podReadyWith reports whether pod runs image and is Ready.
func podReadyWith(pod *unstructured.Unstructured, image string) bool {
	containers, _, _ := unstructured.NestedSlice(pod.Object, "spec", "containers")
	if len(containers) == 0 || pod.GetDeletionTimestamp() != nil {
		return false
	}
	if c, ok := containers[0].(map[string]any); !ok || c["image"] != image {
		return false
	}
	conds, _, _ := unstructured.NestedSlice(pod.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Ready" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// deploymentRolled reports whether d runs image on all its replicas and on
// nothing else, unpaused, with its status current.
func deploymentRolled(d *unstructured.Unstructured, image string, replicas int64) bool {
	containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	if len(containers) == 0 {
		return false
	}
	if c, ok := containers[0].(map[string]any); !ok || c["image"] != image {
		return false
	}
	paused, _, _ := unstructured.NestedBool(d.Object, "spec", "paused")
	observed, _, _ := unstructured.NestedInt64(d.Object, "status", "observedGeneration")
	if paused || observed != d.GetGeneration() {
		return false
	}
	for _, field := range []string{"replicas", "updatedReplicas", "readyReplicas", "availableReplicas"} {
		if v, _, _ := unstructured.NestedInt64(d.Object, "status", field); v != replicas {
			return false
		}
	}
	return true
}

// canaryShare is the percentage of the first rule's weight of route that
// goes to backends other than the stable Service (named as the route):
// 0 when the route holds the stable Service alone.
func canaryShare(route *unstructured.Unstructured) float64 {
	rules, _, _ := unstructured.NestedSlice(route.Object, "spec", "rules")
	if len(rules) == 0 {
		return 0
	}
	rule, _ := rules[0].(map[string]any)
	refs, _, _ := unstructured.NestedSlice(rule, "backendRefs")
	var stable, canary int64
	for _, r := range refs {
		ref, _ := r.(map[string]any)
		w := int64(1) // the Gateway API default weight
		if v, ok, _ := unstructured.NestedInt64(ref, "weight"); ok {
			w = v
		}
		if ref["name"] == route.GetName() {
			stable += w
		} else {
			canary += w
		}
	}
	if stable+canary == 0 {
		return 0
	}
	return 100 * float64(canary) / float64(stable+canary)
}

// firstTimes records, per name, the first time a condition held.
type firstTimes struct {
	mu sync.Mutex
	at map[string]time.Time
}

func newFirstTimes() *firstTimes { return &firstTimes{at: map[string]time.Time{}} }

// mark records at for name unless an earlier time is recorded.
func (t *firstTimes) mark(name string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.at[name]; !ok {
		t.at[name] = at
	}
}

func (t *firstTimes) get(name string) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.at[name]
	return at, ok
}

func (t *firstTimes) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.at)
}

// processStatus reads a field of /proc/<pid>/status in MiB (VmRSS: resident
// set now; VmHWM: its peak since the process started).
func processStatus(pid int, field string) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				return 0, fmt.Errorf("%s %q: %v", field, rest, err)
			}
			return kb / 1024, nil
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// processCPUSeconds reads the CPU time a process has used so far, user
// and system (utime and stime of /proc/<pid>/stat, in clock ticks of
// USER_HZ, 100 per second on Linux), in seconds.
func processCPUSeconds(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: the fields
	// counted from the third (state) start after its last ')'.
	i := strings.LastIndexByte(string(data), ')')
	fields := strings.Fields(string(data)[i+1:])
	if i < 0 || len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, data)
	}
	var ticks float64
	for _, f := range fields[11:13] {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %q: %v", pid, f, err)
		}
		ticks += v
	}
	return ticks / 100, nil
}

// scrape reads a Prometheus text endpoint.
func scrape(url string) (map[string]*dto.MetricFamily, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	return families, nil
}

// sumBy sums the counter or gauge family's series, in all and split by
// the value of label (when not empty).
func sumBy(family *dto.MetricFamily, label string) (float64, map[string]float64) {
	var sum float64
	by := map[string]float64{}
	for _, m := range family.GetMetric() {
		v := m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
		sum += v
		for _, l := range m.GetLabel() {
			if label != "" && l.GetName() == label {
				by[l.GetValue()] += v
			}
		}
	}
	return sum, by
}

// restRequests sums rest_client_requests_total, the API requests every
// client of a controller process made (client-go's counter, which
// controller-runtime serves on the metrics endpoint by default), from its
// Prometheus text endpoint, in all and per HTTP method.
func restRequests(url string) (float64, map[string]float64, error) {
	families, err := scrape(url)
	if err != nil {
		return 0, nil, err
	}
	f, ok := families["rest_client_requests_total"]
	if !ok {
		return 0, nil, fmt.Errorf("%s serves no rest_client_requests_total", url)
	}
	sum, byMethod := sumBy(f, "method")
	return sum, byMethod, nil
}

// metricSum sums every series of the counter name on a Prometheus text
// endpoint; -1 when the endpoint serves none.
func metricSum(url, name string) (float64, error) {
	families, err := scrape(url)
	if err != nil {
		return 0, err
	}
	f, ok := families[name]
	if !ok {
		return -1, nil
	}
	sum, _ := sumBy(f, "")
	return sum, nil
}

// goHeapMiB reads go_memstats_heap_inuse_bytes, the Go heap spans in use,
// from a controller's Prometheus text endpoint.
func goHeapMiB(url string) (float64, error) {
	v, err := metricSum(url, "go_memstats_heap_inuse_bytes")
	if err == nil && v < 0 {
		err = fmt.Errorf("%s serves no go_memstats_heap_inuse_bytes", url)
	}
	return v / (1 << 20), err
}

// loadAvg is the 1-minute load average.
func loadAvg() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	v, err := strconv.ParseFloat(strings.Fields(string(data))[0], 64)
	if err != nil {
		return -1
	}
	return v
}
