package traffic_test

import (
	"maps"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/luascripts"
	"github.com/rollgate/rollgate/traffic"
)

func ingressRef(classType string) v1alpha1.TrafficRoutingRef {
	return v1alpha1.TrafficRoutingRef{Service: "web",
		Ingress: &v1alpha1.IngressTrafficRouting{Name: "web", ClassType: classType}}
}

func ingressPath(path, service string) networkingv1.HTTPIngressPath {
	return networkingv1.HTTPIngressPath{
		Path: path, PathType: ptr.To(networkingv1.PathTypePrefix),
		Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
			Name: service, Port: networkingv1.ServiceBackendPort{Number: 80},
		}},
	}
}

// createIngress declares an Ingress with a path to "web" and one to
// "assets" on one host, a host only for "assets", TLS and annotations
// (one of them a leftover canary annotation).
func (f *fixture) createIngress() *networkingv1.Ingress {
	f.t.Helper()
	ing := &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: f.ns,
			Labels: map[string]string{"app": "web"},
			Annotations: map[string]string{
				"nginx.ingress.kubernetes.io/proxy-body-size":      "8m",
				"nginx.ingress.kubernetes.io/canary-weight":        "77",
				"kubectl.kubernetes.io/last-applied-configuration": "{}",
			}},
		Spec: networkingv1.IngressSpec{
			IngressClassName: ptr.To("nginx"),
			TLS:              []networkingv1.IngressTLS{{Hosts: []string{"web.example.com"}, SecretName: "web-tls"}},
			Rules: []networkingv1.IngressRule{
				{Host: "web.example.com", IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
					Paths: []networkingv1.HTTPIngressPath{ingressPath("/", "web"), ingressPath("/static", "assets")}}}},
				{Host: "assets.example.com", IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
					Paths: []networkingv1.HTTPIngressPath{ingressPath("/", "assets")}}}},
			},
		},
	}
	must(f.t, k8s.Create(f.ctx, ing))
	return f.ingress("web")
}

func (f *fixture) ingress(name string) *networkingv1.Ingress {
	f.t.Helper()
	return f.get(name, &networkingv1.Ingress{}).(*networkingv1.Ingress)
}

func TestIngressNginxCanaryIngress(t *testing.T) {
	f := newFixture(t, ingressRef(""))
	user := f.createIngress()
	r := f.router()

	f.ensure(r, desired(30))
	canary := f.ingress("web-canary")
	if ref := metav1.GetControllerOf(canary); ref == nil || ref.UID != f.ro.UID {
		t.Errorf("canary Ingress owner %+v", ref)
	}
	want := map[string]string{
		"nginx.ingress.kubernetes.io/proxy-body-size": "8m",
		"nginx.ingress.kubernetes.io/canary":          "true",
		"nginx.ingress.kubernetes.io/canary-weight":   "30",
	}
	if !maps.Equal(canary.Annotations, want) {
		t.Errorf("annotations %v, want %v", canary.Annotations, want)
	}
	if *canary.Spec.IngressClassName != "nginx" || len(canary.Spec.TLS) != 1 || canary.Spec.TLS[0].SecretName != "web-tls" {
		t.Errorf("class or TLS not copied: %+v", canary.Spec)
	}
	rules := canary.Spec.Rules
	if len(rules) != 1 || rules[0].Host != "web.example.com" || len(rules[0].HTTP.Paths) != 1 ||
		rules[0].HTTP.Paths[0].Backend.Service.Name != "web-canary" || rules[0].HTTP.Paths[0].Path != "/" {
		t.Errorf("rules %+v, want only web.example.com / to web-canary", rules)
	}

	d := desired(30)
	d.Matches = []v1alpha1.HttpRouteMatch{{Headers: []gatewayv1.HTTPHeaderMatch{{Name: "x-canary", Value: "on"}}}}
	f.ensure(r, d)
	canary = f.ingress("web-canary")
	if a := canary.Annotations; a["nginx.ingress.kubernetes.io/canary-by-header"] != "x-canary" ||
		a["nginx.ingress.kubernetes.io/canary-by-header-value"] != "on" {
		t.Errorf("header match annotations %v", a)
	}
	if _, ok := canary.Annotations["nginx.ingress.kubernetes.io/canary-weight"]; ok {
		t.Error("canary-weight kept although matches take precedence")
	}
	rv := canary.ResourceVersion
	f.ensure(f.router(), d)
	if got := f.ingress("web-canary").ResourceVersion; got != rv {
		t.Errorf("same step rewrote the canary Ingress: %s -> %s", rv, got)
	}

	f.restore(r)
	f.absent("web-canary", &networkingv1.Ingress{})
	if after := f.ingress("web"); after.ResourceVersion != user.ResourceVersion {
		t.Errorf("the user's Ingress was written: resourceVersion %s -> %s", user.ResourceVersion, after.ResourceVersion)
	}
}

