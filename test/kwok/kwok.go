// Package kwok runs a whole simulated Kubernetes cluster on loopback for end
// to end tests and the demo: kwokctl's binary runtime starts the real etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler plus the kwok
// controller, which plays the kubelet of N fake nodes. Deployments, ReplicaSets
// and the scheduler are the real ones; pods become Running and Ready without
// running any container.
//
// Every binary comes from the repository's bin/ folder (`make tools`), so
// nothing is downloaded. Each cluster gets its own kwokctl work folder, a
// unique name and free ports on 127.0.0.1.
package kwok

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/test/proc"
	"github.com/rollgate/rollgate/test/repo"
)

// Options configures a cluster.
type Options struct {
	// Nodes is the number of fake nodes (`kwokctl scale node`); 0 means none.
	Nodes int
	// Scheme is the scheme of Cluster.Client; nil means client-go's scheme
	// (built-in kinds only).
	Scheme *runtime.Scheme
	// Timeout bounds cluster creation; 0 means 2 minutes.
	Timeout time.Duration
	// ClientQPS, when above 0, is the request rate kube-controller-manager
	// and kube-scheduler may send the API server (--kube-api-qps, with
	// --kube-api-burst twice that); 0 keeps their defaults, 20 and 50 per
	// second. The kwok controller itself is not rate limited. At 1,000
	// Deployments released at once the controller manager's 20 per second
	// sets the pace of every rolling update.
	ClientQPS int
	// AuditPolicy, when set, is the path of an audit policy file for the
	// API server (`--kube-audit-policy`); the log is then at AuditLog.
	AuditPolicy string
}

// Cluster is a running kwok cluster.
type Cluster struct {
	// Name is the kwokctl cluster name, unique per cluster.
	Name string
	// Kubeconfig is the path of a kubeconfig file for the cluster (admin
	// credentials, current context set), for helm, kubectl or a controller
	// process.
	Kubeconfig string
	// RESTConfig is the client configuration of the cluster admin.
	RESTConfig *rest.Config
	// Client is a controller-runtime client using RESTConfig and
	// Options.Scheme.
	Client client.Client
	// Workdir is the kwokctl work folder (KWOK_WORKDIR); component logs are
	// in Workdir/clusters/<Name>/logs.
	Workdir string

	// BootWait is how long Create waited for other clusters on the
	// machine to come up first (see bootLock); Boot is how long this one
	// then took to come up, and steps when each step of it ended.
	BootWait, Boot time.Duration
	steps          bootSteps

	kwokctl string
}

// bootLock lets one kwok cluster come up at a time on the machine, across
// test packages (each is a process of its own). Coming up is the costly
// part of a cluster's life: the API server alone spends several
// CPU-seconds installing its built-in resources and OpenAPI. Four at once
// (the two fleet stories of test/e2e start three clusters within a
// second, next to another package's) took the fresh-clone run at a4b58b5
// to 110 s for one cluster on 2 cores; kube-controller-manager's own 20 s
// wait for the API server's health ran out, and the restart that revive
// then does ran out of the 2 minutes. One at a time, each comes up in
// seconds and the others wait their turn without spending their
// Options.Timeout on it.
const bootLock = "/tmp/rollgate-kwokboot.lock"

// Start creates a cluster for the length of a test and deletes it on cleanup,
// whether the test passes or fails; it fails the test when the cluster cannot
// be created. A failed test gets the tail of every component log.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	ctx, cancel := proc.TestContext(t)
	defer cancel()
	c, err := Create(ctx, opts)
	if err != nil {
		t.Fatalf("create kwok cluster: %v", err)
	}
	t.Logf("kwok cluster %s up in %v (after %v waiting for other clusters to come up): %s",
		c.Name, c.Boot.Round(100*time.Millisecond), c.BootWait.Round(100*time.Millisecond), c.steps)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kwok cluster %s logs:\n%s", c.Name, c.LogTails(20))
		}
		if err := c.Delete(); err != nil {
			t.Errorf("delete kwok cluster %s: %v", c.Name, err)
		}
	})
	return c
}

