package chart

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// position is where a release stands: every field of the Rollout an
// upgrade must leave alone while a gate is closed. It is comparable.
type position struct {
	phase            v1alpha1.RolloutPhase
	step             int32
	state            v1alpha1.StepState
	stable, canary   string
	gate             string // revision/step awaiting approval, and since when
	stepStartedAt    string
	releaseStartedAt string
	approvals        int
	generation       int64
}

func positionOf(ro *v1alpha1.Rollout) position {
	p := position{
		phase: ro.Status.Phase, step: ro.Status.CurrentStepIndex, state: ro.Status.CurrentStepState,
		stable: ro.Status.StableRevision, canary: ro.Status.CanaryRevision,
		stepStartedAt: stamp(ro.Status.StepStartedAt), releaseStartedAt: stamp(ro.Status.ReleaseStartedAt),
		approvals: len(ro.Spec.Approvals), generation: ro.Generation,
	}
	if a := ro.Status.AwaitingApproval; a != nil {
		p.gate = fmt.Sprintf("%s/%d since %s", a.Revision, a.Step, stamp(&a.Since))
	}
	return p
}

func stamp(t *metav1.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func (p position) String() string {
	return fmt.Sprintf("%s %s->%s step %d %s, gate %q, step started %s, release started %s, %d approvals, generation %d",
		p.phase, p.stable, p.canary, p.step, p.state, p.gate, p.stepStartedAt, p.releaseStartedAt, p.approvals, p.generation)
}

func (p position) short() string { return fmt.Sprintf("step %d %s", p.step, p.state) }

// census is the application's live pods (not terminating), as
// "name uid image ready", sorted.
type census []string

func (s *upgradeStory) pods() census {
	out, _, _ := s.podsAndTerminating()
	return out
}

// podsAndTerminating is the census, the number of terminating pods and
// the resourceVersion of the list (the instant of the census: the cluster
// has one etcd, whose revisions version every kind).
func (s *upgradeStory) podsAndTerminating() (census, int, string) {
	s.t.Helper()
	var list corev1.PodList
	if err := s.c.List(context.Background(), &list, client.InNamespace(appNS), client.MatchingLabels{"app": "web"}); err != nil {
		s.t.Fatal(err)
	}
	var out census
	terminating := 0
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil {
			terminating++
			continue
		}
		ready := false
		for _, c := range p.Status.Conditions {
			ready = ready || c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
		}
		out = append(out, fmt.Sprintf("%s %s %s %t", p.Name, p.UID, p.Spec.Containers[0].Image, ready))
	}
	sort.Strings(out)
	return out, terminating, list.ResourceVersion
}

// count returns the ready and total pods running image.
func (c census) count(image string) [2]int32 {
	var n [2]int32
	for _, p := range c {
		f := strings.Fields(p)
		if f[2] == image {
			n[1]++
			if f[3] == "true" {
				n[0]++
			}
		}
	}
	return n
}

func (c census) String() string {
	by := map[string][2]int32{}
	for _, p := range c {
		img := strings.Fields(p)[2]
		by[img] = c.count(img)
	}
	return fmt.Sprint(by)
}

// ready is the ready and total pods of an image when n all run ready.
func ready(n int32) [2]int32 { return [2]int32{n, n} }

// snapshot is the release at one instant.
type snapshot struct {
	at          time.Time
	rv          string // the instant of the pod census: watches start there
	position    position
	canary      string
	pods        census
	replicaSets string // name=replicas, sorted
	control     string // the Deployment's control annotation
	webhook     []byte // the mutating webhook's CA bundle
}

func (s *upgradeStory) snapshot() snapshot {
	s.t.Helper()
	ro := s.rollout()
	var rsl appsv1.ReplicaSetList
	if err := s.c.List(context.Background(), &rsl, client.InNamespace(appNS)); err != nil {
		s.t.Fatal(err)
	}
	var rs []string
	for _, r := range rsl.Items {
		rs = append(rs, fmt.Sprintf("%s=%d", r.Name, *r.Spec.Replicas))
	}
	sort.Strings(rs)
	_, bundle := s.webhookRegistration()
	pods, _, rv := s.podsAndTerminating()
	return snapshot{
		at: time.Now(), rv: rv, position: positionOf(ro), canary: ro.Status.CanaryRevision,
		pods: pods, replicaSets: strings.Join(rs, ","),
		control: s.deployment().Annotations[v1alpha1.AnnotationControl], webhook: bundle,
	}
}

// stillWatch watches the application's pods and its Rollout from a
// snapshot on: every pod created or deleted, every Rollout write.
type stillWatch struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu         sync.Mutex
	podChanges []string
	podEvents  int
	rollouts   []position
	err        error
}

