package bench

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/rollgate/rollgate/test/kwok"
	"github.com/rollgate/rollgate/test/proc"
	"github.com/rollgate/rollgate/test/repo"
	"github.com/rollgate/rollgate/test/rig"
	"github.com/rollgate/rollgate/test/shards"
)

// shardKey is Flux's sharding label, which rollgate shards by.
const shardKey = "sharding.fluxcd.io/key"

// BenchmarkShards is the "Shards" section of docs/benchmarks.md: N
// Rollouts (1-replica Deployments, as in P2) released to their step-1
// gate at once, first by one `rollgate controller` process for all of
// them, then, on a new cluster, by two processes splitting them by
// Flux's sharding label (a main instance with
// --watch-label-selector '!sharding.fluxcd.io/key' for the unlabelled
// half, a shard with 'sharding.fluxcd.io/key in (shard1)' for the
// labelled half). The controllers are real processes built from this
// tree, so their RSS is their own; each prints one figure per line,
// starting with "P2s".
func BenchmarkShards(b *testing.B) {
	n := defaultScale
	if v := os.Getenv(scaleEnv); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 2 {
			b.Fatalf("%s=%q: want a number of Rollouts, such as 1000", scaleEnv, v)
		}
	}
	bin := buildController(b)
	// The benchmark's watch client logs through ctrl.Log, which warns
	// with a stack trace when no logger was ever set.
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	// One cluster after the other: the second must not share the
	// machine with the first.
	for _, tc := range []struct {
		name      string
		instances map[string]string
	}{
		{"controllers=1", map[string]string{"all": ""}},
		{"shards=2", map[string]string{"main": "!" + shardKey, "shard1": shardKey + " in (shard1)"}},
	} {
		b.Run(fmt.Sprintf("rollouts=%d/%s", n, tc.name), func(b *testing.B) {
			for range b.N {
				benchmarkShards(b, bin, n, tc.instances)
			}
		})
	}
}

// benchmarkShards runs one cluster with n Rollouts and one controller
// process per entry of instances (name -> --watch-label-selector); with
// a shard1 instance, every second Rollout is labelled shard1.
func benchmarkShards(b *testing.B, bin string, n int, instances map[string]string) {
	b.Helper()
	setup := time.Now()
	scheme := rig.NewScheme(b)
	cl := kwok.Start(b, kwok.Options{Nodes: max(3, n/80+1), Scheme: scheme})
	f := &fleet{b: b, cluster: cl, c: cl.Client, scheme: scheme, stable: map[string]string{}, opts: fleetOptions{replicas: 1}}
	f.applyFiles(filepath.Join(repo.Root(), "charts", "rollgate", "crds"))
	f.applyFiles(repo.HTTPRouteCRD("standard"))
	f.ensureNamespace("rollgate-system")
	f.ensureNamespace(ns)
	_, sharded := instances["shard1"]
	procs := startControllers(b, bin, cl.Kubeconfig, instances)
	label := func(i int) string {
		if sharded && i%2 == 1 {
			return "shard1"
		}
		return ""
	}
	shardOf := map[string]string{}
	for i := range n {
		name := fmt.Sprintf("app-%03d", i)
		f.names = append(f.names, name)
		shardOf[name] = label(i)
	}
	f.parallel(func(name string) {
		f.applyYAML(appYAML(name, "app:1.0", 1) + labelled(rolloutYAML(name), shardOf[name]))
	})
	f.waitHealthy(10*time.Minute, nil)
	what := "1 controller"
	if sharded {
		what = fmt.Sprintf("%d shards", len(instances))
	}
	b.Logf("%d Rollouts healthy under %s %v after start", n, what, time.Since(setup).Round(time.Second))
	row := func(subject string, v float64, unit string) {
		fmt.Printf("P2s shards, %d Rollouts, %s, %s: %.*f %s\n", n, what, subject, decimals(v), v, unit)
	}
	before := map[string]float64{}
	for name, p := range procs {
		row("RSS at rest of "+name, procRSSMiB(b, p.proc.Pid()), "MiB")
		before[name] = p.reconciles(b)
	}
	s := f.releaseToGate("app:2.0")
	row("first gate p50", percentile(s.gate, 50).Seconds(), "s")
	row("first gate p95", percentile(s.gate, 95).Seconds(), "s")
	row("first gate max", percentile(s.gate, 100).Seconds(), "s")
	for name, p := range procs {
		row("RSS with every release at its gate of "+name, procRSSMiB(b, p.proc.Pid()), "MiB")
		row("Rollout reconciles during the release by "+name, p.reconciles(b)-before[name], "reconciles")
	}
}