// Create creates a cluster outside a test (the demo); the caller must call
// Delete. On error nothing is left running. It first stops the clusters left
// behind by processes that died without deleting them.
func Create(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Timeout == 0 {
		opts.Timeout = 2 * time.Minute
	}
	bins, err := binaries()
	if err != nil {
		return nil, err
	}
	waitStart := time.Now()
	lock, err := proc.Lock(ctx, bootLock)
	if err != nil {
		return nil, fmt.Errorf("waiting for another kwok cluster to come up: %w", err)
	}
	defer lock.Close()
	bootWait := time.Since(waitStart)
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()

	reapOrphans()
	workdir, err := os.MkdirTemp("", workdirPattern)
	if err != nil {
		return nil, err
	}
	if err := writeOwner(workdir); err != nil {
		return nil, errors.Join(err, os.RemoveAll(workdir))
	}
	c := &Cluster{
		Name:       "rollgate-" + randomHex(4),
		Kubeconfig: filepath.Join(workdir, "kubeconfig"),
		Workdir:    workdir,
		BootWait:   bootWait,
		kwokctl:    bins["kwokctl"],
	}
	c.steps.start = time.Now()
	defer func() { c.Boot = time.Since(c.steps.start) }()
	if err := c.create(ctx, bins, opts); err != nil {
		logs := c.LogTails(10)
		if delErr := c.Delete(); delErr != nil {
			err = errors.Join(err, delErr)
		}
		return nil, fmt.Errorf("%w\nthe boot so far, after %v waiting for other clusters: %s\n%s",
			err, bootWait.Round(100*time.Millisecond), c.steps, logs)
	}
	return c, nil
}

func (c *Cluster) create(ctx context.Context, bins map[string]string, opts Options) error {
	ports, err := proc.FreePorts(6)
	if err != nil {
		return err
	}
	config := filepath.Join(c.Workdir, "kwokctl.yaml")
	if err := os.WriteFile(config, []byte(kwokctlConfig(bins, ports, filepath.Join(c.Workdir, "cache"), opts.ClientQPS)), 0o644); err != nil {
		return err
	}
	args := []string{"-c", config, "create", "cluster",
		"--kubeconfig", c.Kubeconfig,
		"--wait", time.Until(deadline(ctx)).Round(time.Second).String(),
	}
	if opts.AuditPolicy != "" {
		args = append(args, "--kube-audit-policy", opts.AuditPolicy)
	}
	if _, err := c.run(ctx, args...); err != nil {
		return err
	}
	c.steps.mark("components started and the API server ready")
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return err
	}
	// The kubeconfig names its certificate files; with files, client-go
	// starts a goroutine per client that reloads them and, once Delete
	// removed them, logs "Loading client cert failed" until the test
	// process exits. The cluster's certificates never change: read them
	// once.
	if err := rest.LoadTLSFiles(cfg); err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 200, 400
	scheme := opts.Scheme
	if scheme == nil {
		scheme = clientgoscheme.Scheme
	}
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	c.RESTConfig, c.Client = cfg, cl
	if err := c.awaitControllers(ctx); err != nil {
		return err
	}
	if err := guardStaleDeletes(ctx, cl); err != nil {
		return err
	}
	if opts.Nodes > 0 {
		if _, err := c.run(ctx, "scale", "node", "--replicas", strconv.Itoa(opts.Nodes)); err != nil {
			return err
		}
		c.steps.mark(fmt.Sprintf("nodes scaled to %d", opts.Nodes))
	}
	return nil
}

// bootSteps records when each step of a cluster's boot ended, for the log
// and for the message of a boot that failed: on a loaded machine it says
// which step took the time.
type bootSteps struct {
	start time.Time
	steps []string
}

func (b *bootSteps) mark(step string) {
	b.steps = append(b.steps, fmt.Sprintf("%s at %v", step, time.Since(b.start).Round(100*time.Millisecond)))
}

func (b bootSteps) String() string {
	if len(b.steps) == 0 {
		return "no step ended"
	}
	return strings.Join(b.steps, ", ")
}

