package rig

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// PodsByImage counts the pods of namespace ns labelled app=app by the
// image of their first container: [ready, total]. Pods being deleted are
// left out.
func PodsByImage(ctx context.Context, c client.Reader, ns, app string) (map[string][2]int, error) {
	var list corev1.PodList
	if err := c.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{"app": app}); err != nil {
		return nil, err
	}
	out := map[string][2]int{}
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil || len(p.Spec.Containers) == 0 {
			continue
		}
		img := p.Spec.Containers[0].Image
		n := out[img]
		n[1]++
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				n[0]++
			}
		}
		out[img] = n
	}
	return out, nil
}

// DeploymentObject is the object of Deployment name in namespace ns:
// replicas pods running pod, labelled app: name (its selector). Deployment
// is the same as YAML.
func DeploymentObject(ns, name string, replicas int32, pod corev1.PodSpec) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod},
		},
	}
}