func (s *upgradeStory) watchStill(from snapshot) *stillWatch {
	s.t.Helper()
	wc, err := client.NewWithWatch(s.cluster.RESTConfig, client.Options{Scheme: s.c.Scheme()})
	if err != nil {
		s.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &stillWatch{cancel: cancel}
	// watchFrom (re)starts a watch at resource version rv. The API server
	// ends a watch of a custom resource when its CRD is updated (the
	// upgrade applies the new CRDs) and may then refuse to resume it at an
	// old version (410 Expired). Like an informer, the watch is resumed from
	// the last version delivered, or, when that has expired, from a fresh
	// list whose objects are recorded as seen: a write in the gap still
	// shows as a changed position.
	watchFrom := func(newList func() client.ObjectList) watchFunc {
		return func(rv string, expired bool, record func(watch.Event)) (watch.Interface, error) {
			if !expired {
				wi, err := wc.Watch(ctx, newList(), client.InNamespace(appNS), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}})
				if err == nil || !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
					return wi, err
				}
			}
			list := newList()
			if err := wc.List(ctx, list, client.InNamespace(appNS)); err != nil {
				return nil, err
			}
			items, err := meta.ExtractList(list)
			if err != nil {
				return nil, err
			}
			w.mu.Lock()
			for _, o := range items {
				record(watch.Event{Type: watch.Modified, Object: o})
			}
			w.mu.Unlock()
			return wc.Watch(ctx, newList(), client.InNamespace(appNS), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.GetResourceVersion()}})
		}
	}
	for _, f := range []func() error{
		func() error {
			return w.start(ctx, watchFrom(func() client.ObjectList { return &corev1.PodList{} }), from.rv, func(ev watch.Event) {
				p := ev.Object.(*corev1.Pod)
				w.podEvents++
				if ev.Type == watch.Added || ev.Type == watch.Deleted || p.DeletionTimestamp != nil {
					w.podChanges = append(w.podChanges, fmt.Sprintf("%s %s (%s)", ev.Type, p.Name, p.Spec.Containers[0].Image))
				}
			})
		},
		func() error {
			return w.start(ctx, watchFrom(func() client.ObjectList { return &v1alpha1.RolloutList{} }), from.rv, func(ev watch.Event) {
				w.rollouts = append(w.rollouts, positionOf(ev.Object.(*v1alpha1.Rollout)))
			})
		},
	} {
		if err := f(); err != nil {
			s.t.Fatal(err)
		}
	}
	return w
}

// watchFunc starts a watch at rv, or from a fresh list when rv expired.
type watchFunc func(rv string, expired bool, record func(watch.Event)) (watch.Interface, error)

// start watches from rv and follows the watch in the background, resuming
// it from the last delivered version when the server closes it.
func (w *stillWatch) start(ctx context.Context, watchFrom watchFunc, rv string, record func(watch.Event)) error {
	wi, err := watchFrom(rv, false, record)
	if err != nil {
		return err
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for {
			last, expired, err := w.follow(ctx, wi, record)
			if err != nil || ctx.Err() != nil {
				return
			}
			if last != "" {
				rv = last
			}
			if wi, err = watchFrom(rv, expired, record); err != nil {
				w.mu.Lock()
				w.err = errors.Join(w.err, fmt.Errorf("resuming a watch at %s: %w", rv, err))
				w.mu.Unlock()
				return
			}
		}
	}()
	return nil
}

// follow records the events of wi until ctx ends, the server closes the
// watch, or it reports an error. It returns the last resource version
// seen, whether the server said that version expired (410: resume from a
// list), and any other watch error (also recorded).
func (w *stillWatch) follow(ctx context.Context, wi watch.Interface, record func(watch.Event)) (string, bool, error) {
	defer wi.Stop()
	var last string
	for {
		select {
		case <-ctx.Done():
			return last, false, nil
		case ev, ok := <-wi.ResultChan():
			if !ok {
				return last, false, nil
			}
			if ev.Type == watch.Error {
				if st, isStatus := ev.Object.(*metav1.Status); isStatus && st.Code == http.StatusGone {
					return last, true, nil
				}
				err := fmt.Errorf("watch error: %v", ev.Object)
				w.mu.Lock()
				w.err = errors.Join(w.err, err)
				w.mu.Unlock()
				return last, false, err
			}
			if o, ok := ev.Object.(client.Object); ok {
				last = o.GetResourceVersion()
			}
			if ev.Type != watch.Bookmark {
				w.mu.Lock()
				record(ev)
				w.mu.Unlock()
			}
		}
	}
}

// stop ends the watches and returns what they saw.
func (w *stillWatch) stop() *stillWatch {
	w.cancel()
	w.wg.Wait()
	return w
}

func httpGet(url string) (string, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(body), err
}

// previousChart returns the archive of the previous chart release in
// testdata/previous (see docs/development.md, "Releasing the chart") and
// its version.
func previousChart(t *testing.T) (path, version string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join("testdata", "previous", "rollgate-*.tgz"))
	if len(files) != 1 {
		t.Fatalf("want exactly one testdata/previous/rollgate-*.tgz, found %q", files)
	}
	f, err := os.Open(files[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("%s: no rollgate/Chart.yaml: %v", files[0], err)
		}
		if h.Name == "rollgate/Chart.yaml" {
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			abs, _ := filepath.Abs(files[0])
			return abs, parseChartVersion(t, data)
		}
	}
}

// chartVersion is the version of the chart in charts/rollgate.
func chartVersion(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(chartDir(), "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return parseChartVersion(t, data)
}

func parseChartVersion(t *testing.T, chartYAML []byte) string {
	t.Helper()
	var c struct{ Version string }
	if err := yaml.Unmarshal(chartYAML, &c); err != nil || c.Version == "" {
		t.Fatalf("Chart.yaml without a version: %v", err)
	}
	return c.Version
}
