// Package e2e tells rollgate's story end to end on a real control plane
// (kwok: kube-apiserver, controller-manager, scheduler, fake kubelets), with
// a real Git server on loopback and the controller running in-process
// built by reconciler.NewManager, as `rollgate controller --webhook-url
// https://127.0.0.1:<port>` builds it next to a development cluster (only
// the intervals are shorter).
package e2e

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler"
	"github.com/rollgate/rollgate/reconciler/rollout"
	"github.com/rollgate/rollgate/test/gitserver"
	"github.com/rollgate/rollgate/test/inproc"
	"github.com/rollgate/rollgate/test/kube"
	"github.com/rollgate/rollgate/test/kwok"
	"github.com/rollgate/rollgate/test/repo"
	"github.com/rollgate/rollgate/test/rig"
	"github.com/rollgate/rollgate/test/testlog"
)

// fluxManager is the field manager Flux's kustomize-controller applies with.
const fluxManager = "kustomize-controller"

// world is a story's namespace (or, for the fleet stories, a cluster of
// its own), its Git server and its rollgate controller.
type world struct {
	t       *testing.T
	cluster *kwok.Cluster
	c       client.Client
	git     *gitserver.Server
	// ns is the namespace the story's objects live in. The stories are
	// written for namespace demo: applyYAML and inNS move their YAML here.
	ns   string
	stop func()
	// ctrlOpts are the controller's options (its namespace, webhook
	// configuration name and scope), kept for a restart.
	ctrlOpts reconciler.Options
	watchOwn bool
	// log keeps the controller's log; the test prints it when it failed,
	// after the failure.
	log *testlog.Buffer
}

// newWorld gives the story a namespace of its own on the package's shared
// kwok cluster (three nodes, the rollgate and Gateway API CRDs; see
// sharedCluster), a Git server, and a rollgate controller that watches
// that namespace only (--watch-all-namespaces=false, with its own webhook
// configurations): stories side by side neither see nor admit each
// other's objects. The namespace goes when the story ends.
func newWorld(t *testing.T) *world {
	t.Helper()
	cl := theCluster.get(t)
	ns := kube.StoryNamespace(t.Name())
	w := &world{t: t, cluster: cl, c: cl.Client, git: gitserver.Start(t, gitserver.Options{}), ns: ns, watchOwn: true, log: &testlog.Buffer{}}
	w.ensureNamespace(ns)
	w.ctrlOpts = controllerOptions(ns, "rollgate-"+ns)
	w.startController()
	t.Cleanup(func() {
		// The namespace goes first, while the controller still runs, and
		// every story ends with a deletion of everything it left, in
		// whatever state it left it (docs/day-two.md: a deletion always
		// finishes). A namespace left Terminating behind a stopped
		// controller's finalizers would also stay for good, and kube-
		// controller-manager's namespace controller looks at the content
		// of every Terminating namespace again every few seconds, all
		// through one client limited to 20 requests/s: with forty of them
		// left by earlier stories it took minutes to start deleting the
		// next one (TestNamespaceDeletedMidRelease failed CI that way).
		w.deleteNamespace()
		w.stopController()
		w.log.Report(t, "controller of namespace "+ns)
		ctx := context.Background()
		for _, o := range []client.Object{
			&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: w.ctrlOpts.WebhookConfigName}},
			&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: w.ctrlOpts.WebhookConfigName}},
		} {
			if err := w.c.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("cleanup: delete %T %s: %v", o, o.GetName(), err)
			}
		}
		w.releaseNamespace()
	})
	return w
}

// namespaceGoneWithin bounds how long a story's namespace may take to go
// once deleted with its controller running.
const namespaceGoneWithin = 60 * time.Second

// deleteNamespace deletes the story's namespace, if its controller still
// runs, and fails the story unless it is gone within namespaceGoneWithin,
// naming what kept it.
func (w *world) deleteNamespace() {
	if w.stop == nil {
		return // a story that ended with its controller stopped: releaseNamespace
	}
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.ns}}
	if err := w.c.Delete(ctx, ns); err != nil {
		if !apierrors.IsNotFound(err) {
			w.t.Errorf("cleanup: delete namespace %s: %v", w.ns, err)
		}
		return
	}
	err := wait.PollUntilContextTimeout(ctx, kube.Poll, namespaceGoneWithin, true, func(ctx context.Context) (bool, error) {
		err := w.c.Get(ctx, client.ObjectKeyFromObject(ns), ns)
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	if err != nil {
		var why []string
		for _, c := range ns.Status.Conditions {
			if c.Status == corev1.ConditionTrue {
				why = append(why, c.Message)
			}
		}
		w.t.Errorf("cleanup: namespace %s, deleted with its controller running, still there after %s: %s",
			w.ns, namespaceGoneWithin, strings.Join(why, "; "))
	}
}

// releaseNamespace makes sure the story's namespace goes even when its
// controller is stopped: rollgate's finalizer is taken off what is left,
// as a user would after an uninstall, and the namespace is deleted.
func (w *world) releaseNamespace() {
	ctx := context.Background()
	var ros v1alpha1.RolloutList
	if err := w.c.List(ctx, &ros, client.InNamespace(w.ns)); err != nil {
		w.t.Errorf("cleanup: list Rollouts: %v", err)
	}
	for i := range ros.Items {
		ro := &ros.Items[i]
		if !controllerutil.ContainsFinalizer(ro, rollout.Finalizer) {
			continue
		}
		patch := client.MergeFrom(ro.DeepCopy())
		controllerutil.RemoveFinalizer(ro, rollout.Finalizer)
		if err := w.c.Patch(ctx, ro, patch); err != nil && !apierrors.IsNotFound(err) {
			w.t.Errorf("cleanup: remove the finalizer of Rollout %s: %v", ro.Name, err)
		}
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.ns}}
	if err := w.c.Delete(ctx, ns); err != nil && !apierrors.IsNotFound(err) {
		w.t.Errorf("cleanup: delete namespace %s: %v", w.ns, err)
	}
}

