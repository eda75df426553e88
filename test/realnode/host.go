package realnode

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// lockPath serialises real nodes on a machine: the bridge, the node IP, the
// kubelet's port and kube-proxy's iptables chains are host-wide, so a second
// test package waits for the first one's node to be gone.
const lockPath = "/run/rollgate-realnode.lock"

// stateDir holds what the running node changed on the host, so a node whose
// test process died without cleaning up is cleaned up by the next one.
const stateDir = "/run/rollgate-realnode"

// sysctls the kubelet, kube-proxy and the CNI plugins may change; each is
// recorded before the node starts and written back after it stops.
var sysctls = []string{
	"kernel/panic", "kernel/panic_on_oops", "vm/overcommit_memory", "vm/panic_on_oom",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
	"net/ipv4/ip_forward", "net/ipv4/conf/all/forwarding", "net/ipv4/conf/default/forwarding",
	"net/ipv6/conf/all/forwarding", "net/ipv6/conf/default/forwarding",
	"net/ipv4/conf/all/route_localnet",
	"net/bridge/bridge-nf-call-iptables", "net/bridge/bridge-nf-call-ip6tables",
	"net/netfilter/nf_conntrack_max", "net/netfilter/nf_conntrack_tcp_timeout_established",
	"net/netfilter/nf_conntrack_tcp_timeout_close_wait", "net/netfilter/nf_conntrack_tcp_be_liberal",
}

// hostPaths are folders the kubelet, containerd and libcni create at fixed
// places whatever their configuration says; the ones that did not exist
// before the node are removed after it.
var hostPaths = []string{
	"/var/lib/kubelet", "/var/lib/cni", "/run/containerd", "/run/netns", "/var/run/netns",
	"/etc/cni", "/opt/cni", "/var/log/pods", "/var/log/containers", "/run/calico",
}

// hostState is the host as it was before the node started.
type hostState struct {
	Sysctls  map[string]string
	Netns    []string
	Mounts   []string
	Paths    []string // hostPaths that existed
	Cgroups  []string // cgroup folders named kubepods* that existed
	Iptables map[string][]string
	Tables   []string // nft tables ("ip filter"), iptables-nft makes them on first use
}

func readLines(path string) []string {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimSpace(string(data)), "\n")
}

func recordHost() (*hostState, error) {
	s := &hostState{Sysctls: map[string]string{}, Iptables: map[string][]string{}}
	for _, k := range sysctls {
		if v, err := os.ReadFile(filepath.Join("/proc/sys", k)); err == nil {
			s.Sysctls[k] = strings.TrimSpace(string(v))
		}
	}
	s.Netns = listDir("/run/netns")
	s.Mounts = mountPoints()
	for _, p := range hostPaths {
		if _, err := os.Lstat(p); err == nil {
			s.Paths = append(s.Paths, p)
		}
	}
	s.Cgroups = kubepodsCgroups()
	tables, err := nftTables()
	if err != nil {
		return nil, err
	}
	s.Tables = tables
	for _, tool := range []string{"iptables", "ip6tables"} {
		rules, err := iptablesRules(tool)
		if err != nil {
			return nil, err
		}
		s.Iptables[tool] = rules
	}
	return s, nil
}

