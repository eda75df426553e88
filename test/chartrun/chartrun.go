// Package chartrun runs the controller of an installed rollgate chart
// release for real, as a local process next to a kwok cluster (whose fake
// kubelets run no containers, so the chart's own pod never does).
//
// Start reads the chart's controller Deployment from the cluster and runs
// bin/rollgate-controller (the image's entrypoint) with the container's
// args and env, exactly as the kubelet
// would start the container, changed only where a process off-cluster must
// differ: loopback ports, a webhook URL instead of the Service, and a
// kubeconfig that impersonates the Deployment's ServiceAccount. So the
// controller runs with the chart's flags and the chart's RBAC, and a
// permission missing from the chart fails the test that runs it.
package chartrun

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/rollgate/rollgate/test/proc"
	"github.com/rollgate/rollgate/test/repo"
)

// The containers of the chart's Deployments that chartrun runs: the
// controller (the image's entrypoint) and the notifier (command
// /rollgate-notifier, the chart's notifications.enabled).
const (
	ContainerName = "controller"
	NotifierName  = "notifier"
)

// role is what chartrun knows of one container: the command it must set
// (none: the entrypoint), the binary under bin/ that command runs, and
// whether it serves the admission and Git webhooks.
type role struct {
	command  string
	binary   string
	webhooks bool
}

var roles = map[string]role{
	ContainerName: {binary: "rollgate-controller", webhooks: true},
	NotifierName:  {command: "/rollgate-notifier", binary: "rollgate-notifier"},
}

// How long Start waits for the health endpoint, and Stop for the process
// to exit after SIGTERM before it kills it.
const (
	startTimeout = 90 * time.Second
	stopGrace    = 20 * time.Second
)

// Options say which installed chart release to run and how.
type Options struct {
	Kubeconfig string   // admin kubeconfig of the (kwok) cluster
	Namespace  string   // the release namespace
	Deployment string   // name of the chart's Deployment, e.g. "rollgate"
	Container  string   // its container to run: ContainerName (default) or NotifierName
	Binary     string   // binary; default <repo>/bin/rollgate-controller (rollgate-notifier for the notifier)
	ExtraArgs  []string // appended after the chart's args
	LogPath    string   // file the controller writes to; default in a temp dir
}

// Controller is a running controller process started by Start.
type Controller struct {
	args    []string
	logPath string
	// dir holds the impersonating kubeconfig; Stop removes it.
	dir string
	// ports are the loopback addresses the process was given.
	ports ports

	cmd      *exec.Cmd
	done     chan struct{}
	waitErr  error
	stopOnce sync.Once
	stopErr  error
}

// ports are the loopback ports given to one controller process.
type ports struct {
	webhook, metrics, health, gitPush int
}

// Start runs the controller of the chart release o names and waits until
// its /readyz endpoint answers ok (the webhook certificate is served) or
// the process dies. ctx bounds the start only; the process runs until Stop.
//
// The command line is the container's args, then o.ExtraArgs, with the
// local flags (--kubeconfig, --webhook-url, --webhook-bind-host,
// --webhook-port, --metrics-bind-address, --health-probe-bind-address,
// --git-webhook-bind-address) replacing any value either gives them. The
// kubeconfig acts as the pod's ServiceAccount; Start checks that the API
// server sees it so before it runs anything.
func Start(ctx context.Context, o Options) (*Controller, error) {
	if o.Kubeconfig == "" || o.Namespace == "" || o.Deployment == "" {
		return nil, errors.New("chartrun: Kubeconfig, Namespace and Deployment are required")
	}
	if o.Container == "" {
		o.Container = ContainerName
	}
	r, ok := roles[o.Container]
	if !ok {
		return nil, fmt.Errorf("chartrun: container %q: want %s or %s", o.Container, ContainerName, NotifierName)
	}
	if o.Binary == "" {
		o.Binary = filepath.Join(repo.Root(), "bin", r.binary)
	}
	if _, err := os.Stat(o.Binary); err != nil {
		return nil, fmt.Errorf("chartrun: controller binary: %w (make build)", err)
	}
	dep, err := readDeployment(ctx, o)
	if err != nil {
		return nil, err
	}
	podName := podLikeName(o.Deployment)
	spec, err := containerSpec(dep, o.Container, o.Namespace, podName)
	if err != nil {
		return nil, fmt.Errorf("chartrun: Deployment %s/%s: %w", o.Namespace, o.Deployment, err)
	}
	dir, err := os.MkdirTemp("", "rollgate-chartrun-*")
	if err != nil {
		return nil, err
	}
	c, err := start(ctx, o, r, spec, dir)
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	return c, nil
}

