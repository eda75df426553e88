package webhook_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/routehook"
	"github.com/rollgate/rollgate/reconciler/validation"
	"github.com/rollgate/rollgate/reconciler/webhook"
	"github.com/rollgate/rollgate/traffic"
)

const heldServiceYAML = `apiVersion: v1
kind: Service
metadata:
  name: web
  labels: {app: web, ` + traffic.LabelHeld + `: "true"}
  annotations:
    ` + traffic.AnnotationHeld + `: '{"rollout":"web","canaryWeight":0,"stableService":"web","stableRevision":"s1","canaryRevision":"c2","revisionLabel":"` + v1alpha1.LabelRevision + `"}'
    ` + v1alpha1.AnnotationOriginal + `: '{"selector":{"app":"web"}}'
spec:
  selector: {app: web, ` + v1alpha1.LabelRevision + `: s1}
  ports: [{port: 80}]
`

// heldServiceSliceYAML is the EndpointSlice of the held Service as the
// EndpointSlice controller writes it: with the Service's labels, the held
// label among them, and none of its annotations.
const heldServiceSliceYAML = `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-abcde
  labels: {app: web, kubernetes.io/service-name: web, endpointslice.kubernetes.io/managed-by: endpointslice-controller.k8s.io, ` + traffic.LabelHeld + `: "true"}
addressType: IPv4
endpoints:
- addresses: [10.1.0.1]
  conditions: {ready: true}
ports: [{port: 8080, protocol: TCP}]
`

const templateYAML = `apiVersion: rollgate.dev/v1alpha1
kind: AnalysisTemplate
metadata: {name: success-rate}
spec:
  metrics:
  - name: success
    interval: 1s
    count: 1
    successCondition: "result[0] >= 0"
    provider:
      prometheus: {address: "http://127.0.0.1:1", query: "vector(1)"}
`

// TestOutageOfTheRouteAndValidationWebhooks: while no controller replica
// answers, a real API server refuses only the updates of a held Service
// that change what rollgate holds (its selector, rollgate's label and
// annotations) and the AnalysisTemplate writes that change a spec; ports,
// other labels and annotations, finalizers, the metadata of an
// AnalysisTemplate, and the held Service's EndpointSlices (which carry its
// labels) go through.
func TestOutageOfTheRouteAndValidationWebhooks(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	apply(t, ns, heldServiceYAML)
	apply(t, ns, heldServiceSliceYAML)
	apply(t, ns, templateYAML)

	reg := unreachableRegistration(t, ns)
	hooks := []webhook.Hook{routehook.Hook(routehook.Options{}).Hook, validation.TemplateHook(nil).Hook}
	mutating, validating := reg.Configurations(hooks, nil)
	for _, conf := range []client.Object{mutating, validating} {
		if err := suite.c.Create(ctx, conf); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := client.IgnoreNotFound(suite.c.Delete(context.Background(), conf)); err != nil {
				t.Errorf("delete %s: %v", conf.GetName(), err)
			}
		})
	}
	refused := func(err error, hook string) bool {
		return err != nil && strings.Contains(err.Error(), `failed calling webhook "`+hook+`"`) &&
			strings.Contains(err.Error(), strings.TrimPrefix(reg.URL, "https://"))
	}
	write := func(obj client.Object, name string, dryRun bool, change func(client.Object)) error {
		t.Helper()
		get(t, obj, ns, name)
		change(obj)
		var opts []client.UpdateOption
		if dryRun {
			opts = append(opts, client.DryRunAll)
		}
		return suite.c.Update(ctx, obj, opts...)
	}
	svc := func(o client.Object) *corev1.Service { return o.(*corev1.Service) }
	var last error
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 15*time.Second, true, func(context.Context) (bool, error) {
		last = write(&corev1.Service{}, "web", true, func(o client.Object) { svc(o).Spec.Selector = map[string]string{"app": "web"} })
		return refused(last, "routes.rollgate.dev"), nil
	}); err != nil {
		t.Fatalf("the API server never called the unreachable route webhook (last: %v)", last)
	}

	passes := []struct {
		what   string
		obj    client.Object
		name   string
		change func(client.Object)
	}{
		{"a held Service's ports", &corev1.Service{}, "web", func(o client.Object) { svc(o).Spec.Ports[0].Port = 8080 }},
		{"another label of a held Service", &corev1.Service{}, "web", func(o client.Object) { o.GetLabels()["team"] = "payments" }},
		{"another annotation of a held Service", &corev1.Service{}, "web", func(o client.Object) { annotate(o, "example.com/owner", "payments") }},
		{"a finalizer added to a held Service", &corev1.Service{}, "web", func(o client.Object) { o.SetFinalizers([]string{"example.com/keep"}) }},
		{"a finalizer removed from a held Service", &corev1.Service{}, "web", func(o client.Object) { o.SetFinalizers(nil) }},
		{"a label of an AnalysisTemplate", &v1alpha1.AnalysisTemplate{}, "success-rate", func(o client.Object) { o.SetLabels(map[string]string{"team": "payments"}) }},
		{"a finalizer of an AnalysisTemplate", &v1alpha1.AnalysisTemplate{}, "success-rate", func(o client.Object) { o.SetFinalizers([]string{"example.com/keep"}) }},
		{"the endpoints of a held Service's EndpointSlice", &discoveryv1.EndpointSlice{}, "web-abcde", func(o client.Object) {
			o.(*discoveryv1.EndpointSlice).Endpoints[0].Conditions.Ready = ptr.To(false)
		}},
	}
	for _, c := range passes {
		if err := write(c.obj, c.name, false, c.change); err != nil {
			t.Errorf("webhooks down: %s refused: %v", c.what, err)
		}
	}

	stopped := []struct {
		what, hook string
		obj        client.Object
		name       string
		change     func(client.Object)
	}{
		{"a held Service's selector", "routes.rollgate.dev", &corev1.Service{}, "web", func(o client.Object) { svc(o).Spec.Selector["tier"] = "front" }},
		{"rollgate's held label removed", "routes.rollgate.dev", &corev1.Service{}, "web", func(o client.Object) { delete(o.GetLabels(), traffic.LabelHeld) }},
		{"rollgate's held annotation", "routes.rollgate.dev", &corev1.Service{}, "web", func(o client.Object) { annotate(o, traffic.AnnotationHeld, "{}") }},
		{"rollgate's original annotation", "routes.rollgate.dev", &corev1.Service{}, "web", func(o client.Object) { annotate(o, v1alpha1.AnnotationOriginal, "{}") }},
		{"an AnalysisTemplate's spec", "analysistemplates.rollgate.dev", &v1alpha1.AnalysisTemplate{}, "success-rate", func(o client.Object) {
			o.(*v1alpha1.AnalysisTemplate).Spec.Metrics[0].Count = ptr.To[int32](2)
		}},
	}
	for _, c := range stopped {
		if err := write(c.obj, c.name, true, c.change); !refused(err, c.hook) {
			t.Errorf("webhooks down: %s: want it refused by the unreachable %s, got %v", c.what, c.hook, err)
		}
	}
}