func listDir(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func mountPoints() []string {
	var points []string
	for _, line := range readLines("/proc/self/mountinfo") {
		f := strings.Fields(line)
		if len(f) > 4 {
			points = append(points, f[4])
		}
	}
	return points
}

func kubepodsCgroups() []string {
	var dirs []string
	for _, ctl := range listDir("/sys/fs/cgroup") {
		for _, name := range []string{"kubepods", "kubepods.slice"} {
			p := filepath.Join("/sys/fs/cgroup", ctl, name)
			if _, err := os.Stat(p); err == nil {
				dirs = append(dirs, p)
			}
		}
	}
	if _, err := os.Stat("/sys/fs/cgroup/kubepods"); err == nil {
		dirs = append(dirs, "/sys/fs/cgroup/kubepods")
	}
	return dirs
}

// iptablesRules lists the chains and rules of every table, without counters.
func iptablesRules(tool string) ([]string, error) {
	if _, err := exec.LookPath(tool + "-save"); err != nil {
		return nil, fmt.Errorf("%s-save: %w (make tools installs iptables)", tool, err)
	}
	out, err := exec.Command(tool + "-save").Output()
	if err != nil {
		return nil, fmt.Errorf("%s-save: %w", tool, err)
	}
	var rules []string
	table := ""
	for _, line := range strings.Split(string(out), "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:]
		case strings.HasPrefix(line, ":"):
			rules = append(rules, table+" "+strings.Fields(line)[0])
		case strings.HasPrefix(line, "-A"):
			rules = append(rules, table+" "+line)
		}
	}
	sort.Strings(rules)
	return rules, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// restoreHost undoes everything the node did to the host. It is called once
// every process of the node has stopped; each step runs even when an earlier
// one failed, and the errors are joined.
func restoreHost(s *hostState, root string) error {
	var errs []error
	// Processes of pods whose runtime is gone (a dead test process).
	for _, dir := range kubepodsCgroups() {
		if !contains(s.Cgroups, dir) {
			killCgroupTree(dir)
		}
	}
	// Network namespaces of pods (containerd's CNI made them under /run/netns).
	for _, ns := range listDir("/run/netns") {
		if !contains(s.Netns, ns) {
			p := filepath.Join("/run/netns", ns)
			_ = syscall.Unmount(p, syscall.MNT_DETACH)
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	// Mounts made since (pod volumes, overlay root filesystems, shm), deepest
	// first.
	for i := 0; i < 3; i++ {
		var fresh []string
		for _, m := range mountPoints() {
			if !contains(s.Mounts, m) && ours(m, root) {
				fresh = append(fresh, m)
			}
		}
		if len(fresh) == 0 {
			break
		}
		sort.Sort(sort.Reverse(sort.StringSlice(fresh)))
		for _, m := range fresh {
			_ = syscall.Unmount(m, syscall.MNT_DETACH)
		}
	}
	for _, m := range mountPoints() {
		if !contains(s.Mounts, m) && ours(m, root) {
			errs = append(errs, fmt.Errorf("mount %s is still there", m))
		}
	}
	// The bridge (its veths went with the namespaces).
	if _, err := os.Stat(filepath.Join("/sys/class/net", BridgeName)); err == nil {
		if out, err := exec.Command("ip", "link", "delete", BridgeName).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip link delete %s: %v: %s", BridgeName, err, out))
		}
	}
	errs = append(errs, restoreIptables(s))
	// Sysctls.
	for k, v := range s.Sysctls {
		p := filepath.Join("/proc/sys", k)
		now, err := os.ReadFile(p)
		if err != nil || strings.TrimSpace(string(now)) == v {
			continue
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore sysctl %s=%s: %w", k, v, err))
		}
	}
	// cgroups of pods (cgroupfs driver), deepest first.
	for _, dir := range kubepodsCgroups() {
		if !contains(s.Cgroups, dir) {
			removeCgroupTree(dir)
		}
	}
	// Folders created at fixed host paths.
	for _, p := range hostPaths {
		if contains(s.Paths, p) {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ours reports whether a mount point is one the node may have made: under
// its folder or under the fixed paths of the kubelet, containerd and CNI
// (mounts of other tests elsewhere are left alone).
func ours(mount, root string) bool {
	if root != "" && strings.HasPrefix(mount, root+"/") {
		return true
	}
	for _, p := range hostPaths {
		if mount == p || strings.HasPrefix(mount, p+"/") {
			return true
		}
	}
	return false
}

// killCgroupTree kills every process in a cgroup tree (containers whose
// shim is gone).
func killCgroupTree(dir string) {
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		for _, line := range readLines(filepath.Join(p, "cgroup.procs")) {
			var pid int
			if _, err := fmt.Sscan(line, &pid); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		return nil
	})
}

func removeCgroupTree(dir string) {
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		for try := 0; try < 20; try++ {
			if err := syscall.Rmdir(dirs[i]); err == nil || errors.Is(err, syscall.ENOENT) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// restoreIptables removes the chains and rules that were not there before
// (kube-proxy's KUBE-*, the CNI plugins' CNI-*, our FORWARD guard), then
// checks the tables are as they were.
func restoreIptables(s *hostState) error {
	var errs []error
	for _, tool := range []string{"iptables", "ip6tables"} {
		before := s.Iptables[tool]
		now, err := iptablesRules(tool)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		// Rules first (they may jump to new chains), then the new chains.
		for _, r := range now {
			table, rule, _ := strings.Cut(r, " ")
			if !strings.HasPrefix(rule, "-A ") || contains(before, r) {
				continue
			}
			args := append([]string{"-w", "-t", table, "-D"}, splitRule(strings.TrimPrefix(rule, "-A "))...)
			if out, err := exec.Command(tool, args...).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("%s %s: %v: %s", tool, strings.Join(args, " "), err, bytes.TrimSpace(out)))
			}
		}
		for _, r := range now {
			table, chain, _ := strings.Cut(r, " ")
			if !strings.HasPrefix(chain, ":") || contains(before, r) {
				continue
			}
			name := chain[1:]
			if builtinChain[name] {
				continue
			}
			_ = exec.Command(tool, "-w", "-t", table, "-F", name).Run()
			if out, err := exec.Command(tool, "-w", "-t", table, "-X", name).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("%s -t %s -X %s: %v: %s", tool, table, name, err, bytes.TrimSpace(out)))
			}
		}
	}
	// iptables-nft leaves the tables it made behind, empty: drop them.
	if tables, err := nftTables(); err == nil {
		for _, t := range tables {
			if contains(s.Tables, t) || !nftTableEmpty(t) {
				continue
			}
			if out, err := exec.Command("nft", append([]string{"delete", "table"}, strings.Fields(t)...)...).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("nft delete table %s: %v: %s", t, err, bytes.TrimSpace(out)))
			}
		}
	}
	for _, tool := range []string{"iptables", "ip6tables"} {
		before := s.Iptables[tool]
		after, err := iptablesRules(tool)
		if err == nil {
			for _, r := range after {
				if !contains(before, r) {
					errs = append(errs, fmt.Errorf("%s: %q is still there", tool, r))
				}
			}
		}
	}
	return errors.Join(errs...)
}

