package demo

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/test/flux"
	"github.com/rollgate/rollgate/test/gitserver"
	"github.com/rollgate/rollgate/test/kwok"
	"github.com/rollgate/rollgate/test/proc"
	"github.com/rollgate/rollgate/test/repo"
	"github.com/rollgate/rollgate/test/rig"
)

// fieldManager is the field manager of what the demo applies as the
// platform team (CRDs, namespaces, the Flux objects).
const fieldManager = "rollgate-demo"

// world is everything the demo starts. close tears it down.
type world struct {
	opts    Options
	p       *printer
	tmp     string
	tools   tools
	cluster *kwok.Cluster
	c       client.Client
	git     *gitserver.Server
	repoURL string
	// overlay replaces or adds files of the repository's first commit
	// (appFiles); nil for the demo.
	overlay map[string]string
	flux    *flux.Controllers
	// withNotification makes startFlux start notification-controller too,
	// and startRollgate forward rollgate's events to it (notification).
	withNotification bool
	notification     *flux.Notification
	procs            []*proc.Process
	// webhookAddr and gitWebhookAddr are the rollgate controller's
	// admission webhook and Git push endpoint.
	webhookAddr, gitWebhookAddr string
	// last is the latest observation of the live view and lastLine its
	// last printed line.
	last     *observation
	lastLine string
}

// tools are the binaries and files the demo needs from bin/.
type tools struct {
	// rollgate is the controller and CLI binary; flux the folder with the
	// Flux controllers and their CRDs (see package flux).
	rollgate, flux string
}

func findTools(rollgate string) (tools, error) {
	t := tools{rollgate: rollgate, flux: filepath.Join(repo.ToolsDir(), "flux")}
	var errs []error
	for _, name := range []string{"flux/" + flux.SourceController, "flux/" + flux.KustomizeController} {
		if _, err := repo.LookTool(name); err != nil {
			errs = append(errs, fmt.Errorf("%w (make tools-flux)", err))
		}
	}
	if _, err := os.Stat(filepath.Join(t.flux, "crds")); err != nil {
		errs = append(errs, fmt.Errorf("Flux CRDs: %w (make tools-flux)", err))
	}
	if _, err := os.Stat(rollgate); err != nil {
		errs = append(errs, fmt.Errorf("rollgate binary: %w (make build)", err))
	}
	return t, errors.Join(errs...)
}

