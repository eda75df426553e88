package realnode_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/rollgate/rollgate/test/realnode"
	"github.com/rollgate/rollgate/test/rig"
)

// A Deployment's pods run real containers on the real node, become Ready
// through their readiness probe, and answer HTTP on their pod IPs and
// through their Service's ClusterIP; a rolling update to v2 replaces them.
func TestDeploymentPodsServeHTTP(t *testing.T) {
	ctrllog.SetLogger(logr.Discard())
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	var images []realnode.Image
	for _, v := range []string{"v1", "v2"} {
		img, err := realnode.SampleApp(ctx, dir, v)
		if err != nil {
			t.Fatal(err)
		}
		images = append(images, img)
	}
	c := realnode.Start(t, realnode.Options{Images: images})

	dep := verserver("web", "localhost/verserver:v1", 3)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
		},
	}
	for _, obj := range []client.Object{dep, svc} {
		if err := c.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	pods := waitReadyPods(ctx, t, c, "web", "v1", 3)
	t.Logf("3 pods Ready in %.1fs", time.Since(start).Seconds())
	for _, p := range pods {
		body := get(t, fmt.Sprintf("http://%s:8080/", p.Status.PodIP))
		if want := "v1 " + p.Name; body != want {
			t.Errorf("pod %s (%s) answered %q, want %q", p.Name, p.Status.PodIP, body, want)
		}
	}
	if err := c.Client.Get(ctx, client.ObjectKeyFromObject(svc), svc); err != nil {
		t.Fatal(err)
	}
	// kube-proxy writes the Service's rules (and then each new endpoint)
	// within its minimum sync period: the ClusterIP must reach every pod
	// within a few seconds.
	clusterIP := fmt.Sprintf("http://%s/", svc.Spec.ClusterIP)
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	seen := map[string]int{}
	for deadline := time.Now().Add(15 * time.Second); len(seen) < 3 && time.Now().Before(deadline); {
		resp, err := hc.Get(clusterIP)
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		seen[strings.TrimSpace(string(body))]++
	}
	if len(seen) != 3 {
		t.Errorf("ClusterIP %s reached %d pods in 15 s, want 3: %v", svc.Spec.ClusterIP, len(seen), seen)
	}

	// The Deployment controller writes the status meanwhile: read again
	// on a conflict.
	if err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(dep), dep); err != nil {
			return err
		}
		dep.Spec.Template.Spec.Containers[0].Image = "localhost/verserver:v2"
		return c.Client.Update(ctx, dep)
	}); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	waitReadyPods(ctx, t, c, "web", "v2", 3)
	t.Logf("rolling update to v2 done in %.1fs", time.Since(start).Seconds())
}

func verserver(name, image string, replicas int32) *appsv1.Deployment {
	return rig.DeploymentObject("default", name, replicas, corev1.PodSpec{
		TerminationGracePeriodSeconds: ptr.To[int64](10),
		Containers: []corev1.Container{{
			Name:            "app",
			Image:           image,
			ImagePullPolicy: corev1.PullNever,
			Args:            []string{"-drain=1s"},
			Env: []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{
				FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
			ReadinessProbe: &corev1.Probe{
				ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("http")}},
				PeriodSeconds: 1,
			},
		}},
	})
}

// waitReadyPods waits until exactly n pods of app run image version and are
// Ready, with no pod of another version left.
func waitReadyPods(ctx context.Context, t *testing.T, c *realnode.Cluster, app, version string, n int) []corev1.Pod {
	t.Helper()
	var last string
	for ctx.Err() == nil {
		var list corev1.PodList
		if err := c.Client.List(ctx, &list, client.InNamespace("default"), client.MatchingLabels{"app": app}); err == nil {
			var ready []corev1.Pod
			others := 0
			for _, p := range list.Items {
				if !strings.HasSuffix(p.Spec.Containers[0].Image, ":"+version) {
					others++
					continue
				}
				if p.DeletionTimestamp == nil && podReady(p) {
					ready = append(ready, p)
				}
			}
			last = fmt.Sprintf("%d Ready at %s, %d of another version", len(ready), version, others)
			if len(ready) == n && others == 0 {
				return ready
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("pods of %s never became %d Ready at %s: %s", app, n, version, last)
	return nil
}

func podReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func get(t *testing.T, url string) string {
	t.Helper()
	// A new connection per request, so a Service spreads them over its pods.
	resp, err := (&http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}).Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, body)
	}
	return strings.TrimSpace(string(body))
}
