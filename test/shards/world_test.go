package shards

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler"
	"github.com/rollgate/rollgate/test/gitserver"
	"github.com/rollgate/rollgate/test/kube"
	"github.com/rollgate/rollgate/test/kwok"
	"github.com/rollgate/rollgate/test/repo"
	"github.com/rollgate/rollgate/test/rig"
	"github.com/rollgate/rollgate/test/testlog"
)

const (
	// shardKey is Flux's sharding label.
	shardKey = "sharding.fluxcd.io/key"
	// ns holds the applications.
	ns = "demo"
	// fluxManager is the field manager Flux's kustomize-controller
	// applies with.
	fluxManager = "kustomize-controller"
)

// instance is one rollgate controller of the shard set.
type instance struct {
	name     string
	selector string
	// writes records every write request this instance sent to the API
	// server (see writeLog).
	writes *writeLog
	// webhookPort is where its webhook server listens.
	webhookPort int
	// probeAddr serves its /healthz and /readyz.
	probeAddr string
	stop      func()
}

// world is the cluster, the Git server, the webhook address shared by
// every instance, and the instances.
type world struct {
	t         *testing.T
	cluster   *kwok.Cluster
	c         client.Client
	git       *gitserver.Server
	lb        *Balancer
	instances map[string]*instance
	// log keeps every instance's log, printed when the test failed.
	log *testlog.Buffer
}

// newWorld starts the cluster and the Git server, then one instance per
// selector, all registering the webhooks at one balanced address.
func newWorld(t *testing.T, selectors map[string]string) *world {
	t.Helper()
	scheme := rig.NewScheme(t)
	cl := kwok.Start(t, kwok.Options{Nodes: 3, Scheme: scheme})
	w := &world{t: t, cluster: cl, c: cl.Client, git: gitserver.Start(t, gitserver.Options{}),
		instances: map[string]*instance{}, log: &testlog.Buffer{}}
	w.applyFiles(filepath.Join(repo.Root(), "charts", "rollgate", "crds"))
	w.applyFiles(repo.HTTPRouteCRD("standard"))
	w.ensureNamespace("rollgate-system")
	w.ensureNamespace(ns)
	w.lb = StartBalancer(t)
	names := make([]string, 0, len(selectors))
	for name := range selectors {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		w.start(name, selectors[name])
	}
	t.Cleanup(func() {
		for _, in := range w.instances {
			in.stop()
		}
		w.log.Report(t, "instances")
	})
	w.eventually(60*time.Second, "webhooks registered with a CA bundle", func(ctx context.Context) (bool, error) {
		var m unstructured.Unstructured
		m.SetAPIVersion("admissionregistration.k8s.io/v1")
		m.SetKind("MutatingWebhookConfiguration")
		if err := w.c.Get(ctx, client.ObjectKey{Name: "rollgate"}, &m); err != nil {
			return false, nil
		}
		hooks, _, _ := unstructured.NestedSlice(m.Object, "webhooks")
		if len(hooks) == 0 {
			return false, nil
		}
		bundle, _, _ := unstructured.NestedString(hooks[0].(map[string]any), "clientConfig", "caBundle")
		return bundle != "", nil
	})
	return w
}

