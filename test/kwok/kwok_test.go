package kwok_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/test/kwok"
	"github.com/rollgate/rollgate/test/rig"
)

func TestDeploymentPodsBecomeReady(t *testing.T) {
	var pids []int
	var workdir string
	t.Run("cluster", func(t *testing.T) {
		start := time.Now()
		c := kwok.Start(t, kwok.Options{Nodes: 3})
		t.Logf("cluster %s with 3 nodes up in %v", c.Name, time.Since(start))
		pids, workdir = c.PIDs(), c.Workdir
		if len(pids) != 5 {
			t.Fatalf("component processes = %v, want 5 (etcd, apiserver, controller manager, scheduler, kwok)", pids)
		}
		ctx := context.Background()

		var nodes corev1.NodeList
		if err := c.Client.List(ctx, &nodes); err != nil || len(nodes.Items) != 3 {
			t.Fatalf("nodes = %d (%v), want 3", len(nodes.Items), err)
		}

		start = time.Now()
		dep, labels := webDeployment("web", 3)
		if err := c.Client.Create(ctx, dep); err != nil {
			t.Fatal(err)
		}
		var last string
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			var pods corev1.PodList
			if err := c.Client.List(ctx, &pods, client.InNamespace("default"), client.MatchingLabels(labels)); err != nil {
				return false, err
			}
			ready := 0
			for _, p := range pods.Items {
				if p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning && podReady(p) {
					ready++
				}
			}
			last = fmt.Sprintf("%d pods, %d scheduled+running+ready", len(pods.Items), ready)
			return len(pods.Items) == 3 && ready == 3, nil
		})
		if err != nil {
			t.Fatalf("pods of the Deployment never all became Ready: %v (last: %s)", err, last)
		}
		t.Logf("3 pods Ready %v after creating the Deployment", time.Since(start))
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(dep), dep); err != nil {
			t.Fatal(err)
		}
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			err := c.Client.Get(ctx, client.ObjectKeyFromObject(dep), dep)
			return err == nil && dep.Status.ReadyReplicas == 3 && dep.Status.AvailableReplicas == 3, err
		})
		if err != nil {
			t.Fatalf("Deployment status never reported 3 ready replicas: %v (%+v)", err, dep.Status)
		}

		// The stale-delete guard (staledelete.go): a forced delete of a
		// live pod, as kwok's stale job sends to a recreated StatefulSet
		// pod, is refused; a pod deleted as a controller deletes it is
		// still removed by kwok (its own forced delete of a terminating
		// pod goes through).
		var pods corev1.PodList
		if err := c.Client.List(ctx, &pods, client.InNamespace("default"), client.MatchingLabels(labels)); err != nil {
			t.Fatal(err)
		}
		victim := &pods.Items[0]
		if err := c.Client.Delete(ctx, victim, client.GracePeriodSeconds(0)); !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
			t.Fatalf("forced delete of the live pod %s: %v, want refused by the stale-delete guard", victim.Name, err)
		}
		start = time.Now()
		if err := c.Client.Delete(ctx, victim); err != nil {
			t.Fatal(err)
		}
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			err := c.Client.Get(ctx, client.ObjectKeyFromObject(victim), &corev1.Pod{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Fatalf("pod %s deleted gracefully was never removed by kwok: %v", victim.Name, err)
		}
		t.Logf("pod %s deleted gracefully and removed by kwok in %v", victim.Name, time.Since(start))
	})

	// The cluster's cleanup has run: nothing of it is left.
	// (A zombie waiting for init to reap it counts as gone: the components
	// are daemons re-parented to PID 1.)
	for _, pid := range pids {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		if f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:])); len(f) > 0 && f[0] != "Z" && f[0] != "X" {
			t.Errorf("component process %d still running after cleanup: %s", pid, stat)
		}
	}
	if _, err := os.Stat(workdir); !os.IsNotExist(err) {
		t.Errorf("work folder %s still exists after cleanup (err %v)", workdir, err)
	}
}

// webDeployment is a Deployment of replicas pods labelled app=name, in
// namespace default, and its labels.
func webDeployment(name string, replicas int32) (*appsv1.Deployment, map[string]string) {
	d := rig.DeploymentObject("default", name, replicas, corev1.PodSpec{Containers: []corev1.Container{{Name: name, Image: "example.invalid/" + name + ":v1"}}})
	return d, d.Spec.Selector.MatchLabels
}