// probeDeployment is the Deployment awaitControllers creates to see
// kube-controller-manager at work.
const probeDeployment = "kwok-controllers-probe"

// awaitControllers returns once kube-controller-manager has shown it
// works: its deployment controller observed a Deployment created for the
// purpose (no replicas; it is deleted again). A component that exits
// meanwhile is revived (see revive). kwokctl's wait ends when the API
// server is ready, which on a loaded machine can be before
// kube-controller-manager's own 20 s wait for the API server's health
// runs out: a look for dead components at that moment found none, the
// controller manager exited seconds later, and the cluster served the
// API but created no pod (TestFleetWaveThroughGit, fresh-clone run at
// 609eebb).
func (c *Cluster) awaitControllers(ctx context.Context) error {
	zero := int32(0)
	labels := map[string]string{"app": probeDeployment}
	probe := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: probeDeployment},
		Spec: appsv1.DeploymentSpec{
			Replicas: &zero,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: "probe"}}},
			},
		},
	}
	// A client of its own: the cluster's client has the caller's scheme,
	// which need not know Deployments.
	cl, err := client.New(c.RESTConfig, client.Options{Scheme: clientgoscheme.Scheme})
	if err != nil {
		return err
	}
	var last error
	if err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		last = cl.Create(ctx, probe)
		return last == nil || apierrors.IsAlreadyExists(last), nil
	}); err != nil {
		return fmt.Errorf("creating the Deployment %s that shows kube-controller-manager at work: %w (last error: %v)", probeDeployment, err, last)
	}
	c.steps.mark("first write accepted")
	// A revive restarts the dead component alone, in well under a second;
	// one that keeps exiting says so after a few.
	const revivals = 5
	revived := 0
	err = wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if dead := c.deadComponents(); len(dead) > 0 {
			if revived == revivals {
				return false, fmt.Errorf("%s exited again after %d restarts", strings.Join(dead, ", "), revived)
			}
			revived++
			c.steps.mark("restarting " + strings.Join(dead, ", "))
			return false, c.revive(ctx)
		}
		var d appsv1.Deployment
		if err := cl.Get(ctx, client.ObjectKeyFromObject(probe), &d); err != nil {
			return false, nil
		}
		return d.Status.ObservedGeneration >= d.Generation, nil
	})
	if err != nil {
		return fmt.Errorf("kube-controller-manager never observed the Deployment %s (dead components: %v): %w",
			probeDeployment, c.deadComponents(), err)
	}
	c.steps.mark("controllers at work")
	background := metav1.DeletePropagationBackground
	if err := cl.Delete(ctx, probe, &client.DeleteOptions{PropagationPolicy: &background}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the Deployment %s: %w", probeDeployment, err)
	}
	return nil
}

