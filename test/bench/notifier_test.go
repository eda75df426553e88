package bench

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/rollgate/rollgate/test/kwok"
	"github.com/rollgate/rollgate/test/proc"
	"github.com/rollgate/rollgate/test/repo"
	"github.com/rollgate/rollgate/test/rig"
)

// notifierRolloutsEnv sets how many Rollouts BenchmarkNotifierMemory
// creates (default 2,000).
const notifierRolloutsEnv = "ROLLGATE_BENCH_NOTIFIER_ROLLOUTS"

// notifierSettle is how long the notifier runs, its cache filled, before
// its resident memory is read.
const notifierSettle = 10 * time.Second

// BenchmarkNotifierMemory measures rollgate-notifier's resident memory
// (docs/notifications.md): the binary as `make build` builds it, against a
// kwok cluster, once with no Rollout and once with N Rollouts of three
// steps each (ROLLGATE_BENCH_NOTIFIER_ROLLOUTS, default 2,000; no
// controller runs, so they have no status). It prints the RSS of both and
// the cost per Rollout.
func BenchmarkNotifierMemory(b *testing.B) {
	n := 2000
	if v := os.Getenv(notifierRolloutsEnv); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("%s=%q: want a number of Rollouts above 0", notifierRolloutsEnv, v)
		}
	}
	bin := filepath.Join(b.TempDir(), "rollgate-notifier")
	build := exec.Command("go", "build", "-o", bin, "./cmd/rollgate-notifier")
	build.Dir = repo.Root()
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build ./cmd/rollgate-notifier: %v\n%s", err, out)
	}
	b.Run(fmt.Sprintf("rollouts=%d", n), func(b *testing.B) {
		for range b.N {
			benchmarkNotifierMemory(b, bin, n)
		}
	})
}

func benchmarkNotifierMemory(b *testing.B, bin string, n int) {
	scheme := rig.NewScheme(b)
	cl := kwok.Start(b, kwok.Options{Scheme: scheme})
	f := &fleet{b: b, cluster: cl, c: cl.Client, scheme: scheme, stable: map[string]string{}}
	f.applyFiles(filepath.Join(repo.Root(), "charts", "rollgate", "crds"))
	f.ensureNamespace(ns)

	idle := notifierRSS(b, bin, cl.Kubeconfig)
	for i := range n {
		f.names = append(f.names, fmt.Sprintf("app-%04d", i))
	}
	f.parallel(func(name string) {
		f.applyYAML(rig.Rollout{Name: name, Namespace: ns, WithoutTraffic: true,
			Steps: []string{"{replicas: 1, pause: {}}", `{replicas: "50%", pause: {duration: 60s}}`, `{replicas: "100%"}`}}.YAML())
	})
	full := notifierRSS(b, bin, cl.Kubeconfig)
	perRollout := (full - idle) * 1024 / float64(n)
	b.ReportMetric(full, "MiB-RSS")
	b.ReportMetric(perRollout, "KiB/rollout")
	fmt.Printf("notifier RSS, no Rollout: %.1f MiB\n", idle)
	fmt.Printf("notifier RSS, %d Rollouts: %.1f MiB\n", n, full)
	fmt.Printf("notifier memory per Rollout: %.1f KiB\n", perRollout)
}

// notifierRSS runs the notifier against the cluster of kubeconfig until
// it is ready and has run notifierSettle, and returns its resident memory
// in MiB.
func notifierRSS(b *testing.B, bin, kubeconfig string) float64 {
	b.Helper()
	ports, err := proc.FreePorts(2)
	if err != nil {
		b.Fatal(err)
	}
	probe := fmt.Sprintf("127.0.0.1:%d", ports[1])
	p, err := proc.Start(b.TempDir(), "rollgate-notifier", bin, []string{"--kubeconfig", kubeconfig, "--namespace", ns,
		"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", ports[0]), "--health-probe-bind-address", probe}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := p.Stop(10 * time.Second); err != nil {
			b.Errorf("stopping the notifier: %v\n%s", err, proc.Tail(p.Log, 20))
		}
	}()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if err := p.Exited(); err != nil {
			b.Fatalf("the notifier exited: %v\n%s", err, proc.Tail(p.Log, 20))
		}
		resp, err := http.Get("http://" + probe + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("the notifier was not ready within 2 minutes:\n%s", proc.Tail(p.Log, 20))
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(notifierSettle)
	return procRSSMiB(b, p.Pid())
}
