package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// sideBySideRouterEnv chooses the router every controller of
// BenchmarkSideBySide moves: nginx (the default), a canary Ingress with
// NGINX's annotations, which rollgate, Kruise Rollout and Argo Rollouts
// all write without a plugin; or gateway, the HTTPRoute, which Argo
// Rollouts moves only through a plugin the Go module proxy does not serve
// (its row then moves no traffic).
const sideBySideRouterEnv = "ROLLGATE_P5_ROUTER"

// router is the kind of route the fleet's traffic goes through in P5.
type router string

const (
	routerNginx   router = "nginx"
	routerGateway router = "gateway"
)

// NGINX Ingress's canary annotations, which the three controllers write on
// the canary Ingress they own beside the user's.
const (
	nginxCanary      = "nginx.ingress.kubernetes.io/canary"
	nginxWeight      = "nginx.ingress.kubernetes.io/canary-weight"
	nginxWeightTotal = "nginx.ingress.kubernetes.io/canary-weight-total"
)

var ingressGVK = schema.GroupVersionKind{Group: "networking.k8s.io", Version: "v1", Kind: "Ingress"}

// sideBySideRouter reads sideBySideRouterEnv.
func sideBySideRouter(b *testing.B) router {
	switch v := router(os.Getenv(sideBySideRouterEnv)); v {
	case "", routerNginx:
		return routerNginx
	case routerGateway:
		return routerGateway
	default:
		b.Fatalf("%s=%q: want nginx (a canary Ingress, the default) or gateway (an HTTPRoute)", sideBySideRouterEnv, v)
		return ""
	}
}

// fleetYAML is what the router needs per workload beside appYAML's
// Deployment, Service and HTTPRoute: for nginx the user's Ingress, class
// nginx, sending every path of host <name>.example to the Service.
func (r router) fleetYAML(name string) string {
	if r != routerNginx {
		return ""
	}
	return fmt.Sprintf(`
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  ingressClassName: nginx
  rules:
  - host: %[1]s.example
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: %[1]s, port: {number: 80}}}}
`, name, ns)
}

// routeShare is one workload's share of traffic on the canary, in
// percent, read from one object of the router's kind.
type routeShare struct {
	workload string
	share    float64
}

// watchShares calls fn with every workload's canary share the router's
// objects show, as they change, until ctx ends; a deleted canary Ingress
// is a share of 0.
func (r router) watchShares(ctx context.Context, f *fleet, fn func(s routeShare, at time.Time)) {
	switch r {
	case routerGateway:
		f.watchKind(ctx, httpRouteGVK, func(route *unstructured.Unstructured, at time.Time) {
			fn(routeShare{workload: route.GetName(), share: canaryShare(route)}, at)
		})
	case routerNginx:
		f.watchKindDeletes(ctx, ingressGVK, func(ing *unstructured.Unstructured, deleted bool, at time.Time) {
			s, ok := ingressShare(ing)
			if !ok {
				return
			}
			if deleted {
				s.share = 0
			}
			fn(s, at)
		})
	}
}