// revive restarts the components that exited while the cluster came up
// (awaitControllers calls it), and only those: the API server and etcd
// keep running, so a revive costs the dead component's own start, not a
// second boot of the cluster. kube-controller-manager waits 10 s for the
// API server's /healthz and exits when it is not healthy by then, which
// happens on a loaded machine (seen at load 30 on 2 cores); kwokctl does not
// restart it, and the cluster then serves the API but never creates a pod.
//
// `kwokctl start cluster` starts each component whose recorded process is
// not running, but it asks with signal 0, to which a zombie answers: the
// machines this runs on have a PID 1 that does not reap orphans, so an
// exited component stays a zombie and kwokctl would start nothing. Removing
// the dead component's pid file first makes kwokctl start it, alone. (Until
// 2026-11-29 revive stopped and started the whole cluster, and in the
// fresh-clone run at 084a5f0 the second boot of the API server on a loaded
// machine ran out of the time Create allows.)
func (c *Cluster) revive(ctx context.Context) error {
	dead := c.deadComponents()
	if len(dead) == 0 {
		return nil
	}
	for _, name := range dead {
		if err := os.Remove(c.pidFile(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s exited as the cluster came up; removing its pid file for a restart: %w", name, err)
		}
	}
	if _, err := c.run(ctx, "start", "cluster"); err != nil {
		return fmt.Errorf("%s exited as the cluster came up; restarting it: %w", strings.Join(dead, ", "), err)
	}
	if again := c.deadComponents(); len(again) > 0 {
		return fmt.Errorf("%s exited again right after a restart", strings.Join(again, ", "))
	}
	return nil
}

// pidFile is where kwokctl records the process id of the named component.
func (c *Cluster) pidFile(name string) string {
	return filepath.Join(c.Workdir, "clusters", c.Name, "pids", name+".pid")
}

// deadComponents names the components whose recorded process is gone.
func (c *Cluster) deadComponents() []string {
	var dead []string
	for _, cp := range c.components() {
		if !running(cp.pid) {
			dead = append(dead, cp.name)
		}
	}
	return dead
}

// AuditLog is the API server's audit log (JSON lines), written when the
// cluster was created with Options.AuditPolicy.
func (c *Cluster) AuditLog() string {
	return filepath.Join(c.Workdir, "clusters", c.Name, "logs", "audit.log")
}

// Delete stops every component of the cluster, waits for the processes to
// exit (killing stragglers) and removes the work folder.
func (c *Cluster) Delete() error {
	pids := c.PIDs()
	var err error
	if _, statErr := os.Stat(filepath.Join(c.Workdir, "clusters", c.Name)); statErr == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err = c.run(ctx, "delete", "cluster", "--kubeconfig", c.Kubeconfig)
	}
	if stopErr := stopAll(pids, 10*time.Second); stopErr != nil {
		err = errors.Join(err, stopErr)
	}
	if rmErr := os.RemoveAll(c.Workdir); rmErr != nil {
		err = errors.Join(err, rmErr)
	}
	return err
}

// LogTails returns the last n lines of every component log, for failure
// reports.
func (c *Cluster) LogTails(n int) string {
	files, _ := filepath.Glob(filepath.Join(c.Workdir, "clusters", c.Name, "logs", "*.log"))
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > n {
			lines = lines[len(lines)-n:]
		}
		fmt.Fprintf(&b, "== %s ==\n%s\n", filepath.Base(f), strings.Join(lines, "\n"))
	}
	return b.String()
}