// start runs one instance in-process, as `rollgate controller
// --watch-label-selector <selector> --leader-elect` with the defaults of
// the flags (its Lease name among them), its webhook server on its own
// port and the webhook registered at the balancer's address.
func (w *world) start(name, selector string) {
	w.t.Helper()
	in := &instance{name: name, selector: selector, writes: &writeLog{}, webhookPort: rig.FreePort(w.t),
		probeAddr: fmt.Sprintf("127.0.0.1:%d", rig.FreePort(w.t))}
	cfg := rest.CopyConfig(w.cluster.RESTConfig)
	cfg.WrapTransport = in.writes.wrap
	logger := zap.New(zap.UseDevMode(true), zap.WriteTo(w.log.Prefixed(name+": ")))
	mgr, err := reconciler.NewManager(cfg, reconciler.ManagerOptions{
		Logger:             logger,
		LeaderElect:        true,
		ProbeAddr:          in.probeAddr,
		WatchLabelSelector: selector,
		// Several managers in one process register the same controller
		// names.
		Restartable: true,
	}, reconciler.Options{
		Namespace:          "rollgate-system",
		Concurrent:         2,
		LuaConfigMap:       "rollgate-lua",
		WebhookURL:         w.lb.URL(),
		WebhookHost:        "127.0.0.1",
		WebhookPort:        in.webhookPort,
		WebhookSecret:      "rollgate-webhook-cert",
		GitWebhookAddr:     "0",
		GitDefaultInterval: time.Second,
		GitStatusBranch:    "rollgate/status",
		GitStatusWindow:    time.Second,
		GitInsecureHTTP:    true,
	})
	if err != nil {
		w.t.Fatalf("instance %s: %v", name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var startErr error
	go func() {
		startErr = mgr.Start(ctx)
		close(done)
	}()
	in.stop = func() {
		cancel()
		<-done
		if startErr != nil {
			w.t.Errorf("instance %s: %v", name, startErr)
		}
	}
	w.instances[name] = in
	// Behind the balancer only once ready, as behind the chart's Service:
	// an instance whose certificate is not loaded yet fails every TLS
	// handshake, and the API server's call with it.
	w.lb.AddWhenReady(w.t, name, in.webhookPort, in.probeAddr, 60*time.Second, func() error {
		select {
		case <-done:
			return fmt.Errorf("stopped before it was ready: %v", startErr)
		default:
			return nil
		}
	})
}

func (w *world) ensureNamespace(name string) { kube.EnsureNamespace(w.t, w.c, name) }

// applyFiles creates every object of a YAML file and waits for CRDs to be
// established.
func (w *world) applyFiles(path string) { kube.ApplyFiles(w.t, w.c, path, "e2e") }

func decode(t *testing.T, docs string) []*unstructured.Unstructured { return kube.Decode(t, docs) }

func (w *world) applyYAML(docs string) {
	w.t.Helper()
	kube.ApplyYAML(w.t, w.c, docs, fluxManager)
}

// applyThroughPinned applies docs as Flux would, right after the balancer
// was pinned: the API server may still send one call over a kept-alive
// connection that the balancer closed (a "broken pipe" to the webhook);
// Flux applies again at its next interval, the test at once.
func (w *world) applyThroughPinned(docs string) {
	w.t.Helper()
	for _, u := range decode(w.t, docs) {
		for attempt := 1; ; attempt++ {
			obj := u.DeepCopy()
			obj.SetManagedFields(nil)
			obj.SetResourceVersion("")
			err := w.c.Patch(context.Background(), obj, client.Apply, client.FieldOwner(fluxManager), client.ForceOwnership)
			if err == nil {
				break
			}
			if attempt == 3 || !strings.Contains(err.Error(), "failed calling webhook") {
				w.t.Fatalf("apply %s %s: %v", u.GetKind(), u.GetName(), err)
			}
			w.t.Logf("apply %s %s again: %v", u.GetKind(), u.GetName(), err)
		}
	}
}

// eventually polls cond until it holds or timeout passes.
func (w *world) eventually(timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	w.t.Helper()
	kube.Eventually(w.t, timeout, what, cond)
}

func (w *world) rollout(name string) *v1alpha1.Rollout {
	w.t.Helper()
	ro := &v1alpha1.Rollout{}
	if err := w.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, ro); err != nil {
		w.t.Fatal(err)
	}
	return ro
}

// pods counts the running pods of app by image.
func (w *world) pods(app string) map[string]int {
	var list corev1.PodList
	if err := w.c.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{"app": app}); err != nil {
		w.t.Fatal(err)
	}
	out := map[string]int{}
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out[p.Spec.Containers[0].Image]++
		}
	}
	return out
}

// writeLog records the write requests (every method but GET) one
// instance sent to the API server and the API server accepted, from its own
// HTTP transport: what it wrote cannot be mistaken for another instance's
// writes.
type writeLog struct {
	mu     sync.Mutex
	writes []string // "<METHOD> <path>"
}

func (l *writeLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		// A write the API server refused (a status patch of a Rollout
		// relabelled meanwhile fails its optimistic lock) changed nothing.
		if req.Method != http.MethodGet && err == nil && resp.StatusCode < 300 {
			l.mu.Lock()
			l.writes = append(l.writes, req.Method+" "+req.URL.Path)
			l.mu.Unlock()
		}
		return resp, err
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// mark returns how many writes are recorded, to look only at later ones.
func (l *writeLog) mark() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.writes)
}

// of returns the writes since mark to the objects of resource (plural,
// such as "rollouts") named name in ns, subresources included.
func (l *writeLog) of(since int, resource, name string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	prefix := "/namespaces/" + ns + "/" + resource + "/" + name
	var out []string
	for _, w := range l.writes[since:] {
		_, p, _ := strings.Cut(w, " ")
		if i := strings.Index(p, prefix); i >= 0 {
			if rest := p[i+len(prefix):]; rest == "" || strings.HasPrefix(rest, "/") {
				out = append(out, w)
			}
		}
	}
	return out
}

// leases returns the names of the Leases in the controllers' namespace.
func (w *world) leases() []string {
	var list coordinationv1.LeaseList
	if err := w.c.List(context.Background(), &list, client.InNamespace("rollgate-system")); err != nil {
		w.t.Fatal(err)
	}
	var out []string
	for _, l := range list.Items {
		if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
			out = append(out, l.Name)
		}
	}
	sort.Strings(out)
	return out
}
