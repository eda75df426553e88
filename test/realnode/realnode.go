// Package realnode runs a real single-node Kubernetes cluster for end to end
// tests: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, a
// kubelet and kube-proxy (iptables), with containerd, runc and the CNI
// bridge plugin from Debian. Pods run real containers from images imported
// into containerd (nothing is pulled: there is no registry), and ClusterIP
// Services work, including the `kubernetes` Service, so a controller can run
// as a pod with its own ServiceAccount.
//
// The node needs root. It changes the host (a bridge, iptables rules,
// sysctls, mounts, network namespaces, cgroups), records the host before and
// restores it on every exit, also when the test fails, and a node left
// behind by a test process that died is cleaned up by the next one. No
// packet or DNS lookup leaves the machine: the API server reaches the kubelet
// by its InternalIP, a FORWARD rule drops whatever a pod sends off the
// bridge, pods get a resolv.conf without a name server, and images are never
// pulled. One node runs at a time on a machine (a lock in /run); every other
// port is chosen free on loopback.
//
// Every Kubernetes binary comes from bin/ (`make tools`), the runtime from
// Debian (`make tools-realnode`).
package realnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/test/proc"
	"github.com/rollgate/rollgate/test/repo"
	"github.com/rollgate/rollgate/test/rig"
)

// Options configures a node.
type Options struct {
	// Images are imported into containerd before the kubelet starts.
	Images []Image
	// Scheme is the scheme of Cluster.Client; nil means client-go's scheme.
	Scheme *runtime.Scheme
	// Timeout bounds the start; 0 means 3 minutes (the node itself is up in
	// about 10 s; the rest is waiting for another test's node).
	Timeout time.Duration
}

// Cluster is a running real node.
type Cluster struct {
	// Dir holds every file of the cluster: configuration, PKI, state, logs.
	Dir string
	// Kubeconfig is an admin kubeconfig (server https://NodeIP:port).
	Kubeconfig string
	// RESTConfig is the client configuration of the cluster admin.
	RESTConfig *rest.Config
	// Client is a controller-runtime client using RESTConfig.
	Client client.Client
	// Server is the API server's URL.
	Server string
	// Containerd is the path of containerd's socket.
	Containerd string
	// StopTimings says how long each phase of Delete took.
	StopTimings []string

	bins  map[string]string
	procs []*component
	host  *hostState
	lock  *os.File
}

// component is one process of the node.
type component struct {
	*proc.Process
	cmd string
}

// Start starts a node for the length of a test and stops it on cleanup,
// whether the test passes or fails; the test fails when the node does not
// come up (with the component, its command and its log tail) or when the
// host is not restored.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	ctx, cancel := proc.TestContext(t)
	defer cancel()
	start := time.Now()
	c, err := Create(ctx, opts)
	if err != nil {
		t.Fatalf("real node: %v", err)
	}
	t.Logf("real node up in %.1fs (API server %s, logs in %s)", time.Since(start).Seconds(), c.Server, c.Dir)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("real node logs:\n%s", c.LogTails(15))
		}
		stopped := time.Now()
		if err := c.Delete(); err != nil {
			t.Errorf("stop the real node and restore the host: %v", err)
		}
		t.Logf("real node stopped and host restored in %.1fs (%s)", time.Since(stopped).Seconds(), strings.Join(c.StopTimings, ", "))
	})
	return c
}

// minFreeDisk is the free space a real node needs on the file system of
// its folder: its kubelet evicts every pod when less than 1% is free
// (evictionHard in kubeletConfig), and images, containers and logs take
// some too.
const minFreeDisk = 4 << 30

