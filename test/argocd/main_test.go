package argocd_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/rollgate/rollgate/reconciler"
	"github.com/rollgate/rollgate/test/argocd"
	"github.com/rollgate/rollgate/test/gitserver"
	"github.com/rollgate/rollgate/test/inproc"
	"github.com/rollgate/rollgate/test/kwok"
	"github.com/rollgate/rollgate/test/repo"
	"github.com/rollgate/rollgate/test/rig"
)

// env is what every test of the package shares: one kwok cluster, one Git
// server, one Argo CD and one rollgate controller, started by TestMain.
// Each test works in namespaces and Applications of its own.
type env struct {
	cluster *kwok.Cluster
	c       client.Client
	git     *gitserver.Server
	argo    *argocd.Instance
	dir     string
	// stopController stops the in-process controller (nil while stopped:
	// TestInstallRollgateWithArgoCD runs the chart's instead).
	stopController func()
}

// shared is set by TestMain before any test runs.
var shared *env

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	e, stop, err := start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "start the Argo CD test environment: %v\n", err)
		if stop != nil {
			stop()
		}
		return 1
	}
	shared = e
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "Argo CD logs (last lines):\n%s\nrollgate log: %s\n", e.argo.Logs(30), filepath.Join(e.dir, "rollgate.log"))
	}
	stop()
	return code
}

// start brings up the environment and prints what it measured: the time
// to start and, on the way out, the resident memory of Argo CD's processes.
func start() (*env, func(), error) {
	begin := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "rollgate-argocd-test-")
	if err != nil {
		return nil, nil, err
	}
	e := &env{dir: dir}
	var stops []func()
	stop := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
		if os.Getenv("KEEP_ARGOCD_TEST_DIR") == "" {
			_ = os.RemoveAll(dir)
		}
	}
	scheme, err := rig.Scheme()
	if err != nil {
		return nil, stop, err
	}
	if e.cluster, err = kwok.Create(ctx, kwok.Options{Nodes: 3, Scheme: scheme}); err != nil {
		return nil, stop, err
	}
	stops = append(stops, func() { _ = e.cluster.Delete() })
	e.c = e.cluster.Client
	if e.git, err = gitserver.New(gitserver.Options{}); err != nil {
		return nil, stop, err
	}
	stops = append(stops, func() { _ = e.git.Close() })
	for _, f := range []string{
		filepath.Join(repo.Root(), "charts", "rollgate", "crds"),
		repo.HTTPRouteCRD("standard"),
	} {
		if _, err := e.kubectl(ctx, "", "apply", "--server-side", "-f", f); err != nil {
			return nil, stop, err
		}
	}
	if _, err := e.kubectl(ctx, "", "create", "namespace", inProcessNS); err != nil {
		return nil, stop, err
	}
	if e.stopController, err = e.startController(ctx); err != nil {
		return nil, stop, err
	}
	stops = append(stops, func() {
		if e.stopController != nil {
			e.stopController()
		}
	})
	// The repo-server renders Helm charts with `helm` from its PATH (as in
	// Argo CD's image): TestInstallRollgateWithArgoCD syncs charts/rollgate.
	helm, err := repo.LookTool("helm")
	if err != nil {
		return nil, stop, err
	}
	os.Setenv("PATH", filepath.Dir(helm)+string(os.PathListSeparator)+os.Getenv("PATH"))
	argoStart := time.Now()
	if e.argo, err = argocd.Start(ctx, argocd.Options{Kubeconfig: e.cluster.Kubeconfig, Dir: filepath.Join(dir, "argocd")}); err != nil {
		return nil, stop, err
	}
	stops = append(stops, func() {
		printRSS(e.argo.RSS())
		_ = e.argo.Stop()
	})
	fmt.Printf("Argo CD up in %.1f s (environment with kwok and rollgate: %.1f s)\n", time.Since(argoStart).Seconds(), time.Since(begin).Seconds())
	if err := e.installCustomizations(ctx); err != nil {
		return nil, stop, err
	}
	return e, stop, nil
}