// labelled puts rolloutYAML's Rollout in shard ("" leaves it unlabelled).
func labelled(rolloutYAML, shard string) string {
	if shard == "" {
		return rolloutYAML
	}
	return strings.Replace(rolloutYAML, "namespace: "+ns+"}", fmt.Sprintf("namespace: %s, labels: {%s: %s}}", ns, shardKey, shard), 1)
}

// controllerProc is one `rollgate controller` process of the benchmark.
type controllerProc struct {
	proc    *proc.Process
	metrics string
}

// buildController builds cmd/rollgate of this tree: the benchmark
// measures the code it sits next to, not an older bin/rollgate.
func buildController(b *testing.B) string {
	b.Helper()
	bin := filepath.Join(b.TempDir(), "rollgate")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/rollgate")
	cmd.Dir = repo.Root()
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("go build ./cmd/rollgate: %v\n%s", err, out)
	}
	return bin
}

// startControllers starts one controller process per instance, as the
// chart runs them (leader election on, production defaults), the webhook
// servers behind one balanced address as behind the chart's Service; they
// are stopped, by pid, when the benchmark ends.
func startControllers(b *testing.B, bin, kubeconfig string, instances map[string]string) map[string]*controllerProc {
	b.Helper()
	lb := shards.StartBalancer(b)
	dir := b.TempDir()
	out := map[string]*controllerProc{}
	for name, selector := range instances {
		ports, err := proc.FreePorts(3)
		if err != nil {
			b.Fatal(err)
		}
		args := []string{"controller", "--kubeconfig", kubeconfig, "--namespace", "rollgate-system", "--leader-elect",
			"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", ports[0]),
			"--health-probe-bind-address", fmt.Sprintf("127.0.0.1:%d", ports[1]),
			"--webhook-url", lb.URL(), "--webhook-bind-host", "127.0.0.1", "--webhook-port", strconv.Itoa(ports[2]),
			"--git-webhook-bind-address", "0", "--log-level", "error"}
		if selector != "" {
			args = append(args, "--watch-label-selector", selector)
		}
		p, err := proc.Start(dir, name, bin, args, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			if err := p.Stop(10 * time.Second); err != nil {
				b.Logf("stop %s: %v", name, err)
			}
		})
		out[name] = &controllerProc{proc: p, metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[0])}
		lb.AddWhenReady(b, name, ports[2], fmt.Sprintf("127.0.0.1:%d", ports[1]), 60*time.Second, func() error {
			if err := p.Exited(); err != nil {
				return fmt.Errorf("%w:\n%s", err, proc.Tail(p.Log, 30))
			}
			return nil
		})
	}
	return out
}

// reconciles reads the process's count of Rollout reconciles from its
// metrics endpoint (controller-runtime's reconcile_total, every result).
func (p *controllerProc) reconciles(b *testing.B) float64 {
	b.Helper()
	resp, err := http.Get(p.metrics)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var total float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "controller_runtime_reconcile_total{") || !strings.Contains(line, `controller="rollout"`) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			b.Fatalf("metrics line %q: %v", line, err)
		}
		total += v
	}
	return total
}

// procRSSMiB is the resident set size of process pid.
func procRSSMiB(b *testing.B, pid int) float64 {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				b.Fatalf("VmRSS %q: %v", rest, err)
			}
			return kb / 1024
		}
	}
	b.Fatalf("no VmRSS for pid %d", pid)
	return 0
}