// enoughDisk fails, saying so, when the file system of dir has less than
// minFreeDisk free or is within 2% of full: a node started there would
// evict its pods, and a story fail for a reason its log hides (a
// fresh-clone run at 9a27aea on a disk with 2.2 GB of 252 GB free: pods of
// the new version never became Ready, the kubelet logging "must evict
// pod(s) to reclaim ephemeral-storage").
func enoughDisk(dir string) error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return err
	}
	free, size := st.Bavail*uint64(st.Bsize), st.Blocks*uint64(st.Bsize)
	if free < minFreeDisk || free*50 < size {
		return fmt.Errorf("a real node needs disk: %s has %.1f GiB free of %.0f GiB, and the kubelet evicts pods below 1%% free; free some space (old clones, go clean -cache) and run again",
			dir, float64(free)/(1<<30), float64(size)/(1<<30))
	}
	return nil
}

// Create starts a node outside a test; the caller must call Delete. On error
// nothing is left running and the host is restored.
func Create(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Timeout == 0 {
		opts.Timeout = 3 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	if os.Geteuid() != 0 {
		return nil, errors.New("a real node needs root (bridge, iptables, mounts, containerd)")
	}
	bins, err := binaries()
	if err != nil {
		return nil, err
	}
	if err := enoughDisk(os.TempDir()); err != nil {
		return nil, err
	}
	lock, err := proc.Lock(ctx, lockPath)
	if err != nil {
		return nil, err
	}
	if err := cleanLeftover(); err != nil {
		lock.Close()
		return nil, fmt.Errorf("clean up the node a dead test left behind: %w", err)
	}
	host, err := recordHost()
	if err != nil {
		lock.Close()
		return nil, err
	}
	dir, err := os.MkdirTemp("", "realnode-")
	if err != nil {
		lock.Close()
		return nil, err
	}
	c := &Cluster{Dir: dir, bins: bins, host: host, lock: lock, Containerd: filepath.Join(dir, "containerd", "containerd.sock")}
	if err := c.saveState(); err != nil {
		return nil, errors.Join(err, c.Delete())
	}
	if err := c.up(ctx, opts); err != nil {
		logs := c.LogTails(10)
		return nil, errors.Join(fmt.Errorf("%w\n%s", err, logs), c.Delete())
	}
	return c, nil
}

func binaries() (map[string]string, error) {
	bins := map[string]string{}
	var errs []error
	for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "kubectl", "mkimage"} {
		p, err := repo.LookTool(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		bins[name] = p
	}
	for name, p := range map[string]string{
		"containerd": "/usr/bin/containerd", "ctr": "/usr/bin/ctr", "runc": "/usr/sbin/runc",
		"cni-bridge": "/usr/lib/cni/bridge", "cni-host-local": "/usr/lib/cni/host-local", "cni-portmap": "/usr/lib/cni/portmap",
		"iptables": "/usr/sbin/iptables", "conntrack": "/usr/sbin/conntrack",
	} {
		if _, err := os.Stat(p); err != nil {
			errs = append(errs, fmt.Errorf("%s (%s) is missing: run 'make tools-realnode'", name, p))
			continue
		}
		bins[name] = p
	}
	if ip, err := exec.LookPath("ip"); err == nil {
		bins["ip"] = ip
	} else {
		errs = append(errs, fmt.Errorf("ip (iproute2): %w", err))
	}
	return bins, errors.Join(errs...)
}

func deadline(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(3 * time.Minute)
}

func (c *Cluster) up(ctx context.Context, opts Options) error {
	imgDir := filepath.Join(c.Dir, "images")
	if err := os.MkdirAll(imgDir, 0o755); err != nil {
		return err
	}
	pause, err := pauseImage(ctx, imgDir)
	if err != nil {
		return fmt.Errorf("pause image: %w", err)
	}
	ports, err := proc.FreePorts(8)
	if err != nil {
		return err
	}
	etcdClient, etcdPeer, etcdMetrics, apiPort, kcmPort, schedPort, kubeletHealthz, proxyHealthz := ports[0], ports[1], ports[2], ports[3], ports[4], ports[5], ports[6], ports[7]
	proxyMetrics, err := proc.FreePorts(1)
	if err != nil {
		return err
	}
	p, err := newPKI(filepath.Join(c.Dir, "pki"), []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(KubernetesServiceIP), net.ParseIP(NodeIP)})
	if err != nil {
		return fmt.Errorf("PKI: %w", err)
	}
	c.Server = fmt.Sprintf("https://%s:%d", NodeIP, apiPort)
	c.Kubeconfig = filepath.Join(c.Dir, "admin.kubeconfig")
	if err := writeFile(c.Kubeconfig, kubeconfig(c.Server, p)); err != nil {
		return err
	}

	// 1. The pod bridge holds the node IP; nothing from it is forwarded
	// anywhere else.
	for _, args := range [][]string{
		{"link", "add", BridgeName, "type", "bridge"},
		{"addr", "add", NodeIP + "/24", "dev", BridgeName},
		{"link", "set", BridgeName, "up"},
		// A ClusterIP without kube-proxy's rules (yet) would follow the
		// default route off the machine: route the Service range to the
		// bridge, where nobody answers for it.
		{"route", "add", ServiceCIDR, "dev", BridgeName},
	} {
		if out, err := exec.CommandContext(ctx, c.bins["ip"], args...).CombinedOutput(); err != nil {
			return fmt.Errorf("bridge: ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	if out, err := exec.CommandContext(ctx, c.bins["iptables"], "-w", "-I", "FORWARD", "-i", BridgeName, "!", "-o", BridgeName, "-j", "DROP").CombinedOutput(); err != nil {
		return fmt.Errorf("bridge: iptables FORWARD guard: %v: %s", err, out)
	}

	// 2. containerd, with the images.
	cdir := filepath.Join(c.Dir, "containerd")
	if err := writeFile(filepath.Join(cdir, "config.toml"), containerdConfig(cdir, c.Containerd)); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(cdir, "net.d", "10-realnode.conflist"), cniConfig(filepath.Join(c.Dir, "cni-ipam"))); err != nil {
		return err
	}
	containerd, err := c.start("containerd", c.bins["containerd"], "--config", filepath.Join(cdir, "config.toml"))
	if err != nil {
		return err
	}
	if err := c.waitFor(ctx, containerd, "answers on its socket", 30*time.Second, func() bool {
		return exec.Command(c.bins["ctr"], "--address", c.Containerd, "version").Run() == nil
	}); err != nil {
		return err
	}
	for _, img := range append([]Image{pause}, opts.Images...) {
		if err := c.Import(ctx, img); err != nil {
			return err
		}
	}

	// 3. etcd and the control plane.
	etcd, err := c.start("etcd", c.bins["etcd"], "--name", "realnode", "--data-dir", filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdClient),
		"--advertise-client-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdClient),
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdPeer),
		"--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdPeer),
		"--initial-cluster", fmt.Sprintf("realnode=http://127.0.0.1:%d", etcdPeer),
		"--listen-metrics-urls", fmt.Sprintf("http://127.0.0.1:%d", etcdMetrics),
		"--unsafe-no-fsync")
	if err != nil {
		return err
	}
	if err := c.waitFor(ctx, etcd, "healthy", 60*time.Second, func() bool {
		return httpOK(fmt.Sprintf("http://127.0.0.1:%d/health", etcdMetrics))
	}); err != nil {
		return err
	}
	apiserver, err := c.start("kube-apiserver", c.bins["kube-apiserver"],
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", etcdClient),
		"--bind-address="+NodeIP, fmt.Sprintf("--secure-port=%d", apiPort), "--advertise-address="+NodeIP,
		"--tls-cert-file="+p.apiserverCert, "--tls-private-key-file="+p.apiserverKey, "--client-ca-file="+p.caCert,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+p.saPub, "--service-account-signing-key-file="+p.saKey,
		"--service-cluster-ip-range="+ServiceCIDR, "--authorization-mode=Node,RBAC", "--allow-privileged=true",
		"--kubelet-client-certificate="+p.adminCert, "--kubelet-client-key="+p.adminKey,
		// Reach the kubelet by its IP: resolving the node name would ask the
		// system resolver, a lookup that leaves the machine.
		"--kubelet-preferred-address-types=InternalIP",
		"--cert-dir="+filepath.Join(c.Dir, "apiserver-certs"), "--profiling=false")
	if err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return err
	}
	c.RESTConfig = cfg
	scheme := opts.Scheme
	if scheme == nil {
		scheme = clientgoscheme.Scheme
	}
	if c.Client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if err := c.waitFor(ctx, apiserver, "/readyz", 120*time.Second, func() bool {
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && strings.TrimSpace(string(body)) == "ok"
	}); err != nil {
		return err
	}
	common := []string{"--kubeconfig=" + c.Kubeconfig, "--authentication-kubeconfig=" + c.Kubeconfig,
		"--authorization-kubeconfig=" + c.Kubeconfig, "--bind-address=127.0.0.1", "--leader-elect=false", "--profiling=false"}
	kcm, err := c.start("kube-controller-manager", c.bins["kube-controller-manager"], append(common,
		fmt.Sprintf("--secure-port=%d", kcmPort), "--use-service-account-credentials=false",
		"--service-account-private-key-file="+p.saKey, "--root-ca-file="+p.caCert,
		"--cluster-signing-cert-file="+p.caCert, "--cluster-signing-key-file="+p.caKey,
		"--service-cluster-ip-range="+ServiceCIDR,
		// HorizontalPodAutoscalers are evaluated every 2 s (15 s by
		// default), so a test's scale event lands within seconds.
		"--horizontal-pod-autoscaler-sync-period=2s")...)
	if err != nil {
		return err
	}
	sched, err := c.start("kube-scheduler", c.bins["kube-scheduler"], append(common, fmt.Sprintf("--secure-port=%d", schedPort))...)
	if err != nil {
		return err
	}

	// 4. The node.
	resolv := filepath.Join(c.Dir, "resolv.conf")
	if err := writeFile(resolv, "# real node: no name server, so no lookup leaves the machine\noptions ndots:1\n"); err != nil {
		return err
	}
	kubeletDir := filepath.Join(c.Dir, "kubelet")
	if err := writeFile(filepath.Join(c.Dir, "kubelet.yaml"), kubeletConfig(c.Containerd, p.caCert, resolv, filepath.Join(c.Dir, "podlogs"), kubeletHealthz)); err != nil {
		return err
	}
	kubelet, err := c.start("kubelet", c.bins["kubelet"], "--config="+filepath.Join(c.Dir, "kubelet.yaml"),
		"--kubeconfig="+c.Kubeconfig, "--root-dir="+kubeletDir, "--cert-dir="+filepath.Join(kubeletDir, "pki"),
		"--hostname-override="+NodeName, "--node-ip="+NodeIP, "--v=1")
	if err != nil {
		return err
	}
	if err := c.waitFor(ctx, kubelet, "registers node "+NodeName, 120*time.Second, func() bool {
		var n corev1.Node
		return c.Client.Get(ctx, types.NamespacedName{Name: NodeName}, &n) == nil
	}); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(c.Dir, "kube-proxy.yaml"), kubeProxyConfig(c.Kubeconfig, proxyHealthz, proxyMetrics[0])); err != nil {
		return err
	}
	proxy, err := c.start("kube-proxy", c.bins["kube-proxy"], "--config="+filepath.Join(c.Dir, "kube-proxy.yaml"), "--v=1")
	if err != nil {
		return err
	}
	if err := c.waitFor(ctx, kubelet, "reports node Ready", 120*time.Second, func() bool {
		var n corev1.Node
		if c.Client.Get(ctx, types.NamespacedName{Name: NodeName}, &n) != nil {
			return false
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue
			}
		}
		return false
	}); err != nil {
		return err
	}
	if err := c.waitFor(ctx, proxy, "healthy", 60*time.Second, func() bool {
		return httpOK(fmt.Sprintf("http://127.0.0.1:%d/healthz", proxyHealthz))
	}); err != nil {
		return err
	}
	for _, comp := range []*component{kcm, sched} {
		if err := comp.Exited(); err != nil {
			return fmt.Errorf("%s (%s): %w", comp.Name, comp.cmd, err)
		}
	}
	return c.waitFor(ctx, kcm, "creates the default ServiceAccount", 60*time.Second, func() bool {
		var sa corev1.ServiceAccount
		return c.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: "default"}, &sa) == nil
	})
}

