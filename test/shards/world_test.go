package shards

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/reconciler"
	"github.com/rollgate/rollgate/test/gitserver"
	"github.com/rollgate/rollgate/test/inproc"
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
	fluxManager = rig.FluxManager
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
	// World's namespace is demo, where the applications live.
	rig.World
	cluster   *kwok.Cluster
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
	w := &world{World: rig.World{T: t, C: cl.Client, NS: ns}, cluster: cl, git: gitserver.Start(t, gitserver.Options{}),
		instances: map[string]*instance{}, log: &testlog.Buffer{}}
	w.ApplyFiles(filepath.Join(repo.Root(), "charts", "rollgate", "crds"))
	w.ApplyFiles(repo.HTTPRouteCRD("standard"))
	w.EnsureNamespace("rollgate-system")
	w.EnsureNamespace(ns)
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
	w.Eventually(60*time.Second, "webhooks registered with a CA bundle", func(ctx context.Context) (bool, error) {
		var m unstructured.Unstructured
		m.SetAPIVersion("admissionregistration.k8s.io/v1")
		m.SetKind("MutatingWebhookConfiguration")
		if err := w.C.Get(ctx, client.ObjectKey{Name: "rollgate"}, &m); err != nil {
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
	w.T.Helper()
	in := &instance{name: name, selector: selector, writes: &writeLog{}, webhookPort: rig.FreePort(w.T),
		probeAddr: fmt.Sprintf("127.0.0.1:%d", rig.FreePort(w.T))}
	cfg := rest.CopyConfig(w.cluster.RESTConfig)
	cfg.WrapTransport = in.writes.wrap
	// The flags' defaults: webhook configurations named rollgate, no Git
	// push endpoint.
	opts := inproc.Options("rollgate-system", "")
	opts.WebhookURL, opts.WebhookHost, opts.WebhookPort = w.lb.URL(), "127.0.0.1", in.webhookPort
	opts.GitWebhookAddr = "0"
	ctrl, err := inproc.Run(inproc.Config{REST: cfg, Log: w.log.Prefixed(name + ": "), Options: opts, Manager: reconciler.ManagerOptions{
		LeaderElect:        true,
		ProbeAddr:          in.probeAddr,
		WatchLabelSelector: selector,
		// Several managers in one process register the same controller
		// names.
		Restartable: true,
	}})
	if err != nil {
		w.T.Fatalf("instance %s: %v", name, err)
	}
	in.stop = func() {
		if err := ctrl.Stop(); err != nil {
			w.T.Errorf("instance %s: %v", name, err)
		}
	}
	w.instances[name] = in
	// Behind the balancer only once ready, as behind the chart's Service:
	// an instance whose certificate is not loaded yet fails every TLS
	// handshake, and the API server's call with it.
	w.lb.AddWhenReady(w.T, name, in.webhookPort, in.probeAddr, 60*time.Second, ctrl.Exited)
}

// applyThroughPinned applies docs as Flux would, right after the balancer
// was pinned: the API server may still send one call over a kept-alive
// connection that the balancer closed (a "broken pipe" to the webhook);
// Flux applies again at its next interval, the test at once.
func (w *world) applyThroughPinned(docs string) {
	w.T.Helper()
	for _, u := range w.Decode(docs) {
		for attempt := 1; ; attempt++ {
			obj := u.DeepCopy()
			obj.SetManagedFields(nil)
			obj.SetResourceVersion("")
			err := w.C.Patch(context.Background(), obj, client.Apply, client.FieldOwner(fluxManager), client.ForceOwnership)
			if err == nil {
				break
			}
			if attempt == 3 || !strings.Contains(err.Error(), "failed calling webhook") {
				w.T.Fatalf("apply %s %s: %v", u.GetKind(), u.GetName(), err)
			}
			w.T.Logf("apply %s %s again: %v", u.GetKind(), u.GetName(), err)
		}
	}
}

// writeLog records the write requests (every method but GET) one
// instance sent to the API server and the API server accepted, from its own
// HTTP transport: what it wrote cannot be mistaken for another instance's
// writes.
type writeLog struct {
	mu     sync.Mutex
	writes []string // "<METHOD> <path>"
	// versions holds each write's resourceVersion as its answer gave it
	// (0 when the answer was not JSON, as for built-in kinds).
	versions []uint64
}

func (l *writeLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		// A write the API server refused (a status patch of a Rollout
		// relabelled meanwhile fails its optimistic lock) changed nothing.
		if req.Method != http.MethodGet && err == nil && resp.StatusCode < 300 {
			var rv uint64
			if rv, err = answeredVersion(resp); err != nil {
				return nil, err
			}
			l.mu.Lock()
			l.writes = append(l.writes, req.Method+" "+req.URL.Path)
			l.versions = append(l.versions, rv)
			l.mu.Unlock()
		}
		return resp, err
	})
}

// answeredVersion reads the resourceVersion of the object a JSON answer
// carries (0 for any other answer), leaving the body for the client.
func answeredVersion(resp *http.Response) (uint64, error) {
	if resp.Body == nil || !strings.Contains(resp.Header.Get("Content-Type"), "json") {
		return 0, nil
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return 0, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	var o struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if json.Unmarshal(b, &o) != nil {
		return 0, nil
	}
	rv, _ := strconv.ParseUint(o.Metadata.ResourceVersion, 10, 64)
	return rv, nil
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
	return l.ofAfter(since, 0, resource, name)
}

// ofAfter is of without the writes whose answer carried a resourceVersion
// of at most rv: the writes the API server applied before the one that
// answered rv. The API server's resourceVersions are etcd revisions here,
// which grow with every write; a write whose answer carried none is kept.
func (l *writeLog) ofAfter(since int, rv uint64, resource, name string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	prefix := "/namespaces/" + ns + "/" + resource + "/" + name
	var out []string
	for i, w := range l.writes[since:] {
		if v := l.versions[since+i]; v != 0 && v <= rv {
			continue
		}
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
	if err := w.C.List(context.Background(), &list, client.InNamespace("rollgate-system")); err != nil {
		w.T.Fatal(err)
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
