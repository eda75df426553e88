package bench

import (
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/watch"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/rollgate/rollgate/test/kwok"
	"github.com/rollgate/rollgate/test/rig"
)

// BenchmarkClusterAlone is the floor under P2 of docs/benchmarks.md: the
// same simulated cluster and the same N 1-replica Deployments as
// BenchmarkScale (ROLLGATE_BENCH_SCALE, default defaultScale), without
// rollgate. Every image is changed at once the same way, and each
// Deployment is timed from its change to the moment a watch sees its new
// pod available (the Deployment controller's own rolling update: one new
// pod, then the old one goes) and to the rollout's end (the old pod gone).
// A release to rollgate's first gate needs at least the first: a new pod
// made ready by the cluster. The cluster's controller manager and
// scheduler run with the client limit of BenchmarkScale (scaleClientQPS).
func BenchmarkClusterAlone(b *testing.B) {
	n := scaleFromEnv(b)
	b.Run(fmt.Sprintf("deployments=%d", n), func(b *testing.B) {
		for range b.N {
			benchmarkClusterAlone(b, n)
		}
	})
}

func benchmarkClusterAlone(b *testing.B, n int) {
	start := time.Now()
	// The watch client logs through controller-runtime's logger, which
	// warns with a stack trace when none was set.
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	scheme := rig.NewScheme(b)
	cl := kwok.Start(b, kwok.Options{Nodes: max(3, n/80+1), Scheme: scheme, ClientQPS: scaleClientQPS})
	f := &fleet{b: b, cluster: cl, c: cl.Client, scheme: scheme, stable: map[string]string{}, opts: fleetOptions{replicas: 1}}
	f.ensureNamespace(ns)
	for i := range n {
		f.names = append(f.names, fmt.Sprintf("app-%03d", i))
	}
	f.parallel(func(name string) { f.applyYAML(deploymentYAML(name, "app:1.0", 1)) })
	f.poll(10*time.Minute, "every Deployment available", func(ctx context.Context) (bool, error) {
		var list appsv1.DeploymentList
		if err := f.c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return false, nil
		}
		ready := 0
		for _, d := range list.Items {
			if d.Status.AvailableReplicas == 1 && d.Status.ObservedGeneration == d.Generation {
				ready++
			}
		}
		return ready == n, nil
	})
	b.Logf("%d Deployments available %v after start", n, time.Since(start).Round(time.Second))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := f.watchRollingUpdates(ctx)
	var mu sync.Mutex
	changed := map[string]time.Time{}
	b.ResetTimer()
	f.parallel(func(name string) {
		at := time.Now()
		f.applyYAML(deploymentYAML(name, "app:2.0", 1))
		mu.Lock()
		changed[name] = at
		mu.Unlock()
	})
	timeout := max(10*time.Minute, time.Duration(n)*1200*time.Millisecond)
	select {
	case <-w.done:
	case <-time.After(timeout):
	}
	b.StopTimer()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.finished) != n {
		b.Fatalf("%d of %d Deployments rolled out after %v", len(w.finished), n, timeout)
	}
	var avail, done []time.Duration
	for name, at := range changed {
		avail = append(avail, w.available[name].Sub(at))
		done = append(done, w.finished[name].Sub(at))
	}
	row := func(what string, d time.Duration) {
		fmt.Printf("P2 cluster alone, %d Deployments, %s: %.*f s\n", n, what, decimals(d.Seconds()), d.Seconds())
	}
	row("new pod available p50", percentile(avail, 50))
	row("new pod available p95", percentile(avail, 95))
	row("new pod available max", percentile(avail, 100))
	row("rolled out p50", percentile(done, 50))
	row("rolled out max", percentile(done, 100))
}

// rollingWatch timestamps, from a watch on the Deployments, the moment
// each one first has its new pod available and the moment its rolling
// update is over.
type rollingWatch struct {
	mu                  sync.Mutex
	available, finished map[string]time.Time
	want                int
	done                chan struct{}
}

// watchRollingUpdates watches the Deployments of ns for updates past
// their current generation (1); it stops when ctx ends.
func (f *fleet) watchRollingUpdates(ctx context.Context) *rollingWatch {
	f.b.Helper()
	wc, err := client.NewWithWatch(f.cluster.RESTConfig, client.Options{Scheme: f.scheme})
	if err != nil {
		f.b.Fatal(err)
	}
	r := &rollingWatch{available: map[string]time.Time{}, finished: map[string]time.Time{}, want: len(f.names), done: make(chan struct{})}
	w, err := wc.Watch(ctx, &appsv1.DeploymentList{}, client.InNamespace(ns))
	if err != nil {
		f.b.Fatal(err)
	}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			d, ok := ev.Object.(*appsv1.Deployment)
			if !ok || ev.Type != watch.Modified || d.Generation < 2 || d.Status.ObservedGeneration < d.Generation {
				continue
			}
			st := d.Status
			now := time.Now()
			r.mu.Lock()
			if _, dup := r.available[d.Name]; !dup && st.UpdatedReplicas >= 1 && st.Replicas >= 1 && st.AvailableReplicas >= st.Replicas {
				r.available[d.Name] = now
			}
			if _, dup := r.finished[d.Name]; !dup && st.UpdatedReplicas == 1 && st.Replicas == 1 && st.AvailableReplicas == 1 {
				r.finished[d.Name] = now
				if len(r.finished) == r.want {
					close(r.done)
				}
			}
			r.mu.Unlock()
		}
	}()
	return r
}