// newWorldWith is a world on a kwok cluster of its own, with a Git server
// several worlds (clusters) share: the fleet stories, whose clusters
// each hold namespace demo, and whose controller watches every namespace
// as a default install does.
func newWorldWith(t *testing.T, git *gitserver.Server) *world {
	t.Helper()
	scheme := rig.NewScheme(t)
	cl := kwok.Start(t, kwok.Options{Nodes: 3, Scheme: scheme})
	w := &world{t: t, cluster: cl, c: cl.Client, git: git, ns: "demo", log: &testlog.Buffer{}}
	installCRDs(t, cl.Client)
	w.ensureNamespace("rollgate-system")
	w.ctrlOpts = controllerOptions("rollgate-system", "rollgate")
	w.startController()
	t.Cleanup(func() {
		w.stopController()
		w.log.Report(t, "controller of cluster "+cl.Name)
	})
	return w
}

// installCRDs applies rollgate's CRDs and Gateway API's HTTPRoute.
func installCRDs(t testing.TB, c client.Client) {
	kube.ApplyFiles(t, c, filepath.Join(repo.Root(), "charts", "rollgate", "crds"), "e2e")
	kube.ApplyFiles(t, c, repo.HTTPRouteCRD("standard"), "e2e")
}

// sharedCluster is the package's kwok cluster, started by the first story
// that asks for it and deleted by TestMain.
type sharedCluster struct {
	once    sync.Once
	cluster *kwok.Cluster
	err     error
}

var theCluster sharedCluster

func (s *sharedCluster) get(t *testing.T) *kwok.Cluster {
	t.Helper()
	s.once.Do(func() {
		start := time.Now()
		s.cluster, s.err = kwok.Create(context.Background(), kwok.Options{Nodes: 3, Scheme: rig.NewScheme(t)})
		if s.err != nil {
			return
		}
		ok := t.Run("install CRDs", func(t *testing.T) { installCRDs(t, s.cluster.Client) })
		if !ok {
			s.err = errors.New("installing the CRDs failed")
		}
		t.Logf("shared kwok cluster %s ready in %v", s.cluster.Name, time.Since(start).Round(100*time.Millisecond))
	})
	if s.err != nil {
		t.Fatalf("shared kwok cluster: %v", s.err)
	}
	return s.cluster
}

// stop deletes the cluster, if one was started.
func (s *sharedCluster) stop() error {
	if s.cluster == nil {
		return nil
	}
	return s.cluster.Delete()
}

func (w *world) ensureNamespace(name string) { kube.EnsureNamespace(w.t, w.c, name) }

// createSecret creates the Secret ns/name holding data.
func (w *world) createSecret(ns, name string, data map[string][]byte) {
	w.t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
	if err := w.c.Create(context.Background(), s); err != nil {
		w.t.Fatalf("create Secret %s/%s: %v", ns, name, err)
	}
}

// applyFiles creates every object in a YAML file or folder and waits for
// CRDs to be established.
func (w *world) applyFiles(path string) { kube.ApplyFiles(w.t, w.c, path, "e2e") }

// decode decodes docs, moved to the story's namespace (inNS).
func (w *world) decode(docs string) []*unstructured.Unstructured {
	return kube.Decode(w.t, w.inNS(docs))
}

// apply server-side applies obj as fieldManager, the way Flux applies a
// Git change.
func (w *world) apply(obj *unstructured.Unstructured, fieldManager string) {
	w.t.Helper()
	kube.Apply(w.t, w.c, obj, fieldManager)
}

// applyYAML applies every document of docs as Flux would, moved from
// namespace demo to the story's (inNS).
func (w *world) applyYAML(docs string) {
	w.t.Helper()
	kube.ApplyYAML(w.t, w.c, w.inNS(docs), fluxManager)
}

