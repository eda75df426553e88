package kwok

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestReviveRestartsADeadControllerManager: a cluster whose controller
// manager exited as it came up (as it does when the API server is not
// healthy within 20 s) is restarted by revive, and then creates the pods
// of a Deployment; revive leaves a healthy cluster alone.
func TestReviveRestartsADeadControllerManager(t *testing.T) {
	c := Start(t, Options{Nodes: 1})
	ctx := context.Background()
	before := c.PIDs()
	if err := c.revive(ctx); err != nil {
		t.Fatal(err)
	}
	if after := c.PIDs(); !equalInts(before, after) {
		t.Fatalf("revive restarted a healthy cluster: pids %v, then %v", before, after)
	}
	raw, err := os.ReadFile(filepath.Join(c.Workdir, "clusters", c.Name, "pids", "kube-controller-manager.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return !running(pid), nil
	}); err != nil {
		t.Fatalf("kube-controller-manager (pid %d) still running after SIGKILL", pid)
	}
	if dead := c.deadComponents(); len(dead) != 1 || dead[0] != "kube-controller-manager" {
		t.Fatalf("dead components %v, want [kube-controller-manager]", dead)
	}
	if err := c.revive(ctx); err != nil {
		t.Fatal(err)
	}
	if dead := c.deadComponents(); len(dead) > 0 {
		t.Fatalf("dead components after revive: %v", dead)
	}
	labels := map[string]string{"app": "probe"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "probe"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: "probe:1"}}},
			},
		},
	}
	if err := c.Client.Create(ctx, d); err != nil {
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

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[int]int{}
	for _, x := range a {
		seen[x]++
	}
	for _, x := range b {
		seen[x]--
	}
	for _, n := range seen {
		if n != 0 {
			return false
		}
	}
	return true
}
