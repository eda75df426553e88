package bench

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/gitserver"
	"github.com/rollgate/rollgate/test/rig"
)

// approvalGates is the number of gates each mode of
// BenchmarkApprovalLatency measures.
const approvalGates = 50

// pollInterval is the Repository's fetch interval in the polling mode.
const pollInterval = 5 * time.Second

// BenchmarkApprovalLatency is P1 of docs/benchmarks.md: the time from an
// approval branch merged in Git to the next step started (the Rollout's
// status at that step), over approvalGates Rollouts. The fleet is
// released to its step-1 gate; then, one merge every 200 ms, each
// approval branch is merged on the Git server followed by a push webhook
// call (the Repository polls only every 10 minutes), and the time until
// the Rollout's status shows step 2 is taken. At the step-2 gates the
// webhook is no longer called and the Repository polls every 5 s.
func BenchmarkApprovalLatency(b *testing.B) {
	srv := gitserver.Start(b, gitserver.Options{})
	files := map[string]string{}
	for i := range approvalGates {
		name := fmt.Sprintf("app-%03d", i)
		files["apps/"+name+"/rollout.yaml"] = strings.TrimPrefix(gitRolloutYAML(name), "\n---\n")
	}
	url, err := srv.CreateRepo("app", files)
	if err != nil {
		b.Fatal(err)
	}
	port := rig.FreePort(b)
	f := startFleetWith(b, approvalGates, fleetOptions{gitURL: url, interval: 10 * time.Minute, gitWebhookPort: port})
	for range b.N {
		f.releaseToGate("app:2.0")
		hook := fmt.Sprintf("http://127.0.0.1:%d/hook/%s/app-repo", port, ns)
		push := f.mergeApprovals(srv, 1, hook)
		// The Rollouts at the step-2 gates planned their next look with
		// the 10-minute interval; every one looks again within the
		// release resync (30 s) and then keeps to the new interval.
		f.setInterval(pollInterval)
		time.Sleep(35 * time.Second)
		poll := f.mergeApprovals(srv, 2, "")
		for _, m := range []struct {
			name string
			d    []time.Duration
		}{{"push webhook", push}, {fmt.Sprintf("polling every %v", pollInterval), poll}} {
			fmt.Printf("P1 approval latency, %s, %d gates: p50 %.2f s\n", m.name, len(m.d), percentile(m.d, 50).Seconds())
			fmt.Printf("P1 approval latency, %s, %d gates: p99 %.2f s\n", m.name, len(m.d), percentile(m.d, 99).Seconds())
			fmt.Printf("P1 approval latency, %s, %d gates: max %.2f s\n", m.name, len(m.d), percentile(m.d, 100).Seconds())
		}
		b.ReportMetric(percentile(push, 50).Seconds(), "push-p50-s")
		b.ReportMetric(percentile(push, 99).Seconds(), "push-p99-s")
		b.ReportMetric(percentile(poll, 50).Seconds(), "poll-p50-s")
		b.ReportMetric(percentile(poll, 99).Seconds(), "poll-p99-s")
	}
}

// gitRolloutYAML is the Rollout of name with spec.git naming its manifest
// in the Repository "app-repo".
func gitRolloutYAML(name string) string {
	return rolloutYAML(name) + fmt.Sprintf("  git: {repository: app-repo, path: apps/%s/rollout.yaml}\n", name)
}

// setInterval changes the Repository's fetch interval.
func (f *fleet) setInterval(d time.Duration) {
	f.b.Helper()
	repo := &v1alpha1.Repository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-repo"}}
	patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"interval":%q}}`, d.String()))
	if err := f.c.Patch(context.Background(), repo, patch); err != nil {
		f.b.Fatal(err)
	}
}

// mergeApprovals waits until every Rollout waits at the gate of step with
// its approval branch in Git, then merges the branches one every 200 ms
// (calling hook after each merge when set) and returns, per Rollout, the
// time from its merge to its status showing step+1.
func (f *fleet) mergeApprovals(srv *gitserver.Server, step int32, hook string) []time.Duration {
	f.b.Helper()
	branches := map[string]string{}
	f.poll(5*time.Minute, fmt.Sprintf("approval branches of step %d", step), func(ctx context.Context) (bool, error) {
		var list v1alpha1.RolloutList
		if err := f.c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return false, nil
		}
		for _, ro := range list.Items {
			if a := ro.Status.AwaitingApproval; a != nil && a.Step == step && a.Branch != "" {
				if h, err := srv.Head("app", a.Branch); err == nil && h != "" {
					branches[ro.Name] = a.Branch
				}
			}
		}
		return len(branches) == len(f.names), nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	moved := f.watchStep(ctx, step+1)
	merged := map[string]time.Time{}
	for _, name := range f.names {
		if _, err := srv.Merge("app", "main", branches[name], "Merge approval of "+name); err != nil {
			f.b.Fatalf("merge %s: %v", branches[name], err)
		}
		merged[name] = time.Now()
		if hook != "" {
			resp, err := http.Post(hook, "application/json", strings.NewReader(`{"ref":"refs/heads/main"}`))
			if err != nil {
				f.b.Fatal(err)
			}
			resp.Body.Close()
		}
		time.Sleep(200 * time.Millisecond)
	}
	at, ok := moved.wait(5 * time.Minute)
	if !ok {
		f.b.Fatalf("%d of %d Rollouts at step %d after 5 minutes", len(at), len(f.names), step+1)
	}
	var out []time.Duration
	for _, name := range f.names {
		out = append(out, at[name].Sub(merged[name]))
	}
	f.b.Logf("step %d to %d, in merge order: %v", step, step+1, roundAll(out))
	return out
}

// stepWatch timestamps the first status of each Rollout at a step.
type stepWatch struct {
	mu   sync.Mutex
	at   map[string]time.Time
	want int
	done chan struct{}
}

// watchStep watches the Rollouts until ctx ends, timestamping when each
// one's status first shows step.
func (f *fleet) watchStep(ctx context.Context, step int32) *stepWatch {
	f.b.Helper()
	wc, err := client.NewWithWatch(f.cluster.RESTConfig, client.Options{Scheme: f.scheme})
	if err != nil {
		f.b.Fatal(err)
	}
	s := &stepWatch{at: map[string]time.Time{}, want: len(f.names), done: make(chan struct{})}
	w, err := wc.Watch(ctx, &v1alpha1.RolloutList{}, client.InNamespace(ns))
	if err != nil {
		f.b.Fatal(err)
	}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			ro, ok := ev.Object.(*v1alpha1.Rollout)
			if !ok || (ev.Type != watch.Added && ev.Type != watch.Modified) || ro.Status.CurrentStepIndex < step {
				continue
			}
			s.mu.Lock()
			if _, dup := s.at[ro.Name]; !dup {
				s.at[ro.Name] = time.Now()
				if len(s.at) == s.want {
					close(s.done)
				}
			}
			s.mu.Unlock()
		}
	}()
	return s
}

// wait returns the times once every Rollout reached the step, or false
// after timeout.
func (s *stepWatch) wait(timeout time.Duration) (map[string]time.Time, bool) {
	select {
	case <-s.done:
	case <-time.After(timeout):
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]time.Time, len(s.at))
	for k, v := range s.at {
		out[k] = v
	}
	return out, len(out) == s.want
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(10 * time.Millisecond)
	}
	return out
}