// inNS moves docs, written for namespace demo, to the story's namespace:
// what the stories apply and what they commit to Git.
func (w *world) inNS(docs string) string { return kube.InNamespace(docs, w.ns) }

// controllerOptions are the options of a story's controller in namespace
// ns, registering its webhooks as webhookConfig.
func controllerOptions(ns, webhookConfig string) reconciler.Options {
	return inproc.Options(ns, webhookConfig)
}

// startController runs the controller in-process against the cluster,
// registering its webhook with a loopback URL.
func (w *world) startController() {
	w.t.Helper()
	w.stop = inproc.Start(w.t, w.cluster.RESTConfig, w.c, reconciler.ManagerOptions{
		// A restarted controller registers the same controller name again
		// in this process' metrics registry.
		Restartable:       true,
		WatchOwnNamespace: w.watchOwn,
	}, w.ctrlOpts, w.log)
}

func (w *world) stopController() {
	if w.stop != nil {
		w.stop()
		w.stop = nil
	}
}

// eventually polls cond until it holds or timeout passes, and logs how
// long it took.
func (w *world) eventually(timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	w.t.Helper()
	start := time.Now()
	kube.Eventually(w.t, timeout, what, cond)
	w.t.Logf("%s: after %s", what, time.Since(start).Round(100*time.Millisecond))
}

// holds checks that check passes for d, from now on (see kube.Holds).
func (w *world) holds(d time.Duration, what string, check func(ctx context.Context) error) {
	w.t.Helper()
	kube.Holds(w.t, d, what, check)
}

// rollout reads a Rollout.
func (w *world) rollout(ns, name string) *v1alpha1.Rollout {
	ro := &v1alpha1.Rollout{}
	if err := w.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, ro); err != nil {
		w.t.Fatal(err)
	}
	return ro
}

// update reads obj afresh, changes it with mutate and writes it back,
// again on a conflict: the controller writes the status of the same
// objects meanwhile, and a user's kubectl edit retries the same way.
func (w *world) update(obj client.Object, mutate func()) {
	w.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		if err := w.c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		mutate()
		return w.c.Update(context.Background(), obj)
	})
	if err != nil {
		w.t.Fatalf("updating %s: %v", client.ObjectKeyFromObject(obj), err)
	}
}

// pods counts the pods of a Deployment by image: ready and total.
func (w *world) pods(ns, app string) map[string][2]int {
	out, err := kube.PodsByImage(context.Background(), w.c, ns, app)
	if err != nil {
		w.t.Fatal(err)
	}
	return out
}

func (w *world) deployment(ns, name string) *appsv1.Deployment {
	d := &appsv1.Deployment{}
	if err := w.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
		w.t.Fatal(err)
	}
	return d
}

// givenAppFromGit is the start of the Git stories: Git repository "app"
// holds rolloutYAML at apps/echoserver/rollout.yaml; the Repository
// app-repo (its spec extended by repoSpec, a flow-map fragment such as
// "commit: {...}") points at it with a 1 s fetch interval and status
// window; v1 of the echoserver app and the Rollout are applied, and the
// story waits until v1 runs under the Rollout, Healthy.
// givenRepository creates Git repository app holding files and applies
// Repository app-repo for it (appRepository, with spec); it returns the
// repository's URL.
func (w *world) givenRepository(files map[string]string, spec string) string {
	w.t.Helper()
	url, err := w.git.CreateRepo("app", files)
	if err != nil {
		w.t.Fatal(err)
	}
	w.applyYAML(appRepository(url, spec))
	return url
}

// appRepository is Repository app-repo for the Git repository at url,
// fetched every second and its status written within a second; spec adds
// fields to its spec (a flow mapping's entries, "releaseRules: {...}").
func appRepository(url, spec string) string {
	if spec != "" {
		spec = ", " + spec
	}
	return fmt.Sprintf(`
apiVersion: rollgate.dev/v1alpha1
kind: Repository
metadata: {name: app-repo, namespace: demo}
spec: {url: %q, branch: main, interval: 1s, status: {window: 1s}%s}
`, url, spec)
}

func (w *world) givenAppFromGit(rolloutYAML, repoSpec string) {
	w.t.Helper()
	w.givenRepository(map[string]string{"apps/echoserver/rollout.yaml": w.inNS(rolloutYAML)}, repoSpec)
	w.applyYAML(echoApp("echo:1.0"))
	w.applyYAML(rolloutYAML)
	w.eventually(60*time.Second, "v1 running and the Rollout healthy", func(ctx context.Context) (bool, error) {
		ro := w.rollout(w.ns, "echoserver")
		return w.pods(w.ns, "echoserver")["echo:1.0"] == [2]int{5, 5} && ro.Status.Phase == v1alpha1.PhaseHealthy &&
			conditions.IsReady(ro) && w.deployment(w.ns, "echoserver").Labels[v1alpha1.LabelControlled] != "", nil
	})
}