// startCluster creates the kwok cluster and installs the CRDs: rollgate's,
// the Gateway API HTTPRoute and Flux's.
func (w *world) startCluster(ctx context.Context) error {
	scheme, err := rig.Scheme()
	if err != nil {
		return err
	}
	w.p.step("starting a Kubernetes cluster: kwok, 3 simulated nodes (real API server, scheduler, controllers)")
	if w.cluster, err = kwok.Create(ctx, kwok.Options{Nodes: 3, Scheme: scheme}); err != nil {
		return err
	}
	w.c = w.cluster.Client
	root := repo.Root()
	for _, path := range []string{
		filepath.Join(root, "charts", "rollgate", "crds"),
		repo.HTTPRouteCRD("standard"),
	} {
		if err := w.applyFiles(ctx, path); err != nil {
			return err
		}
	}
	if err := flux.InstallCRDs(ctx, w.cluster.Kubeconfig, w.tools.flux); err != nil {
		return err
	}
	for _, ns := range []string{Namespace, ControllerNamespace, FluxNamespace} {
		err := w.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	w.p.step("cluster up (%s); CRDs installed: rollgate, Gateway API HTTPRoute, Flux", w.cluster.RESTConfig.Host)
	return nil
}

// applyFiles applies every object of a YAML file, or of the *.yaml files of
// a folder, and waits for CRDs to be established.
func (w *world) applyFiles(ctx context.Context, path string) error {
	files := []string{path}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		files, _ = filepath.Glob(filepath.Join(path, "*.yaml"))
	}
	var crds []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		objs, err := w.applyYAML(ctx, string(data))
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		for _, u := range objs {
			if u.GetKind() == "CustomResourceDefinition" {
				crds = append(crds, u.GetName())
			}
		}
	}
	for _, name := range crds {
		if err := w.waitFor(ctx, 30*time.Second, "CRD "+name+" established", func(ctx context.Context) (bool, error) {
			return flux.Established(ctx, w.c, name), nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// applyYAML server-side applies every document of docs as the platform
// team.
func (w *world) applyYAML(ctx context.Context, docs string) ([]*unstructured.Unstructured, error) {
	objs, err := rig.DecodeAll(docs)
	if err != nil {
		return nil, err
	}
	for _, u := range objs {
		if err := w.c.Patch(ctx, u, client.Apply, client.FieldOwner(fieldManager), client.ForceOwnership); err != nil {
			return objs, fmt.Errorf("apply %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	return objs, nil
}

// startGit starts the Git server and seeds the application repository.
func (w *world) startGit() error {
	var err error
	if w.git, err = gitserver.New(gitserver.Options{}); err != nil {
		return err
	}
	if err := recordGitRoot(w.tmp, w.git.Root); err != nil {
		return err
	}
	url := w.git.URL + "/" + RepoName + ".git"
	files := appFiles(url)
	maps.Copy(files, w.overlay)
	if w.repoURL, err = w.git.CreateRepo(RepoName, files); err != nil {
		return err
	}
	head, err := w.git.Head(RepoName, Branch)
	if err != nil {
		return err
	}
	w.p.step("Git server up; repository %s seeded: %s/{%s}.yaml (main@%s)", w.repoURL, AppPath, seededNames(w.overlay), short(head))
	return nil
}

// startRollgate runs `rollgate controller` as a child process, the way a
// developer runs it next to a development cluster, and waits until its
// admission webhook is registered and serving.
func (w *world) startRollgate(ctx context.Context) error {
	ports, err := proc.FreePorts(3)
	if err != nil {
		return err
	}
	w.webhookAddr = fmt.Sprintf("127.0.0.1:%d", ports[0])
	w.gitWebhookAddr = fmt.Sprintf("127.0.0.1:%d", ports[2])
	args := []string{"controller",
		"--kubeconfig", w.cluster.Kubeconfig,
		"--namespace", ControllerNamespace,
		"--webhook-url", "https://" + w.webhookAddr,
		"--webhook-bind-host", "127.0.0.1",
		"--webhook-port", fmt.Sprint(ports[0]),
		"--metrics-bind-address", "0",
		"--health-probe-bind-address", fmt.Sprintf("127.0.0.1:%d", ports[1]),
		"--git-webhook-bind-address", w.gitWebhookAddr,
	}
	if w.notification != nil {
		args = append(args, "--events-addr", w.notification.EventsURL)
	}
	controller, err := proc.Start(w.tmp, "rollgate-controller", w.tools.rollgate, args, nil)
	if err != nil {
		return err
	}
	w.procs = append(w.procs, controller)
	err = w.waitFor(ctx, 60*time.Second, "the rollgate admission webhook", func(ctx context.Context) (bool, error) {
		var cfg admissionregistrationv1.MutatingWebhookConfiguration
		if err := w.c.Get(ctx, client.ObjectKey{Name: "rollgate"}, &cfg); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return proc.Listening(w.webhookAddr), nil
	})
	if err != nil {
		return err
	}
	w.p.step("rollgate controller running: %s controller (webhook https://%s)", w.tools.rollgate, w.webhookAddr)
	return nil
}

// waitFor waits until cond holds (see rig.Wait), failing early when a
// child process died.
func (w *world) waitFor(ctx context.Context, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) error {
	_, err := rig.Wait(ctx, timeout, what, func(ctx context.Context) (bool, string, error) {
		for _, p := range w.procs {
			if err := p.Exited(); err != nil {
				return false, "", err
			}
		}
		if w.flux != nil {
			if err := w.flux.Exited(); err != nil {
				return false, "", err
			}
		}
		if w.notification != nil {
			if err := w.notification.Exited(); err != nil {
				return false, "", err
			}
		}
		ok, err := cond(ctx)
		return ok, "", err
	})
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// close stops everything the demo started, children first, and removes its
// temporary files.
func (w *world) close() error {
	errs := []error{proc.StopAll(w.procs, 10*time.Second)}
	if w.notification != nil {
		errs = append(errs, w.notification.Stop())
	}
	if w.flux != nil {
		errs = append(errs, w.flux.Stop())
	}
	if w.cluster != nil {
		errs = append(errs, w.cluster.Delete())
	}
	if w.git != nil {
		errs = append(errs, w.git.Close())
	}
	if w.tmp != "" {
		errs = append(errs, os.RemoveAll(w.tmp))
	}
	return errors.Join(errs...)
}

// failureReport returns the last lines of the log of every child that is
// still running (one that exited is named in the error).
func (w *world) failureReport() string {
	var b strings.Builder
	if w.flux != nil && w.flux.Exited() == nil {
		for _, name := range []string{flux.SourceController, flux.KustomizeController} {
			fmt.Fprintf(&b, "\n== %s: last lines of its log ==\n%s\n", name, proc.Tail(filepath.Join(w.tmp, name+".log"), 10))
		}
	}
	if w.notification != nil && w.notification.Exited() == nil {
		name := flux.NotificationController
		fmt.Fprintf(&b, "\n== %s: last lines of its log ==\n%s\n", name, proc.Tail(filepath.Join(w.tmp, name+".log"), 10))
	}
	for _, p := range w.procs {
		if p.Exited() == nil {
			fmt.Fprintf(&b, "\n== %s: last lines of its log ==\n%s\n", p.Name, proc.Tail(p.Log, 10))
		}
	}
	return b.String()
}

// seededNames lists the application's files of the first commit, for the
// story: the demo's four, then those the overlay adds.
func seededNames(overlay map[string]string) string {
	names := []string{"deployment", "rollout", "repository", "kustomization"}
	base := appFiles("")
	var extra []string
	for p := range overlay {
		name, inApp := strings.CutPrefix(p, AppPath+"/")
		if _, ok := base[p]; !ok && inApp && !strings.Contains(name, "/") {
			extra = append(extra, strings.TrimSuffix(name, ".yaml"))
		}
	}
	sort.Strings(extra)
	return strings.Join(append(names, extra...), ",")
}

func short(hash string) string {
	if len(hash) > 7 {
		return hash[:7]
	}
	return hash
}