// run runs kwokctl for this cluster with its own KWOK_WORKDIR.
func (c *Cluster) run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, c.kwokctl, append([]string{"--name", c.Name}, args...)...)
	// The simulated cluster's etcd, API server and controllers are Go
	// programs started with kwokctl's environment. A Go runtime setting
	// meant for the test process must not reach them: GOMEMLIMIT=360MiB,
	// set to measure the controller under its soft limit at 10,000
	// Rollouts, also capped the simulated API server, which holds far
	// more than that there (docs/benchmarks.md, P2).
	cmd.Env = append(envWithout("KWOK_", "GOMEMLIMIT=", "GOGC="), "KWOK_WORKDIR="+c.Workdir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("kwokctl %s: %w\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

// PIDs returns the process ids of the running components, as kwokctl
// recorded them, in the order of the components' names.
func (c *Cluster) PIDs() []int {
	var pids []int
	for _, cp := range c.components() {
		pids = append(pids, cp.pid)
	}
	return pids
}

// component is a component's name and the process id kwokctl recorded.
type component struct {
	name string
	pid  int
}

// components reads the process id files kwokctl keeps, in name order.
func (c *Cluster) components() []component {
	files, _ := filepath.Glob(filepath.Join(c.Workdir, "clusters", c.Name, "pids", "*.pid"))
	var out []component
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && pid > 1 {
			out = append(out, component{name: strings.TrimSuffix(filepath.Base(f), ".pid"), pid: pid})
		}
	}
	return out
}

// stopAll waits for pids to exit, then kills the ones (and their process
// groups: kwokctl starts every component in its own session) still running.
func stopAll(pids []int, grace time.Duration) error {
	deadline := time.Now().Add(grace)
	for {
		var alive []int
		for _, pid := range pids {
			if running(pid) {
				alive = append(alive, pid)
			}
		}
		if len(alive) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			for _, pid := range alive {
				_ = syscall.Kill(-pid, syscall.SIGKILL)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			time.Sleep(200 * time.Millisecond)
			var left []string
			for _, pid := range alive {
				if running(pid) {
					left = append(left, strconv.Itoa(pid))
				}
			}
			if len(left) > 0 {
				return fmt.Errorf("processes still running after SIGKILL: %s", strings.Join(left, ", "))
			}
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// running reports whether pid is a live process (a zombie counts as gone).
func running(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(data)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z' && s[i+2] != 'X'
	}
	return true
}

func binaries() (map[string]string, error) {
	bins := map[string]string{}
	for _, name := range []string{"kwokctl", "kwok", "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		p, err := repo.LookTool(name)
		if err != nil {
			return nil, err
		}
		bins[name] = p
	}
	return bins, nil
}

// kwokctlConfig pins every component to a local binary (so nothing is
// downloaded), to 127.0.0.1 and to the given free ports, with the
// components' patches (componentsPatches).
func kwokctlConfig(bins map[string]string, ports []int, cacheDir string, qps int) string {
	return fmt.Sprintf(`apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
options:
  runtime: binary
  bindAddress: 127.0.0.1
  kubeApiserverPort: %d
  etcdPort: %d
  etcdPeerPort: %d
  kubeControllerManagerPort: %d
  kubeSchedulerPort: %d
  kwokControllerPort: %d
  cacheDir: %q
  etcdBinary: %q
  kubeApiserverBinary: %q
  kubeControllerManagerBinary: %q
  kubeSchedulerBinary: %q
  kwokControllerBinary: %q
`, ports[0], ports[1], ports[2], ports[3], ports[4], ports[5], cacheDir,
		bins["etcd"], bins["kube-apiserver"], bins["kube-controller-manager"], bins["kube-scheduler"], bins["kwok"]) +
		componentsPatches(qps)
}

// componentsPatches is the componentsPatches section: etcd does not fsync,
// the API server's Service range is serviceRange, kube-controller-manager
// and kube-scheduler run without leader election, and with client limits
// of qps (burst 2×qps) when qps is above 0 (kwokctl sets none of these
// flags itself).
//
// A test cluster lives for one test and its data is thrown away, so etcd's
// fsync of every write protects nothing; on a machine whose disk is busy
// (a real node pulling images beside it, the Go build cache) each fsync can
// take long enough to slow the API server's boot, which writes hundreds of
// objects.
//
// Leader election is for replicas; a cluster has one of each. With it, a
// component that cannot renew its lease within 10 s (an API server slowed by
// a loaded machine) exits, and kwokctl does not restart it: a cluster whose
// controller manager died creates no pod for a new Deployment.
// serviceRange is the API server's Service range. Its default, a /24,
// holds 254 cluster IPs: a fleet of 500 releases whose controller gives
// each canary Service a cluster IP (Kruise Rollout does) ran out of them
// at the 254th, and the rest waited for ever on "range is full".
const serviceRange = "10.0.0.0/16"

func componentsPatches(qps int) string {
	s := "componentsPatches:\n- name: etcd\n  extraArgs:\n  - {key: unsafe-no-fsync, value: \"true\"}\n" +
		fmt.Sprintf("- name: kube-apiserver\n  extraArgs:\n  - {key: service-cluster-ip-range, value: %q}\n", serviceRange)
	for _, name := range []string{"kube-controller-manager", "kube-scheduler"} {
		s += fmt.Sprintf("- name: %s\n  extraArgs:\n  - {key: leader-elect, value: \"false\"}\n", name)
		if qps > 0 {
			s += fmt.Sprintf(`  - {key: kube-api-qps, value: "%d"}
  - {key: kube-api-burst, value: "%d"}
`, qps, 2*qps)
		}
	}
	return s
}

func deadline(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(2 * time.Minute)
}

// envWithout is this process's environment without the variables that
// start with any of prefixes.
func envWithout(prefixes ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(kv, p) }) {
			env = append(env, kv)
		}
	}
	return env
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
