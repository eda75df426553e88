package luascripts

import (
	"errors"
	"strings"
	"testing"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

func headerMatch(name, typ, value string) v1alpha1.HttpRouteMatch {
	t := gatewayv1.HeaderMatchType(typ)
	return v1alpha1.HttpRouteMatch{Headers: []gatewayv1.HTTPHeaderMatch{{Name: gatewayv1.HTTPHeaderName(name), Type: &t, Value: value}}}
}

// TestGuardCustom: the guard reads each kind's result and refuses a rule
// sending to the canary requests outside the step's matches, beyond its
// weight; it lets through what the step asks for.
func TestGuardCustom(t *testing.T) {
	target := Target{StableService: "app", CanaryService: "app-canary"}
	beta := []v1alpha1.HttpRouteMatch{headerMatch("X-Env", "Exact", "beta")}
	android := []v1alpha1.HttpRouteMatch{headerMatch("User-Agent", "RegularExpression", ".*Android.*")}
	tests := []struct {
		name, key string
		weight    int32
		matches   []v1alpha1.HttpRouteMatch
		spec      string
		refused   string // "" when allowed
	}{
		{"istio weight within the step", "VirtualService.networking.istio.io", 20, nil, `
http: [{route: [{destination: {host: app}, weight: 80}, {destination: {host: app-canary}, weight: 20}]}]`, ""},
		{"istio weight beyond the step", "VirtualService.networking.istio.io", 20, nil, `
http: [{route: [{destination: {host: app}, weight: 70}, {destination: {host: app-canary}, weight: 30}]}]`,
			"http[0] sends 30% of its requests to the canary; the step's weight is 20%"},
		{"istio tcp beyond the step", "VirtualService.networking.istio.io", 5, nil, `
tcp: [{route: [{destination: {host: app.demo.svc.cluster.local}, weight: 50}, {destination: {host: app-canary.demo.svc.cluster.local}, weight: 50}]}]`,
			"tcp[0] sends 50%"},
		{"istio canary route holding the step match", "VirtualService.networking.istio.io", -1, beta, `
http:
- match: [{headers: {x-env: {exact: beta}}, uri: {prefix: /api}}]
  route: [{destination: {host: app-canary}}]
- route: [{destination: {host: app}}]`, ""},
		{"istio canary route with a stricter condition", "VirtualService.networking.istio.io", -1, android, `
http:
- match: [{headers: {user-agent: {exact: "Mozilla/5.0 (Linux; Android 14)"}}}]
  route: [{destination: {host: app-canary}}]`, ""},
		{"istio canary route with an empty match", "VirtualService.networking.istio.io", -1, beta, `
http:
- match: [{}]
  route: [{destination: {host: app-canary}}]`, "its match 1 lets through requests that match none of the step's matches (header X-Env Exact \"beta\")"},
		{"istio canary route whose header was overwritten", "VirtualService.networking.istio.io", -1, beta, `
http:
- name: prod
  match: [{headers: {x-env: {exact: prod}}}]
  route: [{destination: {host: app-canary}}]`, `http route "prod" sends 100%`},
		{"istio subset canary on the stable host", "VirtualService.networking.istio.io", -1, beta, `
http:
- route: [{destination: {host: app, subset: canary}}]`, "http[0] sends 100%"},
		{"istio canary on a match step with a weight", "VirtualService.networking.istio.io", -1, beta, `
http:
- route: [{destination: {host: app}, weight: 99}, {destination: {host: app-canary}, weight: 1}]`, "sends 1% of its requests"},
		{"contour route conditions", "HTTPProxy.projectcontour.io", -1, beta, `
routes:
- conditions: [{prefix: /api}, {header: {name: X-Env, exact: beta}}]
  services: [{name: app-canary, port: 80}]
- conditions: [{prefix: /api}]
  services: [{name: app, port: 80}]`, ""},
		{"contour unconditioned canary service", "HTTPProxy.projectcontour.io", -1, beta, `
routes:
- conditions: [{prefix: /api}]
  services: [{name: app, port: 80}, {name: app-canary, port: 80}]`, "HTTPProxy routes[0] sends 50%"},
		{"contour tcpproxy beyond the step", "HTTPProxy.projectcontour.io", 10, nil, `
tcpproxy: {services: [{name: app, port: 80, weight: 80}, {name: app-canary, port: 80, weight: 20}]}`, "HTTPProxy tcpproxy sends 20%"},
		{"apisix exprs", "ApisixRoute.apisix.apache.org", -1, beta, `
http:
- name: main-canary
  match: {paths: [/*], exprs: [{subject: {scope: Header, name: X-Env}, op: Equal, value: beta}]}
  backends: [{serviceName: app-canary, servicePort: 80}]`, ""},
		{"apisix without exprs", "ApisixRoute.apisix.apache.org", -1, beta, `
http:
- name: main-canary
  match: {paths: [/*]}
  backends: [{serviceName: app-canary, servicePort: 80}]`, `ApisixRoute http route "main-canary" sends 100%`},
		{"apisix weights", "ApisixRoute.apisix.apache.org", 10, nil, `
http:
- name: main
  backends: [{serviceName: app, servicePort: 80, weight: 9000}, {serviceName: app-canary, servicePort: 80, weight: 1000}]`, ""},
		{"traefik weights", "TraefikService.traefik.io", 10, nil, `
weighted: {services: [{name: app, port: 80, weight: 50}, {name: app-canary, port: 80, weight: 50}]}`, "TraefikService weighted services sends 50%"},
		{"traefik mirroring from stable to the canary", "TraefikService.traefik.io", 0, nil, `
mirroring: {name: app, port: 80, mirrors: [{name: app-canary, port: 80, percent: 30}]}`, ""},
		{"traefik mirroring answered by the canary", "TraefikService.traefik.io", 0, nil, `
mirroring: {name: app-canary, port: 80, mirrors: [{name: app, port: 80, percent: 30}]}`, "TraefikService mirroring (its main service answers every request) sends 100%"},
		{"ingressroute weights within the step", "IngressRoute.traefik.io", 20, nil, `
routes:
- {match: PathPrefix(` + "`/`" + `), services: [{name: app, port: 80, weight: 80}, {name: app-canary, port: 80, weight: 20}]}`, ""},
		{"ingressroute weights beyond the step", "IngressRoute.traefik.io", 20, nil, `
routes:
- {match: PathPrefix(` + "`/`" + `), services: [{name: app, port: 80, weight: 20}, {name: app-canary, port: 80, weight: 80}]}`, "IngressRoute routes[0] sends 80%"},
		{"ingressroute canary route narrowed by the step header", "IngressRoute.traefik.io", -1, beta, `
routes:
- {match: "(Host(` + "`shop`" + `) || Host(` + "`www`" + `)) && Header(` + "`X-Env`, `beta`" + `)", services: [{name: app-canary, port: 80}]}
- {match: Host(` + "`shop`" + `), services: [{name: app, port: 80}]}`, ""},
		{"ingressroute canary route with one alternative too wide", "IngressRoute.traefik.io", -1, beta, `
routes:
- {match: "Header(` + "`X-Env`, `beta`" + `) || PathPrefix(` + "`/api`" + `)", services: [{name: app-canary, port: 80}]}`, "its match 2 lets through"},
		{"ingressroute negated step header", "IngressRoute.traefik.io", -1, beta, `
routes:
- {match: "!Header(` + "`X-Env`, `beta`" + `)", services: [{name: app-canary, port: 80}]}`, "IngressRoute routes[0] sends 100%"},
		{"ingressroute regular expression for an exact step header", "IngressRoute.traefik.io", -1, beta, `
routes:
- {match: "HeaderRegexp(` + "`X-Env`, `beta.*`" + `)", services: [{name: app-canary, port: 80}]}`, "its match 1 lets through"},
		{"ingressroute unparsable rule", "IngressRoute.traefik.io", -1, beta, `
routes:
- {match: "Header(` + "`X-Env`, `beta`" + `) &&", services: [{name: app-canary, port: 80}]}`, "its match 1 lets through"},
		{"ingressroute traefikservice entry is not the canary", "IngressRoute.traefik.io", 10, nil, `
routes:
- {match: PathPrefix(` + "`/`" + `), services: [{name: app-canary, kind: TraefikService}]}`, ""},
		{"smi weights", "TrafficSplit.split.smi-spec.io", -1, beta, `
backends: [{service: app, weight: 0}, {service: app-canary, weight: 100}]`, "TrafficSplit backends sends 100%"},
		{"unread kind", "Unknown.example.com", -1, beta, `{anything: [1]}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Script{Name: "test", Key: KeyPrefix + tt.key}
			in := CustomInput{CanaryWeight: tt.weight, StableWeight: StableWeight(tt.weight), Matches: tt.matches, Target: target}
			err := checkCustom(s, in, ObjectData{Spec: mustYAML(t, tt.spec)})
			wantRefused(t, err, tt.refused)
		})
	}
}

func TestGuardIngress(t *testing.T) {
	beta := []v1alpha1.HttpRouteMatch{headerMatch("X-Env", "Exact", "beta")}
	cookie := []v1alpha1.HttpRouteMatch{headerMatch("Cookie", "RegularExpression", `^(.*;\s*)?canary=always(;.*)?$`)}
	tests := []struct {
		name    string
		weight  int32
		matches []v1alpha1.HttpRouteMatch
		ann     map[string]string
		refused string
	}{
		{"weight within", 30, nil, map[string]string{"nginx.ingress.kubernetes.io/canary": "true", "nginx.ingress.kubernetes.io/canary-weight": "30"}, ""},
		{"weight beyond", 30, nil, map[string]string{"higress.io/canary": "true", "higress.io/canary-weight": "40"}, "higress.io/canary-weight sends 40%"},
		{"weight on a match step", -1, beta, map[string]string{"nginx.ingress.kubernetes.io/canary": "true", "nginx.ingress.kubernetes.io/canary-weight": "10"}, "canary-weight sends 10%"},
		{"canary off", -1, beta, map[string]string{"nginx.ingress.kubernetes.io/canary-weight": "100"}, ""},
		{"header of the step", -1, beta, map[string]string{"nginx.ingress.kubernetes.io/canary": "true",
			"nginx.ingress.kubernetes.io/canary-by-header": "x-env", "nginx.ingress.kubernetes.io/canary-by-header-value": "beta"}, ""},
		{"other header", -1, beta, map[string]string{"nginx.ingress.kubernetes.io/canary": "true",
			"nginx.ingress.kubernetes.io/canary-by-header": "x-user"}, `canary-by-header "x-user" (Exact "always") sends 100%`},
		{"query parameter outside the step", -1, beta, map[string]string{"mse.ingress.kubernetes.io/canary": "true",
			"mse.ingress.kubernetes.io/canary-by-query": "beta", "mse.ingress.kubernetes.io/canary-by-query-value": "1"}, "canary-by-query"},
		{"cookie of the step", -1, cookie, map[string]string{"alb.ingress.kubernetes.io/canary": "true", "alb.ingress.kubernetes.io/canary-by-cookie": "canary"}, ""},
		{"cookie outside the step", -1, beta, map[string]string{"alb.ingress.kubernetes.io/canary": "true", "alb.ingress.kubernetes.io/canary-by-cookie": "canary"},
			"canary-by-cookie sends requests with the cookie canary=always"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkIngress(Script{Name: "test"}, IngressInput{Weight: tt.weight, Matches: tt.matches}, tt.ann)
			wantRefused(t, err, tt.refused)
		})
	}
}

// wantRefused fails the test unless err is nil when refused is empty, or
// ErrMisroute saying refused otherwise.
func wantRefused(t *testing.T, err error, refused string) {
	t.Helper()
	if refused == "" {
		if err != nil {
			t.Fatalf("refused: %v", err)
		}
		return
	}
	if !errors.Is(err, ErrMisroute) || !strings.Contains(err.Error(), refused) {
		t.Fatalf("got %v, want ErrMisroute containing %q", err, refused)
	}
}