var builtinChain = map[string]bool{"PREROUTING": true, "INPUT": true, "FORWARD": true, "OUTPUT": true, "POSTROUTING": true}

// nftTables lists the nftables tables ("ip filter", "ip6 nat").
func nftTables() ([]string, error) {
	out, err := exec.Command("nft", "list", "tables").Output()
	if err != nil {
		return nil, fmt.Errorf("nft list tables: %w (make tools-realnode installs nftables)", err)
	}
	var tables []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "table" {
			tables = append(tables, f[1]+" "+f[2])
		}
	}
	return tables, nil
}

// nftTableEmpty reports whether a table holds chains without a rule.
func nftTableEmpty(table string) bool {
	out, err := exec.Command("nft", append([]string{"list", "table"}, strings.Fields(table)...)...).Output()
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "table", "chain", "type", "policy", "}":
		default:
			return false
		}
	}
	return true
}

// splitRule splits an iptables-save rule into arguments, honouring double
// quotes (comments).
func splitRule(rule string) []string {
	var args []string
	var cur strings.Builder
	inQuote, escaped, have := false, false, false
	for _, r := range rule {
		switch {
		case escaped:
			cur.WriteRune(r)
			escaped = false
		case r == '\\':
			escaped = true
		case r == '"':
			inQuote, have = !inQuote, true
		case r == ' ' && !inQuote:
			if have || cur.Len() > 0 {
				args = append(args, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteRune(r)
		}
	}
	if have || cur.Len() > 0 {
		args = append(args, cur.String())
	}
	return args
}
