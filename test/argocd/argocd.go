// Package argocd runs real Argo CD as local processes against a test
// cluster (a kwok cluster in the tests): Redis, the repo-server, the
// application-controller and the API server, all the one binary
// `make tools-argocd` builds into bin/argocd (its role follows
// ARGOCD_BINARY_NAME), each on its own free ports on 127.0.0.1, in its own
// process group, stopped by its pid.
//
// What differs from Argo CD in a cluster, and why:
//
//   - ARGOCD_FAKE_IN_CLUSTER=true: the destination
//     https://kubernetes.default.svc is the cluster of KUBECONFIG, since the
//     processes do not run in a pod;
//   - the reconciliation timeout comes from ARGOCD_RECONCILIATION_TIMEOUT and
//     --app-resync (argocd-cm's timeout.reconciliation reaches only pods,
//     through the Deployment's env);
//   - the API server runs with --insecure --disable-auth on loopback: the
//     CLI talks plain gRPC to it (ARGOCD_SERVER, ARGOCD_OPTS=--plaintext)
//     and every request acts as admin;
//   - no Dex, no ApplicationSet controller, no notifications controller.
package argocd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rollgate/rollgate/test/proc"
	"github.com/rollgate/rollgate/test/repo"
	"github.com/rollgate/rollgate/test/rig"
)

// Namespace is the namespace Argo CD runs in and keeps its Applications,
// settings and AppProjects in.
const Namespace = "argocd"

// Names of the processes: their logs are <name>.log in Options.Dir.
const (
	Redis                 = "redis"
	RepoServer            = "argocd-repo-server"
	ApplicationController = "argocd-application-controller"
	Server                = "argocd-server"
)

// Options configure Start.
type Options struct {
	// Kubeconfig is the cluster Argo CD runs against and deploys to.
	Kubeconfig string
	// Dir holds the logs, Redis' working folder and the processes' HOME.
	Dir string
	// Bin is the folder holding argocd and crds/ (default <repo>/bin/argocd).
	Bin string
	// Resync is the reconciliation timeout: how often every Application is
	// compared with Git without a trigger (default 10s; Argo CD's own
	// default is 120s plus jitter).
	Resync time.Duration
}

// Instance is a running Argo CD.
type Instance struct {
	// ServerAddr is the host:port of the API server (gRPC and REST, plain
	// HTTP, no authentication).
	ServerAddr string
	// Bin is the argocd binary; run as `argocd` it is the CLI.
	Bin string

	kubeconfig string
	// tmp is the TMPDIR of every Argo CD process and of the CLI.
	tmp     string
	procs   []*proc.Process
	stopped atomic.Bool
	lock    *os.File
}

// lockPath serializes Argo CD environments on this machine: the
// repo-server serves Git credentials on a fixed socket,
// /tmp/reposerver-ask-pass.sock (a package variable of Argo CD, not
// configurable), so two repo-servers at once (two test packages in
// parallel under `go test ./...`) take it from each other.
const lockPath = "/tmp/rollgate-argocd.lock"