// shares lists the router's objects and returns every workload's canary
// share (a workload with no canary Ingress has none: 0).
func (r router) shares(ctx context.Context, f *fleet) map[string]float64 {
	f.b.Helper()
	gvk := httpRouteGVK
	if r == routerNginx {
		gvk = ingressGVK
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err := f.c.List(ctx, list, client.InNamespace(ns)); err != nil {
		f.b.Fatal(err)
	}
	out := map[string]float64{}
	for i := range list.Items {
		if r == routerGateway {
			out[list.Items[i].GetName()] = canaryShare(&list.Items[i])
		} else if s, ok := ingressShare(&list.Items[i]); ok {
			out[s.workload] = s.share
		}
	}
	return out
}

// ingressShare reads a canary Ingress: the workload is its backend Service
// without the "-canary" every controller here names its canary Service
// with, the share its canary-weight over canary-weight-total (100 when
// unset). An Ingress without canary: "true" is no canary (ok false).
func ingressShare(ing *unstructured.Unstructured) (routeShare, bool) {
	ann := ing.GetAnnotations()
	if ann[nginxCanary] != "true" {
		return routeShare{}, false
	}
	rules, _, _ := unstructured.NestedSlice(ing.Object, "spec", "rules")
	workload := ""
	for _, rule := range rules {
		paths, _, _ := unstructured.NestedSlice(rule.(map[string]any), "http", "paths")
		for _, p := range paths {
			svc, _, _ := unstructured.NestedString(p.(map[string]any), "backend", "service", "name")
			if w, ok := strings.CutSuffix(svc, "-canary"); ok {
				workload = w
			}
		}
	}
	if workload == "" {
		return routeShare{}, false
	}
	weight, _ := strconv.ParseFloat(ann[nginxWeight], 64)
	total := 100.0
	if t, err := strconv.ParseFloat(ann[nginxWeightTotal], 64); err == nil && t > 0 {
		total = t
	}
	return routeShare{workload: workload, share: 100 * weight / total}, true
}

// TestIngressShare reads the canary share of the Ingresses the three
// controllers write: the workload from the canary backend, the weight over
// its total, and no share from the user's Ingress or one not marked
// canary.
func TestIngressShare(t *testing.T) {
	ingress := func(name, backend string, ann map[string]any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"metadata": map[string]any{"name": name, "namespace": ns, "annotations": ann},
			"spec": map[string]any{"rules": []any{map[string]any{"host": "app-007.example", "http": map[string]any{"paths": []any{
				map[string]any{"path": "/", "backend": map[string]any{"service": map[string]any{"name": backend}}},
			}}}}},
		}}
		u.SetGroupVersionKind(ingressGVK)
		return u
	}
	for _, tc := range []struct {
		what string
		ing  *unstructured.Unstructured
		want routeShare
		ok   bool
	}{
		{"rollgate or Kruise at step 1", ingress("app-007-canary", "app-007-canary",
			map[string]any{nginxCanary: "true", nginxWeight: "20"}), routeShare{workload: "app-007", share: 20}, true},
		{"Argo's name, with a weight total", ingress("app-007-app-007-canary", "app-007-canary",
			map[string]any{nginxCanary: "true", nginxWeight: "200", nginxWeightTotal: "1000"}), routeShare{workload: "app-007", share: 20}, true},
		{"Argo after the release", ingress("app-007-app-007-canary", "app-007-canary",
			map[string]any{nginxCanary: "true", nginxWeight: "0"}), routeShare{workload: "app-007", share: 0}, true},
		{"Kruise with no weight annotation", ingress("app-007-canary", "app-007-canary",
			map[string]any{nginxCanary: "true"}), routeShare{workload: "app-007", share: 0}, true},
		{"the user's Ingress", ingress("app-007", "app-007", nil), routeShare{}, false},
		{"not marked canary", ingress("app-007-canary", "app-007-canary",
			map[string]any{nginxWeight: "20"}), routeShare{}, false},
	} {
		got, ok := ingressShare(tc.ing)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: got %+v, %v; want %+v, %v", tc.what, got, ok, tc.want, tc.ok)
		}
	}
}

// TestScrapedCounters: the counters P5 reads off a controller's metrics
// endpoint, typed (as controller-runtime serves them) or untyped (as the
// Argo Rollouts relay writes them), summed in all and by method; a counter
// the endpoint does not serve is -1, not 0.
func TestScrapedCounters(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `# TYPE rest_client_requests_total counter
rest_client_requests_total{code="200",host="a",method="GET"} 7
rest_client_requests_total{code="201",host="a",method="POST"} 2
rest_client_requests_total{code="404",host="a",method="GET"} 0
# TYPE controller_runtime_reconcile_total counter
controller_runtime_reconcile_total{controller="rollout",result="success"} 40
controller_runtime_reconcile_total{controller="rollout",result="requeue_after"} 2
go_memstats_heap_inuse_bytes 2.097152e+06
`)
	}))
	defer srv.Close()
	sum, byMethod, err := restRequests(srv.URL)
	if err != nil || sum != 9 || byMethod["GET"] != 7 || byMethod["POST"] != 2 {
		t.Errorf("requests %v %v %v, want 9, GET 7, POST 2", sum, byMethod, err)
	}
	if v, err := metricSum(srv.URL, "controller_runtime_reconcile_total"); err != nil || v != 42 {
		t.Errorf("reconciles %v %v, want 42", v, err)
	}
	if v, err := metricSum(srv.URL, "workqueue_adds_total"); err != nil || v != -1 {
		t.Errorf("an absent counter: %v %v, want -1", v, err)
	}
	if v, err := goHeapMiB(srv.URL); err != nil || v != 2 {
		t.Errorf("heap %v MiB %v, want 2", v, err)
	}
}