// TestReviveRestartsADeadControllerManager: a cluster whose controller
// manager exited as it came up (as it does when the API server is not
// healthy within 20 s), also after kwokctl found the cluster ready, is
// restarted by the wait for its controllers at work, and then creates the
// pods of a Deployment; Revive leaves a healthy cluster alone.
func TestReviveRestartsADeadControllerManager(t *testing.T) {
	c := kwok.Start(t, kwok.Options{Nodes: 1})
	ctx := context.Background()
	before := fmt.Sprint(c.PIDs())
	if err := c.Revive(ctx); err != nil {
		t.Fatal(err)
	}
	if after := fmt.Sprint(c.PIDs()); after != before {
		t.Fatalf("Revive restarted a healthy cluster: pids %s, then %s", before, after)
	}
	raw, err := os.ReadFile(filepath.Join(c.Workdir, "clusters", c.Name, "pids", "kube-controller-manager.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	pidsBefore := map[string]int{}
	for _, name := range []string{"etcd", "kube-apiserver", "kube-scheduler", "kwok-controller"} {
		pidsBefore[name] = c.PID(name)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return fmt.Sprint(c.DeadComponents()) == "[kube-controller-manager]", nil
	}); err != nil {
		t.Fatalf("dead components %v after killing kube-controller-manager (pid %d), want it alone", c.DeadComponents(), pid)
	}
	// As when it exits after kwokctl found the cluster ready: the wait
	// for the controllers at work finds it dead and revives the cluster.
	if err := c.AwaitControllers(ctx); err != nil {
		t.Fatal(err)
	}
	if dead := c.DeadComponents(); len(dead) > 0 {
		t.Fatalf("dead components after AwaitControllers: %v", dead)
	}
	// Only the dead one was started again: the API server and etcd kept
	// their processes (a second boot of the API server on a loaded machine
	// is what ran out of time in the fresh-clone run at 084a5f0).
	for _, name := range []string{"etcd", "kube-apiserver", "kube-scheduler", "kwok-controller"} {
		if got, was := c.PID(name), pidsBefore[name]; got != was {
			t.Errorf("%s was restarted along with kube-controller-manager: pid %d, then %d", name, was, got)
		}
	}
	if c.PID("kube-controller-manager") == pid {
		t.Errorf("kube-controller-manager still has the pid %d it had when it was killed", pid)
	}
	dep, labels := webDeployment("probe", 2)
	if err := c.Client.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var pods corev1.PodList
		err := c.Client.List(ctx, &pods, client.InNamespace("default"), client.MatchingLabels(labels))
		return err == nil && len(pods.Items) == 2, nil
	}); err != nil {
		t.Fatalf("the revived cluster created no pods for a Deployment: %v", err)
	}
}

func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// TestServiceRangeHoldsAFleet: a cluster gives more cluster IPs than the
// API server's default Service range holds (a /24: 254). P5 at N=500 runs
// Kruise Rollout, which gives every canary Service a cluster IP; with the
// default range its 255th release waited for ever on "range is full".
func TestServiceRangeHoldsAFleet(t *testing.T) {
	c := kwok.Start(t, kwok.Options{})
	const n = 600
	errs := make(chan error, n)
	slots := make(chan struct{}, 8)
	for i := range n {
		go func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			svc := &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("svc-%03d", i), Namespace: "default"},
				Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
			}
			errs <- c.Client.Create(context.Background(), svc)
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("create a ClusterIP Service: %v", err)
		}
	}
}

// TestClientQPS checks that Options.ClientQPS reaches the running
// controller manager and scheduler as their client limits, that both run
// without leader election (a lost lease would end them for good), that etcd
// does not fsync (a test cluster's data is thrown away), and that the
// cluster still works with them. The components also run without the
// test process's Go runtime limits: GOMEMLIMIT set for a benchmark of the
// controller must not cap the simulated API server (docs/benchmarks.md,
// P2).
func TestClientQPS(t *testing.T) {
	// Read by a Go program at its start only: this process keeps its own.
	t.Setenv("GOMEMLIMIT", "64MiB")
	t.Setenv("GOGC", "10")
	c := kwok.Start(t, kwok.Options{ClientQPS: 300})
	want := map[string]bool{"kube-controller-manager": false, "kube-scheduler": false, "etcd": false}
	for _, pid := range c.PIDs() {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			t.Fatal(err)
		}
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range strings.Split(string(env), "\x00") {
			if strings.HasPrefix(kv, "GOMEMLIMIT=") || strings.HasPrefix(kv, "GOGC=") {
				t.Errorf("component %d (%s) runs with the test's %s", pid, strings.SplitN(string(raw), "\x00", 2)[0], kv)
			}
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		for name := range want {
			if !strings.HasSuffix(args[0], name) {
				continue
			}
			joined := " " + strings.Join(args[1:], " ") + " "
			flags := []string{"--kube-api-qps=300", "--kube-api-burst=600", "--leader-elect=false"}
			if name == "etcd" {
				flags = []string{"--unsafe-no-fsync=true"}
			}
			for _, flag := range flags {
				if !strings.Contains(joined, " "+flag+" ") {
					t.Errorf("%s runs without %s: %s", name, flag, joined)
				}
			}
			want[name] = true
		}
	}
	for name, seen := range want {
		if !seen {
			t.Errorf("no %s process among %v", name, c.PIDs())
		}
	}
	var nodes corev1.NodeList
	if err := c.Client.List(context.Background(), &nodes); err != nil {
		t.Fatalf("list nodes of a cluster with raised limits: %v", err)
	}
}