func start(ctx context.Context, o Options, r role, spec container, dir string) (*Controller, error) {
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := writeImpersonating(o.Kubeconfig, kubeconfig, o.Namespace, spec.serviceAccount); err != nil {
		return nil, err
	}
	if err := checkIdentity(ctx, kubeconfig, o.Namespace, spec.serviceAccount); err != nil {
		return nil, err
	}
	free, err := proc.FreePorts(4)
	if err != nil {
		return nil, err
	}
	p := ports{webhook: free[0], metrics: free[1], health: free[2], gitPush: free[3]}
	args := override(append(append([]string{}, spec.args...), o.ExtraArgs...), localFlags(kubeconfig, p, r.webhooks))
	logPath := o.LogPath
	if logPath == "" {
		logDir, err := os.MkdirTemp("", "rollgate-chartrun-log-*")
		if err != nil {
			return nil, err
		}
		logPath = filepath.Join(logDir, o.Deployment+".log")
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(o.Binary, args...)
	cmd.Env = append(envWithout("KUBECONFIG", "POD_NAMESPACE", "POD_NAME"), spec.env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = processAttr()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("chartrun: start %s: %w", o.Binary, err)
	}
	c := &Controller{args: args, logPath: logPath, dir: dir, ports: p, cmd: cmd, done: make(chan struct{})}
	go func() {
		c.waitErr = cmd.Wait()
		logFile.Close()
		close(c.done)
	}()
	if err := c.waitReady(ctx); err != nil {
		return nil, errors.Join(err, c.kill())
	}
	return c, nil
}

// localFlags are the flags a process off-cluster must set differently from
// the chart: the impersonating kubeconfig, loopback ports, and for a
// process serving webhooks a loopback webhook URL the API server calls.
func localFlags(kubeconfig string, p ports, webhooks bool) []flagValue {
	flags := []flagValue{
		{"kubeconfig", kubeconfig},
		{"metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", p.metrics)},
		{"health-probe-bind-address", fmt.Sprintf("127.0.0.1:%d", p.health)},
	}
	if webhooks {
		flags = append(flags,
			flagValue{"webhook-url", fmt.Sprintf("https://127.0.0.1:%d", p.webhook)},
			flagValue{"webhook-bind-host", "127.0.0.1"},
			flagValue{"webhook-port", fmt.Sprint(p.webhook)},
			flagValue{"git-webhook-bind-address", fmt.Sprintf("127.0.0.1:%d", p.gitPush)},
		)
	}
	return flags
}

// StartT is Start for a test: it fails the test when the controller does
// not start, and stops it when the test ends, first logging the tail of
// its log if the test failed. An empty LogPath is a file in t.TempDir().
func StartT(t testing.TB, o Options) *Controller {
	t.Helper()
	if o.LogPath == "" {
		o.LogPath = filepath.Join(t.TempDir(), o.Deployment+".log")
	}
	ctx, cancel := proc.TestContext(t)
	defer cancel()
	c, err := Start(ctx, o)
	if err != nil {
		t.Fatalf("start the controller of chart release %s/%s: %v", o.Namespace, o.Deployment, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("controller %s (%s), last lines of its log:\n%s", o.Deployment, c.logPath, c.LogTail(30))
		}
		if err := c.Stop(); err != nil {
			t.Errorf("stop the controller: %v", err)
		}
	})
	return c
}

// Args returns the full command line the binary was started with (without
// the binary itself).
func (c *Controller) Args() []string { return append([]string(nil), c.args...) }

