package webhook_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/webhook"
)

// outage is the API server's view of namespace ns while no controller
// replica answers: the workload webhook registered by the controller's own
// code (match conditions, failure policy Fail), for ns alone, at a
// loopback port nobody listens on.
type outage struct {
	ns   string
	url  string
	conf *admissionregistrationv1.MutatingWebhookConfiguration
}

// unreachableRegistration registers webhooks for namespace ns at a
// loopback port nothing listens on.
func unreachableRegistration(t *testing.T, ns string) webhook.Registration {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "https://" + ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return webhook.Registration{Name: "rollgate-down-" + ns, URL: url, Namespaces: []string{ns}}
}

// startOutage registers the unreachable webhook and waits until the API
// server calls it: an image change of the Deployment probe is refused.
func startOutage(t *testing.T, ns, probe string) *outage {
	t.Helper()
	reg := unreachableRegistration(t, ns)
	url := reg.URL
	conf, _ := reg.Configurations([]webhook.Hook{webhook.WorkloadHook(nil)}, nil)
	ctx := context.Background()
	if err := suite.c.Create(ctx, conf); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := client.IgnoreNotFound(suite.c.Delete(context.Background(), conf)); err != nil {
			t.Errorf("delete %s: %v", conf.Name, err)
		}
	})
	o := &outage{ns: ns, url: url, conf: conf}
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 15*time.Second, true, func(ctx context.Context) (bool, error) {
		last = o.write(t, "Deployment", probe, true, func(obj client.Object) {
			obj.(*appsv1.Deployment).Spec.Template.Spec.Containers[0].Image = "probe:" + time.Now().Format("150405.000")
		})
		return o.refused(last), nil
	})
	if err != nil {
		t.Fatalf("the API server never called the unreachable webhook (last: %v)", last)
	}
	return o
}

// write reads a workload, changes it and writes it back (dry run or not).
func (o *outage) write(t *testing.T, kind, name string, dryRun bool, change func(client.Object)) error {
	t.Helper()
	obj := object(kind)
	get(t, obj, o.ns, name)
	change(obj)
	var opts []client.UpdateOption
	if dryRun {
		opts = append(opts, client.DryRunAll)
	}
	return suite.c.Update(context.Background(), obj, opts...)
}

// refused reports whether err is the refusal of an update because the
// unreachable webhook could not be called.
func (o *outage) refused(err error) bool {
	return err != nil && strings.Contains(err.Error(), `failed calling webhook "workloads.rollgate.dev"`) &&
		strings.Contains(err.Error(), strings.TrimPrefix(o.url, "https://"))
}

func deployment(obj client.Object) *appsv1.Deployment { return obj.(*appsv1.Deployment) }

// annotate sets one annotation of obj, keeping the others.
func annotate(obj client.Object, key, value string) {
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[key] = value
	obj.SetAnnotations(a)
}