func TestIngressWithoutPathToStableIsInvalid(t *testing.T) {
	f := newFixture(t, ingressRef("nginx"))
	ing := &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: f.ns},
		Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{Host: "x.example.com",
			IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
				Paths: []networkingv1.HTTPIngressPath{ingressPath("/", "other")}}}}}},
	}
	must(t, k8s.Create(f.ctx, ing))
	_, err := f.step(f.router(), desired(10))
	wantErr(t, err, traffic.ErrInvalid)
}

func TestIngressUnknownClassTypeNamesTheConfigMapKey(t *testing.T) {
	f := newFixture(t, ingressRef("acme"))
	f.createIngress()
	_, err := f.step(f.router(), desired(10))
	wantErr(t, err, traffic.ErrInvalid)
	if err == nil || !strings.Contains(err.Error(), "lua.traffic.routing.ingress.acme") {
		t.Errorf("error does not name the ConfigMap key: %v", err)
	}
	f.opts.LuaOverrides = map[string]string{
		"lua.traffic.routing.ingress.acme": `local out = {} for k, v in pairs(obj.annotations) do out[k] = v end
out["acme.io/canary-percent"] = tostring(obj.weight) return out`,
	}
	f.ensure(f.router(), desired(10))
	if got := f.ingress("web-canary").Annotations["acme.io/canary-percent"]; got != "10" {
		t.Errorf("user dialect: acme.io/canary-percent = %q", got)
	}
}

// TestIngressKruiseScriptMisrouteRefused: a ConfigMap dialect in Kruise
// Rollout's style that reads the weight "-1" as all traffic would send
// every request to the canary on a match step. The routing guard refuses
// the step before the canary Ingress exists; the weight step it gets right
// is written.
func TestIngressKruiseScriptMisrouteRefused(t *testing.T) {
	f := newFixture(t, ingressRef("nginx"))
	f.createIngress()
	f.opts.LuaOverrides = map[string]string{"lua.traffic.routing.ingress.nginx": `
annotations = {}
if obj.annotations then annotations = obj.annotations end
annotations["nginx.ingress.kubernetes.io/canary"] = "true"
if obj.weight == "-1" then
  annotations["nginx.ingress.kubernetes.io/canary-weight"] = "100"
else
  annotations["nginx.ingress.kubernetes.io/canary-weight"] = obj.weight
end
return annotations
`}
	d := desired(0)
	d.Matches = []v1alpha1.HttpRouteMatch{{Headers: []gatewayv1.HTTPHeaderMatch{{Name: "X-Canary", Value: "yes"}}}}
	_, err := f.step(f.router(), d)
	wantErr(t, err, traffic.ErrScript)
	wantErr(t, err, luascripts.ErrMisroute)
	canary := &networkingv1.Ingress{}
	if err := k8s.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "web-canary"}, canary); !apierrors.IsNotFound(err) {
		t.Errorf("canary Ingress written despite the refusal: %v %v", err, canary.Annotations)
	}
	f.ensure(f.router(), desired(10))
	if got := f.ingress("web-canary").Annotations["nginx.ingress.kubernetes.io/canary-weight"]; got != "10" {
		t.Errorf("10%%: canary-weight = %q", got)
	}
}