func printRSS(rss map[string]int64) {
	var names []string
	var total int64
	for n, v := range rss {
		names = append(names, n)
		total += v
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Printf("RSS %s: %d MiB\n", n, rss[n]>>20)
	}
	fmt.Printf("RSS Argo CD total: %d MiB\n", total>>20)
}

// inProcessNS is the namespace, and the name of the webhook configurations,
// of the in-process controller: rollgate-system and "rollgate" are what
// TestInstallRollgateWithArgoCD's Application installs, as docs/install.md
// writes it.
const inProcessNS = "rollgate-dev"

// startController runs the rollgate controller in-process, as `rollgate
// controller --webhook-url https://127.0.0.1:<port>` runs next to a
// development cluster, with its log in a file.
func (e *env) startController(ctx context.Context) (func(), error) {
	logFile, err := os.OpenFile(filepath.Join(e.dir, "rollgate.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	logger := zap.New(zap.UseDevMode(true), zap.WriteTo(logFile))
	// Clients built outside the manager log through the global logger.
	ctrllog.SetLogger(logger)
	ctrl, err := inproc.Run(inproc.Config{
		REST: e.cluster.RESTConfig,
		Manager: reconciler.ManagerOptions{
			Logger: logger,
			// TestInstallRollgateWithArgoCD stops it and starts it again.
			Restartable: true,
		},
		Options: inproc.Options(inProcessNS, inProcessNS),
	})
	if err != nil {
		logFile.Close()
		return nil, err
	}
	stop := func() {
		ctrl.Stop()
		logFile.Close()
	}
	if _, err := ctrl.Ready(ctx, e.c, 60*time.Second); err != nil {
		stop()
		return nil, fmt.Errorf("the rollgate controller: %w", err)
	}
	return stop, nil
}

// installCustomizations merges rollgate's argocd-cm block into argocd-cm
// the way docs/argocd.md section 1 says: the block cut out of the page,
// then `kubectl patch configmap argocd-cm --type merge --patch-file`.
func (e *env) installCustomizations(ctx context.Context) error {
	page, err := os.ReadFile(filepath.Join(repo.Root(), "docs", "argocd.md"))
	if err != nil {
		return err
	}
	block, err := argocdCMBlock(string(page))
	if err != nil {
		return err
	}
	f := filepath.Join(e.dir, "argocd-cm-rollgate.yaml")
	if err := os.WriteFile(f, []byte(block), 0o644); err != nil {
		return err
	}
	_, err = e.kubectl(ctx, "", "-n", "argocd", "patch", "configmap", "argocd-cm", "--type", "merge", "--patch-file", f)
	return err
}

// argocdCMBlock returns the YAML between the page's `<!-- argocd-cm:` and
// `<!-- end argocd-cm -->` markers, without the fence lines.
func argocdCMBlock(page string) (string, error) {
	var b strings.Builder
	in := false
	for _, line := range strings.Split(page, "\n") {
		switch {
		case strings.HasPrefix(line, "<!-- argocd-cm:"):
			in = true
		case strings.HasPrefix(line, "<!-- end argocd-cm -->"):
			in = false
		case in && !strings.HasPrefix(line, "```"):
			b.WriteString(line + "\n")
		}
	}
	if !strings.Contains(b.String(), "resource.customizations.health.rollgate.dev_Rollout") {
		return "", fmt.Errorf("docs/argocd.md: no argocd-cm block with the health check between the argocd-cm markers")
	}
	return b.String(), nil
}

// kubectl runs bin/k8s/kubectl against the cluster with stdin.
func (e *env) kubectl(ctx context.Context, stdin string, args ...string) (string, error) {
	kubectl, err := repo.LookTool("kubectl")
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", e.cluster.Kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}