func (c *Cluster) start(name, bin string, args ...string) (*component, error) {
	p, err := proc.Start(c.Dir, name, bin, args, nil)
	if err != nil {
		return nil, err
	}
	comp := &component{Process: p, cmd: bin + " " + strings.Join(args, " ")}
	c.procs = append(c.procs, comp)
	return comp, c.saveState()
}

// waitFor polls check until it holds; it fails with the component, its
// command and its log tail when the component exits or time runs out.
func (c *Cluster) waitFor(ctx context.Context, comp *component, what string, limit time.Duration, check func() bool) error {
	var exited error
	_, err := rig.Wait(ctx, limit, comp.Name+" "+what, func(context.Context) (bool, string, error) {
		if check() {
			return true, "", nil
		}
		exited = comp.Exited()
		return false, "", exited
	})
	switch {
	case err == nil:
		return nil
	case exited != nil:
		return fmt.Errorf("%s did not come up (waiting until it %s)\ncommand: %s\n%w", comp.Name, what, comp.cmd, exited)
	default:
		return fmt.Errorf("%s did not come up: it never %s within %s\ncommand: %s\nlast lines of %s:\n%s",
			comp.Name, what, limit, comp.cmd, comp.Log, proc.Tail(comp.Log, 20))
	}
}

// Import imports an image tarball into containerd's k8s.io namespace (the
// CRI's), as `ctr -n k8s.io images import` does.
//
// An image index (img.Index) is named img.Ref by its OCI archive; the node
// keeps the index with the content of its own platform only, and the import
// is checked: containerd must list img.Ref as an image index naming
// linux/amd64 and linux/arm64.
func (c *Cluster) Import(ctx context.Context, img Image) error {
	out, err := exec.CommandContext(ctx, c.bins["ctr"], "--address", c.Containerd, "-n", "k8s.io", "images", "import", img.Tar).CombinedOutput()
	if err != nil {
		return fmt.Errorf("import %s (ctr -n k8s.io images import %s): %v: %s", img.Ref, img.Tar, err, out)
	}
	if !img.Index {
		return nil
	}
	out, err = exec.CommandContext(ctx, c.bins["ctr"], "--address", c.Containerd, "-n", "k8s.io", "images", "ls", "name=="+img.Ref).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr images ls %s: %v: %s", img.Ref, err, out)
	}
	listed := string(out)
	if !strings.Contains(listed, "application/vnd.oci.image.index.v1+json") || !strings.Contains(listed, "linux/amd64") || !strings.Contains(listed, "linux/arm64") {
		return fmt.Errorf("containerd does not keep %s as an image index of linux/amd64 and linux/arm64:\n%s", img.Ref, listed)
	}
	return nil
}