// Start installs Argo CD's CRDs and settings into the cluster (namespace
// argocd, argocd-cm, argocd-rbac-cm, argocd-secret and the default
// AppProject), starts Redis, the repo-server, the application-controller
// and the API server, and waits until each answers. On error nothing is
// left running.
func Start(ctx context.Context, o Options) (*Instance, error) {
	if o.Kubeconfig == "" || o.Dir == "" {
		return nil, errors.New("argocd: Options.Kubeconfig and Options.Dir are required")
	}
	if o.Bin == "" {
		o.Bin = filepath.Join(repo.ToolsDir(), "argocd")
	}
	if o.Resync == 0 {
		o.Resync = 10 * time.Second
	}
	bin := filepath.Join(o.Bin, "argocd")
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("argocd: %w (run 'make tools')", err)
	}
	redis, err := repo.LookTool("redis-server")
	if err != nil {
		return nil, err
	}
	lock, err := proc.Lock(ctx, lockPath)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			lock.Close()
		}
	}()
	if err := install(ctx, o.Kubeconfig, filepath.Join(o.Bin, "crds")); err != nil {
		return nil, err
	}
	for _, d := range []string{"home", "tls", "ssh", "gnupg", "gpg", "redis", "tmp"} {
		if err := os.MkdirAll(filepath.Join(o.Dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	ports, err := proc.FreePorts(6)
	if err != nil {
		return nil, err
	}
	in := &Instance{ServerAddr: loopback(ports[4]), Bin: bin, kubeconfig: o.Kubeconfig, tmp: filepath.Join(o.Dir, "tmp"), lock: lock}
	env := processEnv(o)
	for _, p := range processes(o, bin, redis, ports) {
		penv := append([]string{"ARGOCD_BINARY_NAME=" + p.name}, env...)
		if p.name == ApplicationController {
			// The controller takes its shard from the StatefulSet pod name.
			penv = append(penv, "HOSTNAME=argocd-application-controller-0")
		}
		started, err := proc.Start(o.Dir, p.name, p.bin, p.args, penv)
		if err != nil {
			return nil, errors.Join(err, in.Stop())
		}
		in.procs = append(in.procs, started)
		if err := waitFor(ctx, 90*time.Second, p.name, in.Exited, p.ready); err != nil {
			return nil, errors.Join(err, in.Stop())
		}
	}
	ok = true
	return in, nil
}

// processEnv is the environment every Argo CD process gets.
func processEnv(o Options) []string {
	return []string{
		// The repo-server runs `argocd` as Git's askpass helper for
		// repository credentials (the binary in the role its
		// ARGOCD_BINARY_NAME gives it), and kustomize, as in Argo CD's image.
		"PATH=" + o.Bin + string(os.PathListSeparator) + os.Getenv("PATH"),
		"KUBECONFIG=" + o.Kubeconfig,
		"HOME=" + filepath.Join(o.Dir, "home"),
		// The controller's diffs and the repo-server's checkouts go to
		// os.TempDir(): kept in the test's folder, they go with it instead
		// of piling up as /tmp/argocd-diff* on the machine.
		"TMPDIR=" + filepath.Join(o.Dir, "tmp"),
		"ARGOCD_FAKE_IN_CLUSTER=true",
		"ARGOCD_RECONCILIATION_TIMEOUT=" + o.Resync.String(),
		"ARGOCD_RECONCILIATION_JITTER=0",
		"ARGOCD_TLS_DATA_PATH=" + filepath.Join(o.Dir, "tls"),
		"ARGOCD_SSH_DATA_PATH=" + filepath.Join(o.Dir, "ssh"),
		"ARGOCD_GPG_ENABLED=false",
		"ARGOCD_GNUPGHOME=" + filepath.Join(o.Dir, "gnupg"),
		"ARGOCD_GPG_DATA_PATH=" + filepath.Join(o.Dir, "gpg"),
	}
}

// process is one process to start and how to tell it is ready.
type process struct {
	name, bin string
	args      []string
	ready     func() bool
}

// processes are Redis, the repo-server, the application-controller and the
// API server, in start order, on ports[0] (Redis), ports[1] and [2]
// (repo-server and its metrics), ports[3] (controller metrics), ports[4]
// and [5] (API server and its metrics).
func processes(o Options, bin, redis string, ports []int) []process {
	port := func(i int) string { return strconv.Itoa(ports[i]) }
	redisArgs := []string{"--redis", loopback(ports[0])}
	common := []string{"--loglevel", "info", "--logformat", "text"}
	return []process{
		{Redis, redis, []string{"--bind", "127.0.0.1", "--port", port(0), "--save", "", "--appendonly", "no", "--dir", filepath.Join(o.Dir, "redis")},
			func() bool { return proc.Listening(loopback(ports[0])) }},
		{RepoServer, bin, concat([]string{"--address", "127.0.0.1", "--port", port(1),
			"--metrics-address", "127.0.0.1", "--metrics-port", port(2), "--disable-tls"}, common, redisArgs),
			func() bool { return httpOK("http://" + loopback(ports[2]) + "/metrics") }},
		{ApplicationController, bin, concat([]string{"--kubeconfig", o.Kubeconfig, "--namespace", Namespace,
			"--repo-server", loopback(ports[1]), "--repo-server-plaintext", "--metrics-port", port(3),
			"--app-resync", strconv.Itoa(int(o.Resync / time.Second)), "--app-resync-jitter", "0"}, common, redisArgs),
			func() bool { return httpOK("http://" + loopback(ports[3]) + "/metrics") }},
		{Server, bin, concat([]string{"--kubeconfig", o.Kubeconfig, "--namespace", Namespace,
			"--address", "127.0.0.1", "--port", port(4), "--metrics-address", "127.0.0.1", "--metrics-port", port(5),
			"--insecure", "--disable-auth", "--repo-server", loopback(ports[1]), "--repo-server-plaintext",
			"--dex-server", "http://127.0.0.1:1", "--staticassets", o.Dir}, common, redisArgs),
			func() bool { return httpOK("http://" + loopback(ports[4]) + "/healthz") }},
	}
}

func loopback(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

func concat(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// Stop stops the processes in reverse start order: SIGTERM to each process
// group, SIGKILL after 10 s.
func (in *Instance) Stop() error {
	in.stopped.Store(true)
	err := proc.StopAll(in.procs, 10*time.Second)
	if in.lock != nil {
		in.lock.Close() // releases the machine lock
		in.lock = nil
	}
	return err
}

// Exited returns an error, with the last lines of its log, when a process
// died; nil while all run, and after Stop.
func (in *Instance) Exited() error {
	if in.stopped.Load() {
		return nil
	}
	var errs []error
	for _, p := range in.procs {
		errs = append(errs, p.Exited())
	}
	return errors.Join(errs...)
}

// Logs returns the last n lines of every process' log, for failure reports.
func (in *Instance) Logs(n int) string {
	var b strings.Builder
	for _, p := range in.procs {
		fmt.Fprintf(&b, "== %s ==\n%s\n", p.Name, proc.Tail(p.Log, n))
	}
	return b.String()
}

// RSS returns the resident memory of each process in bytes, by name.
func (in *Instance) RSS() map[string]int64 {
	out := map[string]int64{}
	for _, p := range in.procs {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Pid()))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				out[p.Name] = kb << 10
			}
		}
	}
	return out
}

