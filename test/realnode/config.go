package realnode

import (
	"fmt"
	"os"
	"path/filepath"
)

// The fixed addresses of the node. One real node runs at a time on a machine
// (see lock in host.go), so they need not be unique.
const (
	// BridgeName is the Linux bridge the pods are attached to.
	BridgeName = "rgnode0"
	// NodeIP is the node's address, on the bridge: the kubelet, the API
	// server (for pods) and the pods' gateway live here.
	NodeIP = "10.244.0.1"
	// NodeName is the node's name.
	NodeName = "rgnode"
	// PodCIDR holds every pod IP.
	PodCIDR = "10.244.0.0/24"
	// ServiceCIDR holds every ClusterIP; the first one is the kubernetes
	// Service.
	ServiceCIDR = "10.96.0.0/16"
	// KubernetesServiceIP is the ClusterIP of the default/kubernetes Service.
	KubernetesServiceIP = "10.96.0.1"
	// PauseImage is containerd's sandbox image, imported before the node
	// starts.
	PauseImage = "localhost/rollgate-pause:v1"
)

func writeFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o600)
}

// containerdConfig is containerd 1.6's (Debian bookworm) configuration: every
// path in dir, runc with cgroupfs, the CNI bridge from Debian's
// containernetworking-plugins and the local pause image.
func containerdConfig(dir, socket string) string {
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
oom_score = 0

[grpc]
  address = %[3]q

[ttrpc]
  address = "%[3]s.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  enable_selinux = false
  # no CAP_SYS_RESOURCE in this VM kind: a negative oom_score_adj fails (EACCES)
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[6]q
    max_conf_num = 1
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), socket, filepath.Join(dir, "opt"),
		PauseImage, filepath.Join(dir, "net.d"))
}

// cniConfig attaches pods to BridgeName with addresses from PodCIDR; no
// masquerading, so nothing a pod sends can leave the machine disguised as
// the host (the FORWARD drop rule stops the rest).
func cniConfig(ipamDir string) string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "realnode",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": %q,
        "ranges": [[{"subnet": %q, "gateway": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, BridgeName, ipamDir, PodCIDR, NodeIP)
}

// kubeletConfig is the kubelet's configuration for this VM kind: cgroup v1
// allowed, cgroupfs, swap tolerated, no negative oom_score_adj, no image
// garbage collection (images are imported, never pulled), serving only on
// the node IP.
func kubeletConfig(socket, caFile, resolvConf, podLogs string, healthzPort int) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://%[1]s
imageServiceEndpoint: unix://%[1]s
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
address: %[2]s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %[6]d
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %[3]q}
authorization: {mode: AlwaysAllow}
clusterDomain: cluster.local
resolvConf: %[4]q
podLogsDir: %[5]q
staticPodPath: ""
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
oomScoreAdj: 0
serializeImagePulls: false
maxPods: 110
syncFrequency: 10s
fileCheckFrequency: 10s
`, socket, NodeIP, caFile, resolvConf, podLogs, healthzPort)
}

// kubeProxyConfig runs kube-proxy in iptables mode without touching the
// host's conntrack sysctls or route_localnet.
func kubeProxyConfig(kubeconfig string, healthzPort, metricsPort int) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %q
hostnameOverride: %s
mode: iptables
clusterCIDR: %s
healthzBindAddress: 127.0.0.1:%d
metricsBindAddress: 127.0.0.1:%d
oomScoreAdj: 0
nodePortAddresses: ["%s/32"]
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
iptables:
  localhostNodePorts: false
  syncPeriod: 30s
  minSyncPeriod: 1s
`, kubeconfig, NodeName, PodCIDR, healthzPort, metricsPort, NodeIP)
}

// kubeconfig is an admin kubeconfig for server.
func kubeconfig(server string, p *pki) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: realnode
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: admin
  user:
    client-certificate: %s
    client-key: %s
contexts:
- name: realnode
  context: {cluster: realnode, user: admin}
current-context: realnode
`, server, p.caCert, p.adminCert, p.adminKey)
}