// LogPath returns the file the controller writes to.
func (c *Controller) LogPath() string { return c.logPath }

// MetricsURL returns the controller's Prometheus metrics endpoint.
func (c *Controller) MetricsURL() string {
	return fmt.Sprintf("http://127.0.0.1:%d/metrics", c.ports.metrics)
}

// WebhookURL returns the URL the controller registers its webhooks with.
func (c *Controller) WebhookURL() string { return fmt.Sprintf("https://127.0.0.1:%d", c.ports.webhook) }

// Exited returns nil while the process runs, and otherwise an error with
// its exit status and the last lines of its log.
func (c *Controller) Exited() error {
	select {
	case <-c.done:
		return fmt.Errorf("the controller exited (%v); last lines of %s:\n%s", c.waitErr, c.logPath, c.LogTail(30))
	default:
		return nil
	}
}

// LogTail returns the last n lines of the controller's log.
func (c *Controller) LogTail(n int) string {
	return proc.Tail(c.logPath, n)
}

// Stop sends SIGTERM to the controller, waits for it to exit (up to 20 s)
// and then kills it; it removes the impersonating kubeconfig and keeps the
// log. It returns an error when the process had already died on its own
// or had to be killed. Calling it again returns the first answer.
func (c *Controller) Stop() error {
	c.stopOnce.Do(func() {
		c.stopErr = errors.Join(c.stop(), os.RemoveAll(c.dir))
	})
	return c.stopErr
}

func (c *Controller) stop() error {
	if err := c.Exited(); err != nil {
		return fmt.Errorf("before Stop: %w", err)
	}
	pgid := c.cmd.Process.Pid // its own process group: the group id is the pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-c.done:
		if c.waitErr != nil {
			return fmt.Errorf("the controller exited with %v after SIGTERM; last lines of %s:\n%s", c.waitErr, c.logPath, c.LogTail(30))
		}
		return nil
	case <-time.After(stopGrace):
	}
	return errors.Join(fmt.Errorf("the controller (pid %d) did not exit within %s of SIGTERM; killed", pgid, stopGrace), c.kill())
}

// kill sends SIGKILL to the process group and waits for the exit.
func (c *Controller) kill() error {
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-c.done:
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("the controller (pid %d) still runs after SIGKILL", c.cmd.Process.Pid)
	}
}

// waitReady polls /readyz until it answers 200, the process exits, or the
// start times out.
func (c *Controller) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	url := fmt.Sprintf("http://127.0.0.1:%d/readyz", c.ports.health)
	client := &http.Client{Timeout: time.Second}
	last := "no answer yet"
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := c.Exited(); err != nil {
			return fmt.Errorf("chartrun: before %s answered ok: %w", url, err)
		}
		resp, err := client.Get(url)
		if err == nil {
			body := make([]byte, 512)
			n, _ := resp.Body.Read(body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(string(body[:n])))
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("chartrun: %s not ok (%s): %w; last lines of %s:\n%s", url, last, ctx.Err(), c.logPath, c.LogTail(30))
		case <-tick.C:
		}
	}
}

// readDeployment reads the chart's controller Deployment as the cluster
// admin.
func readDeployment(ctx context.Context, o Options) (*appsv1.Deployment, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("chartrun: kubeconfig %s: %w", o.Kubeconfig, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dep, err := cs.AppsV1().Deployments(o.Namespace).Get(ctx, o.Deployment, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("chartrun: read the Deployment: %w", err)
	}
	return dep, nil
}

// podLikeName is a name shaped like one of a Deployment's pods, for
// metadata.name references.
func podLikeName(deployment string) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	h := hex.EncodeToString(b)
	return fmt.Sprintf("%s-%s-%s", deployment, h[:10], h[10:15])
}

// envWithout is the environment of this process without the named
// variables, so that the controller sees only the chart's.
func envWithout(names ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		drop := false
		for _, n := range names {
			drop = drop || name == n
		}
		if !drop {
			env = append(env, kv)
		}
	}
	return env
}