// Kubectl runs bin/kubectl against the cluster and returns its combined
// output.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, c.bins["kubectl"], append([]string{"--kubeconfig", c.Kubeconfig}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// LogTails returns the last n lines of every component's log.
func (c *Cluster) LogTails(n int) string {
	var b strings.Builder
	for _, comp := range c.procs {
		fmt.Fprintf(&b, "--- %s (%s)\n%s\n", comp.Name, comp.Log, proc.Tail(comp.Log, n))
	}
	return b.String()
}

// Delete stops the node and restores the host: the pods' containers, the
// components (by pid, in reverse order), containerd's shims, then the
// network, mounts, sysctls, cgroups and folders. It is safe to call on a
// partly started node.
func (c *Cluster) Delete() error {
	var errs []error
	phase := time.Now()
	mark := func(what string) {
		c.StopTimings = append(c.StopTimings, fmt.Sprintf("%s %.1fs", what, time.Since(phase).Seconds()))
		phase = time.Now()
	}
	byName := map[string]*component{}
	for _, comp := range c.procs {
		byName[comp.Name] = comp
	}
	stop := func(names ...string) {
		for _, n := range names {
			if comp := byName[n]; comp != nil {
				if err := comp.Stop(10 * time.Second); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	stop("kube-proxy", "kubelet")
	mark("node")
	// The pods' processes, by their cgroups (as fast with 1 pod as with 50);
	// their shims then exit, and containerd with them.
	if c.host != nil {
		for _, dir := range kubepodsCgroups() {
			if !contains(c.host.Cgroups, dir) {
				killCgroupTree(dir)
			}
		}
	}
	mark("containers")
	stop("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd", "containerd")
	killShims(c.Containerd)
	mark("control plane and containerd")
	if byName["kube-proxy"] != nil {
		// kube-proxy's own cleanup of its iptables chains; restoreHost
		// checks nothing is left.
		_ = exec.Command(c.bins["kube-proxy"], "--cleanup", "--config="+filepath.Join(c.Dir, "kube-proxy.yaml")).Run()
	}
	if c.host != nil {
		errs = append(errs, restoreHost(c.host, c.Dir))
	}
	mark("host")
	if c.Dir != "" {
		errs = append(errs, os.RemoveAll(c.Dir))
	}
	if c.host != nil {
		errs = append(errs, os.RemoveAll(stateDir))
	}
	mark("files")
	if c.lock != nil {
		c.lock.Close()
	}
	return errors.Join(errs...)
}

// killShims kills the containerd shims started for socket (they outlive
// containerd by design), by pid.
func killShims(socket string) {
	if socket == "" {
		return
	}
	for _, pid := range shimPIDs(socket) {
		if p, err := os.FindProcess(pid); err == nil {
			_ = p.Kill()
		}
	}
	for i := 0; i < 50 && len(shimPIDs(socket)) > 0; i++ {
		time.Sleep(100 * time.Millisecond)
	}
}

func shimPIDs(socket string) []int {
	var pids []int
	for _, name := range listDir("/proc") {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", name, "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) > 0 && strings.Contains(args[0], "containerd-shim") && strings.Contains(string(cmdline), socket) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// persisted is what a later node needs to clean up after this one, should
// this test process die without calling Delete.
type persisted struct {
	Dir        string
	Containerd string
	PIDs       []int
	Host       *hostState
}

func (c *Cluster) saveState() error {
	if c.host == nil {
		return nil // not a node that changed the host
	}
	s := persisted{Dir: c.Dir, Containerd: c.Containerd, Host: c.host}
	for _, comp := range c.procs {
		s.PIDs = append(s.PIDs, comp.Pid())
	}
	data, err := json.Marshal(s)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(stateDir, "state.json"), data, 0o600)
}

// cleanLeftover stops what a dead test process left running and restores
// the host it recorded.
func cleanLeftover() error {
	data, err := os.ReadFile(filepath.Join(stateDir, "state.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var s persisted
	if err := json.Unmarshal(data, &s); err != nil {
		return errors.Join(err, os.RemoveAll(stateDir))
	}
	for _, pid := range s.PIDs {
		cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), s.Dir) {
			if p, err := os.FindProcess(pid); err == nil {
				_ = p.Kill()
			}
		}
	}
	killShims(s.Containerd)
	var errs []error
	if s.Host != nil {
		errs = append(errs, restoreHost(s.Host, s.Dir))
	}
	if s.Dir != "" {
		errs = append(errs, os.RemoveAll(s.Dir))
	}
	errs = append(errs, os.RemoveAll(stateDir))
	return errors.Join(errs...)
}

var httpClient = &http.Client{Timeout: 2 * time.Second}

func httpOK(url string) bool {
	resp, err := httpClient.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == 200
}
