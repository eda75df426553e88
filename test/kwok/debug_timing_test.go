package kwok_test

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/test/kwok"
)

func TestDebugTiming(t *testing.T) {
	c := kwok.Start(t, kwok.Options{Nodes: 3})
	ctx := context.Background()
	t0 := time.Now()
	labels := map[string]string{"app": "web"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "x"}}}},
		},
	}
	if err := c.Client.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	prev := ""
	for time.Since(t0) < 12*time.Second {
		var rs appsv1.ReplicaSetList
		_ = c.Client.List(ctx, &rs, client.InNamespace("default"))
		var pods corev1.PodList
		_ = c.Client.List(ctx, &pods, client.InNamespace("default"))
		var nodes corev1.NodeList
		_ = c.Client.List(ctx, &nodes)
		s := ""
		for _, n := range nodes.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == "Ready" {
					s += "node:" + string(cond.Status) + " "
				}
			}
			s += "taints:" + func() string { r := ""; for _, tt := range n.Spec.Taints { r += tt.Key + "," }; return r }() + " "
		}
		s += " rs=" + string(rune('0'+len(rs.Items)))
		for _, p := range pods.Items {
			s += " pod[" + p.Spec.NodeName + " " + string(p.Status.Phase) + "]"
		}
		if s != prev {
			t.Logf("%6.2fs %s", time.Since(t0).Seconds(), s)
			prev = s
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Log(c.LogTails(60))
}