// CLIEnv is the environment that points the argocd CLI at this instance:
// `argocd app get ...` then needs no --server flag or login, and its
// temporary files stay in the instance's folder.
func (in *Instance) CLIEnv() []string {
	return []string{
		"ARGOCD_SERVER=" + in.ServerAddr,
		"ARGOCD_OPTS=--plaintext",
		"ARGOCD_AUTH_TOKEN=disabled-auth",
		// `argocd app diff` writes its two sides under TMPDIR: in the
		// instance's folder they go with the test.
		"TMPDIR=" + in.tmp,
	}
}

// CLI runs the argocd CLI against the API server and returns its combined
// output.
func (in *Instance) CLI(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, in.Bin, args...)
	cmd.Env = append(append(os.Environ(), "ARGOCD_BINARY_NAME=argocd"), in.CLIEnv()...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("argocd %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// GetJSON reads path from the API server's REST API into v.
func (in *Instance) GetJSON(path string, v any) error {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + in.ServerAddr + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("argocd: GET %s: %s: %s", path, resp.Status, body)
	}
	return json.Unmarshal(body, v)
}

// waitFor waits until ready holds (see rig.Wait), a process exits, or
// timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, name string, exited func() error, ready func() bool) error {
	_, err := rig.Wait(ctx, timeout, "argocd: "+name+" ready", func(context.Context) (bool, string, error) {
		if err := exited(); err != nil {
			return false, "", err
		}
		return ready(), "", nil
	})
	return err
}

func httpOK(url string) bool {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
