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
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler"
	"github.com/rollgate/rollgate/reconciler/rollout"
	"github.com/rollgate/rollgate/test/gitserver"
	"github.com/rollgate/rollgate/test/inproc"
	"github.com/rollgate/rollgate/test/kwok"
	"github.com/rollgate/rollgate/test/repo"
	"github.com/rollgate/rollgate/test/rig"
	"github.com/rollgate/rollgate/test/testlog"
)

// fluxManager is the field manager Flux's kustomize-controller applies with.
const fluxManager = rig.FluxManager

// world is a story's namespace (or, for the fleet stories, a cluster of
// its own), its Git server and its rollgate controller.
type world struct {
	// World's namespace is the story's own: the stories are written for
	// namespace demo, and its ApplyYAML and InNS move their YAML there.
	rig.World
	cluster *kwok.Cluster
	git     *gitserver.Server
	stop    func()
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
	ns := rig.StoryNamespace(t.Name())
	w := &world{World: rig.World{T: t, C: cl.Client, NS: ns}, cluster: cl, git: gitserver.Start(t, gitserver.Options{}), watchOwn: true, log: &testlog.Buffer{}}
	w.EnsureNamespace(ns)
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
			if err := w.C.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
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
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.NS}}
	if err := w.C.Delete(ctx, ns); err != nil {
		if !apierrors.IsNotFound(err) {
			w.T.Errorf("cleanup: delete namespace %s: %v", w.NS, err)
		}
		return
	}
	_, err := rig.Wait(ctx, namespaceGoneWithin, "namespace "+w.NS+" gone", func(ctx context.Context) (bool, string, error) {
		err := w.C.Get(ctx, client.ObjectKeyFromObject(ns), ns)
		return apierrors.IsNotFound(err), "", client.IgnoreNotFound(err)
	})
	if err != nil {
		var why []string
		for _, c := range ns.Status.Conditions {
			if c.Status == corev1.ConditionTrue {
				why = append(why, c.Message)
			}
		}
		w.T.Errorf("cleanup: namespace %s, deleted with its controller running, still there after %s: %s",
			w.NS, namespaceGoneWithin, strings.Join(why, "; "))
	}
}

// releaseNamespace makes sure the story's namespace goes even when its
// controller is stopped: rollgate's finalizer is taken off what is left,
// as a user would after an uninstall, and the namespace is deleted.
func (w *world) releaseNamespace() {
	ctx := context.Background()
	var ros v1alpha1.RolloutList
	if err := w.C.List(ctx, &ros, client.InNamespace(w.NS)); err != nil {
		w.T.Errorf("cleanup: list Rollouts: %v", err)
	}
	for i := range ros.Items {
		ro := &ros.Items[i]
		if !controllerutil.ContainsFinalizer(ro, rollout.Finalizer) {
			continue
		}
		patch := client.MergeFrom(ro.DeepCopy())
		controllerutil.RemoveFinalizer(ro, rollout.Finalizer)
		if err := w.C.Patch(ctx, ro, patch); err != nil && !apierrors.IsNotFound(err) {
			w.T.Errorf("cleanup: remove the finalizer of Rollout %s: %v", ro.Name, err)
		}
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.NS}}
	if err := w.C.Delete(ctx, ns); err != nil && !apierrors.IsNotFound(err) {
		w.T.Errorf("cleanup: delete namespace %s: %v", w.NS, err)
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
	w := &world{World: rig.World{T: t, C: cl.Client, NS: "demo"}, cluster: cl, git: git, log: &testlog.Buffer{}}
	installCRDs(t, cl.Client)
	w.EnsureNamespace("rollgate-system")
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
	rig.ApplyFiles(t, c, filepath.Join(repo.Root(), "charts", "rollgate", "crds"), "e2e")
	rig.ApplyFiles(t, c, repo.HTTPRouteCRD("standard"), "e2e")
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

// controllerOptions are the options of a story's controller in namespace
// ns, registering its webhooks as webhookConfig.
func controllerOptions(ns, webhookConfig string) reconciler.Options {
	return inproc.Options(ns, webhookConfig)
}

// startController runs the controller in-process against the cluster,
// registering its webhook with a loopback URL.
func (w *world) startController() {
	w.T.Helper()
	w.stop = inproc.Start(w.T, w.cluster.RESTConfig, w.C, reconciler.ManagerOptions{
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
	w.T.Helper()
	url, err := w.git.CreateRepo("app", files)
	if err != nil {
		w.T.Fatal(err)
	}
	w.ApplyYAML(appRepository(url, spec))
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
	w.T.Helper()
	w.givenRepository(map[string]string{"apps/echoserver/rollout.yaml": w.InNS(rolloutYAML)}, repoSpec)
	w.ApplyYAML(echoApp("echo:1.0"))
	w.ApplyYAML(rolloutYAML)
	w.Eventually(60*time.Second, "v1 running and the Rollout healthy", func(ctx context.Context) (bool, error) {
		ro := w.Rollout(w.NS, "echoserver")
		return w.Pods(w.NS, "echoserver")["echo:1.0"] == [2]int{5, 5} && ro.Status.Phase == v1alpha1.PhaseHealthy &&
			conditions.IsReady(ro) && w.Deployment(w.NS, "echoserver").Labels[v1alpha1.LabelControlled] != "", nil
	})
}