// TestOutageRefusesOnlyWhatRollgateHolds: while the webhook is down, a
// real API server refuses only the updates of covered workloads that
// change what rollgate holds; scaling, other labels and annotations,
// finalizers and writes to a workload being deleted go through. Then the
// documented way out, deleting the registration, lets the rest through.
func TestOutageRefusesOnlyWhatRollgateHolds(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	apply(t, ns, fmt.Sprintf(deploymentYAML, "1", "v1"))
	cover(t, ns, "Deployment", "web", nil)
	apply(t, ns, fmt.Sprintf(statefulSetYAML, "v1"))
	cover(t, ns, "StatefulSet", "db", nil)
	apply(t, ns, fmt.Sprintf(daemonSetYAML, 1, "v1"))
	cover(t, ns, "DaemonSet", "agent", nil)
	down := startOutage(t, ns, "web")

	passes := []struct {
		what       string
		kind, name string
		change     func(client.Object)
	}{
		{"spec.replicas of a Deployment", "Deployment", "web", func(o client.Object) { deployment(o).Spec.Replicas = ptr.To[int32](6) }},
		{"another label", "Deployment", "web", func(o client.Object) { o.GetLabels()["team"] = "payments" }},
		{"another annotation", "Deployment", "web", func(o client.Object) { annotate(o, "example.com/owner", "payments") }},
		{"a finalizer added", "Deployment", "web", func(o client.Object) { o.SetFinalizers([]string{"example.com/keep"}) }},
		{"a finalizer removed", "Deployment", "web", func(o client.Object) { o.SetFinalizers(nil) }},
		{"spec.replicas of a StatefulSet", "StatefulSet", "db", func(o client.Object) {
			o.(*appsv1.StatefulSet).Spec.Replicas = ptr.To[int32](5)
		}},
		{"a label of a DaemonSet", "DaemonSet", "agent", func(o client.Object) { o.GetLabels()["team"] = "payments" }},
	}
	for _, c := range passes {
		if err := down.write(t, c.kind, c.name, false, c.change); err != nil {
			t.Errorf("webhook down: %s (%s %s) refused: %v", c.what, c.kind, c.name, err)
		}
	}
	var d appsv1.Deployment
	get(t, &d, ns, "web")
	d.Status.ObservedGeneration = d.Generation
	if err := suite.c.Status().Update(ctx, &d); err != nil {
		t.Errorf("webhook down: a status write refused: %v", err)
	}

	refused := []struct {
		what       string
		kind, name string
		change     func(client.Object)
	}{
		{"the image", "Deployment", "web", func(o client.Object) { deployment(o).Spec.Template.Spec.Containers[0].Image = "web:v2" }},
		{"a pod template annotation (kubectl rollout restart)", "Deployment", "web", func(o client.Object) {
			deployment(o).Spec.Template.Annotations = map[string]string{"kubectl.kubernetes.io/restartedAt": "now"}
		}},
		{"spec.paused", "Deployment", "web", func(o client.Object) { deployment(o).Spec.Paused = true }},
		{"spec.strategy", "Deployment", "web", func(o client.Object) {
			deployment(o).Spec.Strategy.RollingUpdate.MaxSurge = ptr.To(intstr.FromInt32(3))
		}},
		{"the rollgate.dev/control annotation", "Deployment", "web", func(o client.Object) {
			annotate(o, v1alpha1.AnnotationControl, `{"rollout":"web"}`)
		}},
		{"the rollgate.dev/controlled label removed", "Deployment", "web", func(o client.Object) {
			delete(o.GetLabels(), v1alpha1.LabelControlled)
		}},
		{"the rollgate.dev/controlled label's value", "Deployment", "web", func(o client.Object) {
			o.GetLabels()[v1alpha1.LabelControlled] = "no"
		}},
		{"spec.updateStrategy of a StatefulSet", "StatefulSet", "db", func(o client.Object) {
			o.(*appsv1.StatefulSet).Spec.UpdateStrategy.RollingUpdate.Partition = ptr.To[int32](1)
		}},
		{"the image of a StatefulSet", "StatefulSet", "db", func(o client.Object) {
			o.(*appsv1.StatefulSet).Spec.Template.Spec.Containers[0].Image = "db:v2"
		}},
		{"spec.updateStrategy of a DaemonSet", "DaemonSet", "agent", func(o client.Object) {
			o.(*appsv1.DaemonSet).Spec.UpdateStrategy.RollingUpdate.MaxUnavailable = ptr.To(intstr.FromInt32(2))
		}},
	}
	for _, c := range refused {
		if err := down.write(t, c.kind, c.name, true, c.change); !down.refused(err) {
			t.Errorf("webhook down: %s (%s %s): want the update refused by the unreachable webhook, got %v", c.what, c.kind, c.name, err)
		}
	}

	// The way out: delete the registration; then the label removal passes.
	if err := suite.c.Delete(ctx, down.conf); err != nil {
		t.Fatal(err)
	}
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 15*time.Second, true, func(ctx context.Context) (bool, error) {
		last = down.write(t, "Deployment", "web", false, func(o client.Object) { delete(o.GetLabels(), v1alpha1.LabelControlled) })
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("after deleting the registration the label could not be removed: %v", last)
	}
}

// TestOutageLetsDeletionFinish: a covered workload being deleted (a
// foreground delete waits on its finalizers) can be changed in any way and
// its finalizers removed while the webhook is down, so the garbage
// collector and a GitOps prune finish the deletion.
func TestOutageLetsDeletionFinish(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	apply(t, ns, fmt.Sprintf(deploymentYAML, "1", "v1"))
	cover(t, ns, "Deployment", "web", nil)
	down := startOutage(t, ns, "web")

	if err := down.write(t, "Deployment", "web", false, func(o client.Object) {
		o.SetFinalizers([]string{"example.com/keep"})
	}); err != nil {
		t.Fatalf("add a finalizer: %v", err)
	}
	var d appsv1.Deployment
	get(t, &d, ns, "web")
	if err := suite.c.Delete(ctx, &d, client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil {
		t.Fatal(err)
	}
	if err := down.write(t, "Deployment", "web", false, func(o client.Object) {
		deployment(o).Spec.Template.Spec.Containers[0].Image = "web:v2"
	}); err != nil {
		t.Errorf("webhook down: an image change of a Deployment being deleted refused: %v", err)
	}
	if err := down.write(t, "Deployment", "web", false, func(o client.Object) { o.SetFinalizers(nil) }); err != nil {
		t.Fatalf("webhook down: the finalizers of a Deployment being deleted could not be removed: %v", err)
	}
	if err := suite.c.Get(ctx, client.ObjectKeyFromObject(&d), &d); !apierrors.IsNotFound(err) {
		t.Fatalf("the Deployment is still there (%v, finalizers %v)", err, d.Finalizers)
	}
}
