package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/workload"
	"github.com/rollgate/rollgate/test/repo"
	"github.com/rollgate/rollgate/test/rig"
)

// The traffic stories: one release of five pods in three steps (20% of the
// requests on one new pod, 60% on three, then all of them), told once per
// kind of router. At every step the routing objects carry exactly that
// step, and once the release is done they are exactly what Git declared.

// threeSteps are the steps of every traffic story but the A/B one.
const threeSteps = `
      steps:
      - traffic: "20%"
        replicas: 1
        pause: {duration: 1}
      - traffic: "60%"
        replicas: "60%"
        pause: {duration: 1}
      - traffic: "100%"
        replicas: "100%"`

// routedRollout is the Rollout of Deployment echoserver with steps and one
// trafficRoutings entry for Service echoserver; routing is the rest of the
// entry (its router), indented to sit in it.
func routedRollout(steps, routing string) string {
	return rig.Rollout{Name: "echoserver", Namespace: "demo", Strategy: steps + `
      trafficRoutings:
      - service: echoserver
` + routing}.YAML()
}

// routedApp is the application as Git declares it: Deployment echoserver
// (five pods of image), Service echoserver, and the routing objects.
func routedApp(image, routes string) string {
	return rig.Deployment("demo", "echoserver", image, 5) + "---" + stableService + "---" + routes
}

const stableService = `
apiVersion: v1
kind: Service
metadata: {name: echoserver, namespace: demo, labels: {team: web}, annotations: {owner: web-team}}
spec:
  selector: {app: echoserver}
  ports: [{name: http, port: 80, targetPort: 8080}]
`

// Parts of a trafficRoutings entry: no grace period after traffic changes
// (the steps' pauses are enough here), and the HTTPRoute router.
const (
	noGrace        = "        gracePeriodSeconds: 0\n"
	gatewayRouting = "        gateway: {httpRouteName: echoserver}"
)

const httpRoute = `
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: echoserver, namespace: demo, labels: {team: web}, annotations: {owner: web-team}}
spec:
  parentRefs: [{name: public}]
  rules:
  - matches: [{path: {value: /static}}]
    backendRefs: [{name: assets, port: 80}]
  - backendRefs: [{name: echoserver, port: 80}]
`

// Rules of httpRoute as stored (with the CRD's defaults), and the parts the
// steps build from them.
const (
	assetsRule = `
- backendRefs: [{group: "", kind: Service, name: assets, port: 80, weight: 1}]
  matches: [{path: {type: PathPrefix, value: /static}}]`
	stableRule = `
- backendRefs: [{group: "", kind: Service, name: echoserver, port: 80, weight: 1}]
  matches: [{path: {type: PathPrefix, value: /}}]`
	declaredRules = assetsRule + stableRule
	// headerRule sends requests with x-canary: yes to the canary only.
	headerRule = `
- backendRefs: [{group: "", kind: Service, name: echoserver-canary, port: 80, weight: 1}]
  matches: [{path: {type: PathPrefix, value: /}, headers: [{name: x-canary, type: Exact, value: "yes"}]}]`
)

// weightedRules are the rules of httpRoute at a weight step.
func weightedRules(canary int) string {
	return assetsRule + fmt.Sprintf(`
- backendRefs:
  - {group: "", kind: Service, name: echoserver, port: 80, weight: %d}
  - {group: "", kind: Service, name: echoserver-canary, port: 80, weight: %d}
  matches: [{path: {type: PathPrefix, value: /}}]`, 100-canary, canary)
}

// Selectors of the two Services: as declared, and narrowed to a revision
// by pod-template-hash, the label a Deployment released in place is
// narrowed by ($STABLE and $CANARY are the hashes of the stable and the
// canary ReplicaSets: the Deployment controller's own, and the canary
// revision, which rollgate gives the ReplicaSet it makes).
const (
	declaredSelector = `{app: echoserver}`
	stableSelector   = `{app: echoserver, pod-template-hash: $STABLE}`
	canarySelector   = `{app: echoserver, pod-template-hash: $CANARY}`
)

// serviceStates are the states of the stable and canary Services in each
// phase of a release (see routePhases).
func serviceStates() map[routedKey]routePhases {
	return serviceStatesBy(appsv1.DefaultDeploymentUniqueLabelKey)
}

// serviceStatesBy are serviceStates with the Services narrowed by label
// key.
func serviceStatesBy(key string) map[routedKey]routePhases {
	stableSelector := strings.Replace(stableSelector, appsv1.DefaultDeploymentUniqueLabelKey, key, 1)
	canarySelector := strings.Replace(canarySelector, appsv1.DefaultDeploymentUniqueLabelKey, key, 1)
	return map[routedKey]routePhases{
		{"Service", "echoserver"}:        {declaredSelector, stableSelector, stableSelector, stableSelector, stableSelector, canarySelector, declaredSelector},
		{"Service", "echoserver-canary"}: {absentObject, canarySelector, canarySelector, canarySelector, canarySelector, canarySelector, absentObject},
	}
}

var (
	serviceGVK    = corev1.SchemeGroupVersion.WithKind("Service")
	podGVK        = corev1.SchemeGroupVersion.WithKind("Pod")
	rolloutGVK    = v1alpha1.GroupVersion.WithKind("Rollout")
	httpRouteGVK  = schema.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "HTTPRoute"}
	ingressGVK    = schema.GroupVersionKind{Group: "networking.k8s.io", Version: "v1", Kind: "Ingress"}
	virtualSvcGVK = schema.GroupVersionKind{Group: "networking.istio.io", Version: "v1", Kind: "VirtualService"}
	destRuleGVK   = schema.GroupVersionKind{Group: "networking.istio.io", Version: "v1", Kind: "DestinationRule"}
	selectorView  = routeViewOf("spec", "selector")
	rulesView     = routeViewOf("spec", "rules")
	specView      = routeViewOf("spec")
	// metaView is what a GitOps tool compares: labels, annotations, spec.
	metaView routeView = func(u *unstructured.Unstructured) any {
		return map[string]any{"labels": u.GetLabels(), "annotations": u.GetAnnotations(), "spec": u.Object["spec"]}
	}
	rolloutKey = routedKey{"Rollout", "echoserver"}
)

const nginxCanaryWeight = "nginx.ingress.kubernetes.io/canary-weight"

// TestGatewayAPIWeights: the HTTPRoute's stable backendRef is split by
// weight at each step, rules that do not reach the workload are left
// alone, the stable Service selects only stable pods while the release
// lasts, and everything is as declared at the end.
func TestGatewayAPIWeights(t *testing.T) {
	t.Parallel()
	s := givenRoutedApp(t, routedRollout(threeSteps, noGrace+gatewayRouting), httpRoute, httpRouteGVK)
	want := serviceStates()
	want[routedKey{"HTTPRoute", "echoserver"}] = routePhases{declaredRules, declaredRules, weightedRules(20), weightedRules(60), weightedRules(100), weightedRules(100), declaredRules}
	s.release(want, map[string]routeView{"HTTPRoute": rulesView, "Service": selectorView})
	s.assertAsApplied(httpRouteGVK, "echoserver")

	// The canary Service was a copy of the stable one, owned by the Rollout.
	canary := s.rec.first(routedKey{"Service", "echoserver-canary"})
	copied := func(u *unstructured.Unstructured) any {
		return map[string]any{"labels": u.GetLabels(), "annotations": u.GetAnnotations(), "ports": u.Object["spec"].(map[string]any)["ports"]}
	}
	if got, want := jsonValue(copied(canary)), s.norm(`
labels: {team: web, pod-template-hash: $CANARY, rollgate.dev/canary-of: echoserver}
annotations: {owner: web-team}
ports: [{name: http, port: 80, protocol: TCP, targetPort: 8080}]`); !reflect.DeepEqual(got, want) {
		t.Errorf("the canary Service was created as\n%s\nwant\n%s", yamlOf(got), yamlOf(want))
	}
	if owner := metav1.GetControllerOf(canary); owner == nil || owner.Kind != "Rollout" || owner.Name != "echoserver" {
		t.Errorf("the canary Service must be controlled by the Rollout, owner %+v", owner)
	}
}

// TestGatewayAPIStatefulSet: a StatefulSet's release goes through the same
// phases, its Services narrowed by controller-revision-hash, which the
// StatefulSet controller gives every pod at its creation (the names of its
// current and update revisions): at every step the stable Service selects
// only old pods and the canary Service only new ones, and no stable pod is
// written to for a label.
func TestGatewayAPIStatefulSet(t *testing.T) {
	t.Parallel()
	ro := rig.Rollout{Name: "echoserver", Namespace: "demo", Kind: "StatefulSet", Strategy: threeSteps + `
      trafficRoutings:
      - service: echoserver
` + noGrace + gatewayRouting}.YAML()
	s := givenRoutedWorkload(t, "StatefulSet", ro, httpRoute, httpRouteGVK)
	want := serviceStatesBy(appsv1.ControllerRevisionHashLabelKey)
	want[routedKey{"HTTPRoute", "echoserver"}] = routePhases{declaredRules, declaredRules, weightedRules(20), weightedRules(60), weightedRules(100), weightedRules(100), declaredRules}
	s.release(want, map[string]routeView{"HTTPRoute": rulesView, "Service": selectorView})
	s.assertAsApplied(httpRouteGVK, "echoserver")

	// The pods of the old revision kept their labels as the StatefulSet
	// controller made them.
	stable := s.revs.Replace("$STABLE")
	for _, ev := range s.rec.timeline() {
		if ev.key.kind != "Pod" || ev.obj == nil || ev.obj.GetLabels()[appsv1.ControllerRevisionHashLabelKey] != stable {
			continue
		}
		if rev, ok := ev.obj.GetLabels()[v1alpha1.LabelRevision]; ok {
			t.Errorf("old pod %s was labelled %s=%s", ev.key.name, v1alpha1.LabelRevision, rev)
		}
	}
}

// TestGatewayAPIHeaderMatch: an A/B step puts a canary-only rule with the
// step's header match in front of the declared rules; the weight steps
// after it split the stable backendRef.
func TestGatewayAPIHeaderMatch(t *testing.T) {
	t.Parallel()
	// threeSteps, step 1 matching a header instead of 20% of the traffic.
	steps := strings.Replace(threeSteps, `- traffic: "20%"`, `- matches: [{headers: [{name: x-canary, value: "yes"}]}]`, 1)
	s := givenRoutedApp(t, routedRollout(steps, noGrace+gatewayRouting), httpRoute, httpRouteGVK)
	want := serviceStates()
	want[routedKey{"HTTPRoute", "echoserver"}] = routePhases{declaredRules, declaredRules, headerRule + declaredRules, weightedRules(60), weightedRules(100), weightedRules(100), declaredRules}
	s.release(want, map[string]routeView{"HTTPRoute": rulesView, "Service": selectorView})
	s.assertAsApplied(httpRouteGVK, "echoserver")
}

// TestGatewayAPIMirror: a mirror step gives the HTTPRoute's stable rule a
// RequestMirror filter copying 30% of its requests to the canary Service,
// its backendRefs as declared; the weight steps after it drop the filter,
// and everything is as declared at the end.
func TestGatewayAPIMirror(t *testing.T) {
	t.Parallel()
	// threeSteps, step 1 mirroring 30% instead of sending 20%.
	steps := strings.Replace(threeSteps, `- traffic: "20%"`, `- mirror: "30%"`, 1)
	mirrored := assetsRule + `
- backendRefs: [{group: "", kind: Service, name: echoserver, port: 80, weight: 1}]
  filters: [{type: RequestMirror, requestMirror: {backendRef: {group: "", kind: Service, name: echoserver-canary, port: 80}, percent: 30}}]
  matches: [{path: {type: PathPrefix, value: /}}]`
	s := givenRoutedApp(t, routedRollout(steps, noGrace+gatewayRouting), httpRoute, httpRouteGVK)
	want := serviceStates()
	want[routedKey{"HTTPRoute", "echoserver"}] = routePhases{declaredRules, declaredRules, mirrored, weightedRules(60), weightedRules(100), weightedRules(100), declaredRules}
	s.release(want, map[string]routeView{"HTTPRoute": rulesView, "Service": selectorView})
	s.assertAsApplied(httpRouteGVK, "echoserver")
}

var userIngress = `
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: echoserver
  namespace: demo
  labels: {team: web}
  annotations: {nginx.ingress.kubernetes.io/rewrite-target: /}
` + ingressSpec("echoserver")

// canaryIngress is the canary Ingress rollgate keeps beside userIngress.
func canaryIngress(weight int) string {
	return fmt.Sprintf(`
labels: {team: web, pod-template-hash: $CANARY}
annotations:
  nginx.ingress.kubernetes.io/rewrite-target: /
  nginx.ingress.kubernetes.io/canary: "true"
  %s: "%d"
`, nginxCanaryWeight, weight) + ingressSpec("echoserver-canary")
}

// ingressSpec is the spec of userIngress, sending its host to service: the
// canary Ingress's is the same but for the Service.
func ingressSpec(service string) string {
	return `spec:
  ingressClassName: nginx
  rules:
  - host: echo.example.com
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: ` + service + `, port: {number: 80}}}}
`
}

// TestNginxCanaryIngress: the user's Ingress is never written to; a canary
// Ingress owned by the Rollout carries each step's weight, and is deleted
// at the end.
func TestNginxCanaryIngress(t *testing.T) {
	t.Parallel()
	s := givenRoutedApp(t, routedRollout(threeSteps, noGrace+`        ingress: {name: echoserver}`), userIngress, ingressGVK)
	user := yamlOf(jsonValue(metaView(s.rec.first(routedKey{"Ingress", "echoserver"}))))
	want := serviceStates()
	want[routedKey{"Ingress", "echoserver"}] = routePhases{user, user, user, user, user, user, user}
	want[routedKey{"Ingress", "echoserver-canary"}] = routePhases{absentObject, canaryIngress(0), canaryIngress(20), canaryIngress(60), canaryIngress(100), canaryIngress(100), absentObject}
	s.release(want, map[string]routeView{"Ingress": metaView, "Service": selectorView})
	if got := s.rec.versions(routedKey{"Ingress", "echoserver"}); len(got) != 1 {
		t.Errorf("the user's Ingress must never be written to; it has %d versions:\n%s", len(got), describeVersions(got, metaView))
	}
	s.assertAsApplied(ingressGVK, "echoserver")
	canary := s.rec.first(routedKey{"Ingress", "echoserver-canary"})
	if owner := metav1.GetControllerOf(canary); owner == nil || owner.Kind != "Rollout" || owner.Name != "echoserver" {
		t.Errorf("the canary Ingress must be controlled by the Rollout, owner %+v", owner)
	}
}

// istioRoutes are the Istio objects as Git declares them: their specs are
// declaredDestinationRule and virtualService(0).
var istioRoutes = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echoserver, namespace: demo, labels: {team: web}, annotations: {owner: web-team}}
spec: ` + declaredDestinationRule + `
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echoserver, namespace: demo, labels: {team: web}, annotations: {owner: web-team}}
spec:` + strings.ReplaceAll(virtualService(0), "\n", "\n  ") + "\n"

const (
	declaredDestinationRule = `{host: echoserver, trafficPolicy: {loadBalancer: {simple: ROUND_ROBIN}}}`
	subsetsDestinationRule  = `
host: echoserver
trafficPolicy: {loadBalancer: {simple: ROUND_ROBIN}}
subsets:
- {name: stable, labels: {pod-template-hash: $STABLE}}
- {name: canary, labels: {pod-template-hash: $CANARY}}`
	// promotedDestinationRule: both subsets on the new revision while the
	// release finishes with every request on it.
	promotedDestinationRule = `
host: echoserver
trafficPolicy: {loadBalancer: {simple: ROUND_ROBIN}}
subsets:
- {name: stable, labels: {pod-template-hash: $CANARY}}
- {name: canary, labels: {pod-template-hash: $CANARY}}`
)

// virtualService is the spec of the VirtualService with canary percent
// of the primary route's requests on the canary (0: as declared).
func virtualService(canary int) string {
	primary := `[{destination: {host: echoserver, port: {number: 80}}}]`
	if canary > 0 {
		primary = fmt.Sprintf(`
    - {destination: {host: echoserver, port: {number: 80}}, weight: %d}
    - {destination: {host: echoserver-canary, port: {number: 80}}, weight: %d}`, 100-canary, canary)
	}
	return `
hosts: [echo.example.com]
gateways: [public]
http:
- name: static
  match: [{uri: {prefix: /static}}]
  route: [{destination: {host: assets}}]
- name: primary
  route: ` + primary
}

// TestIstioThroughLua: the built-in Lua scripts split the VirtualService's
// primary route and keep the DestinationRule's stable and canary subsets;
// both are exactly as declared at the end.
func TestIstioThroughLua(t *testing.T) {
	t.Parallel()
	routing := noGrace + `        customNetworkRefs:
        - {apiVersion: networking.istio.io/v1, kind: DestinationRule, name: echoserver}
        - {apiVersion: networking.istio.io/v1, kind: VirtualService, name: echoserver}`
	s := givenRoutedApp(t, routedRollout(threeSteps, routing), istioRoutes, virtualSvcGVK, destRuleGVK)
	want := serviceStates()
	want[routedKey{"VirtualService", "echoserver"}] = routePhases{virtualService(0), virtualService(0), virtualService(20), virtualService(60), virtualService(100), virtualService(100), virtualService(0)}
	// At weight 0 (all to stable) the objects are as declared: no script
	// runs there (traffic.routeScript).
	want[routedKey{"DestinationRule", "echoserver"}] = routePhases{declaredDestinationRule, declaredDestinationRule, subsetsDestinationRule, subsetsDestinationRule, subsetsDestinationRule, promotedDestinationRule, declaredDestinationRule}
	s.release(want, map[string]routeView{"VirtualService": specView, "DestinationRule": specView, "Service": selectorView})
	s.assertAsApplied(virtualSvcGVK, "echoserver")
	s.assertAsApplied(destRuleGVK, "echoserver")
}

// gateSteps hold step 1 (20% on one new pod) at a gate.
const gateSteps = `
      steps:
      - traffic: "20%"
        replicas: 1
        pause: {}
      - traffic: "100%"
        replicas: "100%"`

// TestFluxReapplyAtGateIsUndone: at a gate, Flux applies the app as Git
// declares it, which would take back the HTTPRoute's rules and the stable
// Service's selector; the route admission webhook puts the step into the
// apply before it is stored, so neither is ever stored off its step, and
// the release itself does not move.
func TestFluxReapplyAtGateIsUndone(t *testing.T) {
	// The default grace period of 3s: re-asserting a step waits for none.
	s := givenRoutedApp(t, routedRollout(gateSteps, gatewayRouting), httpRoute, httpRouteGVK)
	ro := s.atGate()
	route, svc := routedKey{"HTTPRoute", "echoserver"}, routedKey{"Service", "echoserver"}
	s.assertNow(route, rulesView, weightedRules(20))
	s.assertNow(svc, selectorView, stableSelector)

	// When Flux applies the Service and the HTTPRoute as Git declares them
	// (it applies only the objects that differ from Git).
	re := s.reassert(ro, route, rulesView, declaredRules, weightedRules(20), func() {
		s.w.ApplyYAML(stableService + "---" + httpRoute)
	})

	// Then the apply is stored with 20% already in it, and nothing moves after.
	if d := s.rec.window(re.writes, svc, selectorView, s.norm(declaredSelector)); d > 0 {
		t.Errorf("the watch saw the stable Service select every pod for %s, want never", d.Round(time.Millisecond))
	}
	re.assertKept(route, rulesView)
	re.assertAppliedOnce(svc, "the stable Service", selectorView)
	s.assertNow(route, rulesView, weightedRules(20))
	s.assertNow(svc, selectorView, stableSelector)
}

// TestFluxReapplyOfVirtualServiceAtGateIsUndone: at a gate, Flux applies
// the DestinationRule and VirtualService as Git declares them, which would
// take the canary's 20% back to stable; the route admission webhook runs
// the kind's Lua script on the apply before it is stored (the watch of the
// kinds named in customNetworkRefs stays as the second line).
func TestFluxReapplyOfVirtualServiceAtGateIsUndone(t *testing.T) {
	routing := `        customNetworkRefs:
        - {apiVersion: networking.istio.io/v1, kind: DestinationRule, name: echoserver}
        - {apiVersion: networking.istio.io/v1, kind: VirtualService, name: echoserver}`
	s := givenRoutedApp(t, routedRollout(gateSteps, routing), istioRoutes, virtualSvcGVK, destRuleGVK)
	ro := s.atGate()
	vs, dr := routedKey{"VirtualService", "echoserver"}, routedKey{"DestinationRule", "echoserver"}
	s.assertNow(vs, specView, virtualService(20))
	s.assertNow(dr, specView, subsetsDestinationRule)

	// When Flux applies the Istio objects as Git declares them (only
	// them: a re-applied Service would bring a reconcile of its own).
	re := s.reassert(ro, vs, specView, virtualService(0), virtualService(20), func() {
		s.w.ApplyYAML(istioRoutes)
	})

	// Then the VirtualService is stored with 20% already in it, and the
	// DestinationRule keeps its subsets.
	re.assertKept(vs, specView)
	re.assertAppliedOnce(dr, "the DestinationRule", specView)
	s.assertNow(vs, specView, virtualService(20))
	s.assertNow(dr, specView, subsetsDestinationRule)
}

// TestCanaryIngressWriteAtGateIsUndone: at a gate, a write takes the canary
// Ingress's weight to 0 (every request back on stable); rollgate watches
// Ingresses and puts the step's weight back at once.
func TestCanaryIngressWriteAtGateIsUndone(t *testing.T) {
	s := givenRoutedApp(t, routedRollout(gateSteps, `        ingress: {name: echoserver}`), userIngress, ingressGVK)
	ro := s.atGate()
	canary := routedKey{"Ingress", "echoserver-canary"}
	s.assertNow(canary, metaView, canaryIngress(20))

	// When someone sets the canary weight to 0.
	re := s.reassert(ro, canary, metaView, canaryIngress(0), canaryIngress(20), func() {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(ingressGVK)
		u.SetNamespace(s.w.NS)
		u.SetName(canary.name)
		u.SetAnnotations(map[string]string{nginxCanaryWeight: "0"})
		if err := s.w.C.Patch(context.Background(), u, client.Merge, client.FieldOwner("kubectl-edit")); err != nil {
			t.Fatal(err)
		}
	})

	// Then the canary Ingress carries 20% again at once.
	re.assertWritten(canary, metaView, 2)
	s.assertNow(canary, metaView, canaryIngress(20))
}

// atGate releases v2 and waits for step 1 at its gate; it returns the
// Rollout then.
func (s *trafficStory) atGate() *v1alpha1.Rollout {
	s.t.Helper()
	stable := s.w.Rollout(s.w.NS, "echoserver").Status.StableRevision
	s.w.ApplyYAML(s.app("echo:2.0"))
	var ro *v1alpha1.Rollout
	s.w.Eventually(45*time.Second, "step 1 at its gate", func(ctx context.Context) (bool, error) {
		ro = s.w.Rollout(s.w.NS, "echoserver")
		return ro.Status.AwaitingApproval != nil && ro.Status.CurrentStepIndex == 1, nil
	})
	s.revs = s.revisionValues(stable, ro.Status.CanaryRevision)
	return ro
}

// app is the application as Git declares it, running image: routedApp,
// or a StatefulSet of the same pods in place of the Deployment.
func (s *trafficStory) app(image string) string {
	if s.kind != "StatefulSet" {
		return routedApp(image, s.routes)
	}
	sts := fmt.Sprintf(`
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: echoserver, namespace: demo}
spec:
  replicas: 5
  serviceName: echoserver
  selector: {matchLabels: {app: echoserver}}
  template:
    metadata: {labels: {app: echoserver}}
    spec:
      containers:
      - name: echoserver
        image: %s
`, image)
	return sts + "---" + stableService + "---" + s.routes
}

// workload is the story's workload as the API server has it.
func (s *trafficStory) workload() client.Object {
	var obj client.Object = &appsv1.Deployment{}
	if s.kind == "StatefulSet" {
		obj = &appsv1.StatefulSet{}
	}
	if err := s.w.C.Get(context.Background(), client.ObjectKey{Namespace: s.w.NS, Name: "echoserver"}, obj); err != nil {
		s.t.Fatal(err)
	}
	return obj
}

// revisionValues replaces $STABLE and $CANARY with what the Services of a
// release narrow revisions stable and canary by: for a Deployment, the
// stable ReplicaSet's pod-template-hash and the canary revision (the hash
// of the ReplicaSet rollgate makes); for a StatefulSet, the names of the
// revisions' ControllerRevisions (controller-revision-hash).
func (s *trafficStory) revisionValues(stable, canary string) *strings.Replacer {
	if s.kind != "StatefulSet" {
		return strings.NewReplacer("$STABLE", stableHash(s.w, stable), "$CANARY", canary)
	}
	var list appsv1.ControllerRevisionList
	if err := s.w.C.List(context.Background(), &list, client.InNamespace(s.w.NS), client.MatchingLabels{"app": "echoserver"}); err != nil {
		s.t.Fatal(err)
	}
	names := map[string]string{}
	for _, cr := range list.Items {
		var data struct {
			Spec struct {
				Template corev1.PodTemplateSpec `json:"template"`
			} `json:"spec"`
		}
		if err := json.Unmarshal(cr.Data.Raw, &data); err != nil {
			s.t.Fatal(err)
		}
		names[workload.Revision(&data.Spec.Template)] = cr.Name
	}
	if names[stable] == "" || names[canary] == "" {
		s.t.Fatalf("ControllerRevisions by revision %v: want ones of %s and %s", names, stable, canary)
	}
	return strings.NewReplacer("$STABLE", names[stable], "$CANARY", names[canary])
}

// stableHash is the pod-template-hash of the ReplicaSet of Deployment
// echoserver whose template is revision rev: what the stable Service of a
// release in place is narrowed to.
func stableHash(w *world, rev string) string {
	w.T.Helper()
	var list appsv1.ReplicaSetList
	if err := w.C.List(context.Background(), &list, client.InNamespace(w.NS), client.MatchingLabels{"app": "echoserver"}); err != nil {
		w.T.Fatal(err)
	}
	for _, rs := range list.Items {
		if workload.Revision(&rs.Spec.Template) == rev {
			return rs.Labels[appsv1.DefaultDeploymentUniqueLabelKey]
		}
	}
	w.T.Fatalf("no ReplicaSet of revision %s among %d", rev, len(list.Items))
	return ""
}

// reassertion is what followed a write that took a routing object off its
// step at a gate.
type reassertion struct {
	t      *testing.T
	writes []objectVersion // every write after it, in etcd's order
	// window is how long the watch saw the object off its step.
	window time.Duration
	// offSamples counts the polls that saw the object off its step.
	offSamples int
}

// backAndHeld reports whether samples are some 100/0 then only 80/20: the
// step came back once and held until the end.
func backAndHeld(samples []string) bool {
	i := 0
	for i < len(samples) && samples[i] == "100/0" {
		i++
	}
	if i == len(samples) {
		return false
	}
	for _, s := range samples[i:] {
		if s != "80/20" {
			return false
		}
	}
	return true
}

// reassert runs write at the gate where ro waits, which takes object k's
// view from step to off (the step is 20% on the canary, off is 100/0),
// then polls k every 100ms for 10s and fails the test unless the step
// came back within the poll (long before the 30 s resync) and held; the release, the pods and the
// Deployment must not move.
func (s *trafficStory) reassert(ro *v1alpha1.Rollout, k routedKey, v routeView, off, step string, write func()) *reassertion {
	t := s.t
	t.Helper()
	pods := s.w.Pods(s.w.NS, "echoserver")
	// The controller looks again 500 ms after the release moves; past that
	// only an event brings it back before its 30 s resync.
	time.Sleep(2 * time.Second)
	s.rec.catchUp(s.w)
	since := len(s.rec.timeline())
	deployment := s.w.Deployment(s.w.NS, "echoserver").ResourceVersion

	applied := time.Now()
	write()
	returned := time.Since(applied)
	offState, stepState := s.norm(off), s.norm(step)
	var samples []string
	var lastOff time.Duration
	offSamples := 0
	for at := time.Since(applied); at < 10*time.Second; at = time.Since(applied) {
		switch got := s.get(k, v); {
		case reflect.DeepEqual(got, offState):
			lastOff = at // from the write
			offSamples++
			samples = append(samples, "100/0")
		case reflect.DeepEqual(got, stepState):
			samples = append(samples, "80/20")
		default:
			t.Fatalf("%s after the write %s carries neither 100/0 nor 20%%:\n%s", at, k, yamlOf(got))
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.rec.catchUp(s.w)
	re := &reassertion{t: t, writes: s.rec.timeline()[since:], offSamples: offSamples}
	re.window = s.rec.window(re.writes, k, v, offState)
	t.Logf("the write returned after %s; %s, polled every 100ms for 10s: %s (last 100/0 sample at %s); "+
		"the watch saw it carry 100/0 for %s (%d ms)", returned.Round(time.Millisecond), k, runsOf(samples),
		lastOff.Round(time.Millisecond), re.window.Round(time.Millisecond), re.window.Milliseconds())
	// Behaviour, not a time bound: the poll ends long before the 30 s
	// resync, so a step back within it was brought back by the watch event
	// of the written object; and once back it held (one re-assertion, no
	// flap). How long it took is printed above.
	if !backAndHeld(samples) {
		t.Fatalf("%s after the write: %s; the step must be re-asserted on the watch event of the written object "+
			"(reconciler/rollout/setup.go, reconciler/rollout/routewatch.go), without a grace period (traffic/entry.go), not at the %s "+
			"resync, and then hold", k, runsOf(samples), 30*time.Second)
	}
	for _, w := range re.of(rolloutKey) {
		var st v1alpha1.Rollout
		fromUnstructured(t, w.obj, &st)
		if a, b := releaseState(ro), releaseState(&st); a != b {
			t.Errorf("the write moved the release:\nbefore %s\nafter  %s", a, b)
		}
		if !conditions.IsTrue(&st, v1alpha1.TrafficShiftedCondition) {
			t.Errorf("TrafficShifted went %s after the write: %s", conditions.GetReason(&st, v1alpha1.TrafficShiftedCondition),
				conditions.GetMessage(&st, v1alpha1.TrafficShiftedCondition))
		}
	}
	if got := s.w.Pods(s.w.NS, "echoserver"); !reflect.DeepEqual(got, pods) {
		t.Errorf("the write moved pods: before %v, after %v", pods, got)
	}
	if rv := s.w.Deployment(s.w.NS, "echoserver").ResourceVersion; rv != deployment {
		t.Errorf("the Deployment changed (resourceVersion %s, then %s): its watch event, not the routes', may have brought the re-assertion", deployment, rv)
	}
	return re
}

// of returns the writes to object k.
func (re *reassertion) of(k routedKey) []objectVersion {
	var out []objectVersion
	for _, w := range re.writes {
		if w.key == k {
			out = append(out, w)
		}
	}
	return out
}

// assertWritten checks that object k was written n times after the write
// (n = 2: the write, the re-assertion).
func (re *reassertion) assertWritten(k routedKey, v routeView, n int) {
	re.t.Helper()
	w := re.of(k)
	re.t.Logf("after the write: %d writes to %s, %d to the Rollout", len(w), k, len(re.of(rolloutKey)))
	if len(w) != n {
		re.t.Errorf("%s was written %d times after the write, want %d (the write, the re-assertion):\n%s", k, len(w), n, describeVersions(w, v))
	}
}

// assertAppliedOnce checks that object k (what, in messages) was written
// at most once after the re-apply: the apply, with the step in it.
func (re *reassertion) assertAppliedOnce(k routedKey, what string, v routeView) {
	re.t.Helper()
	if w := re.of(k); len(w) > 1 {
		re.t.Errorf("%s was written %d times after the re-apply, want at most 1 (the apply, with the step in it):\n%s", what, len(w), describeVersions(w, v))
	}
}

// assertKept checks that object k was never seen nor stored off its step
// after the write, and written at most once (the write itself, stored
// with the step in it by the route admission webhook).
func (re *reassertion) assertKept(k routedKey, v routeView) {
	re.t.Helper()
	w := re.of(k)
	re.t.Logf("after the write: %d writes to %s, %d to the Rollout; %d polls and %s of the watch off the step",
		len(w), k, len(re.of(rolloutKey)), re.offSamples, re.window)
	if len(w) > 1 || re.offSamples > 0 || re.window > 0 {
		re.t.Errorf("%s was written %d times after the write and seen off its step %d times (%s), want at most one write, "+
			"always on the step (reconciler/routehook):\n%s", k, len(w), re.offSamples, re.window, describeVersions(w, v))
	}
}

// releaseState is what must not change while a release waits at a gate.
func releaseState(ro *v1alpha1.Rollout) string {
	s := ro.Status
	out := fmt.Sprintf("phase %s, step %d %s since %v, stable %s, canary %s, traffic %s",
		s.Phase, s.CurrentStepIndex, s.CurrentStepState, s.StepStartedAt, s.StableRevision, s.CanaryRevision, s.Traffic)
	if a := s.AwaitingApproval; a != nil {
		out += fmt.Sprintf(", awaiting step %d of %s since %v", a.Step, a.Revision, a.Since)
	}
	return out
}

// Phases of a release, the index into routePhases: as declared (before
// the release), to stable (the release started, every request on stable),
// steps 1 to 3, promoted (step 3 sends every request to the new revision,
// so the release finishes with the stable Service narrowed to it too while
// the old pods go), and done.
const (
	phaseDeclared = iota
	phaseToStable
	phaseStep1
	phaseStep2
	phaseStep3
	phasePromoted
	phaseDone
	phaseCount
)

var phaseNames = [...]string{"as declared", "all to stable", "step 1", "step 2", "step 3", "promoted", "done"}

// routePhases holds one object's expected state in each phase, as YAML of
// its view; absentObject means that the object does not exist.
type routePhases [phaseCount]string

const absentObject = "<absent>"

// routeView picks the part of an object a story checks.
type routeView func(*unstructured.Unstructured) any

func routeViewOf(path ...string) routeView {
	return func(u *unstructured.Unstructured) any {
		v, _, _ := unstructured.NestedFieldNoCopy(u.Object, path...)
		return v
	}
}

type routedKey struct{ kind, name string }

func (k routedKey) String() string { return k.kind + " " + k.name }

// trafficStory is one cluster running the app of routedApp under its
// Rollout, with a log of every write to the objects a release touches.
type trafficStory struct {
	t      *testing.T
	w      *world
	rec    *objectLog
	routes string
	gvks   map[string]schema.GroupVersionKind
	// kind is the workload's kind: Deployment or StatefulSet.
	kind string
	// revs replaces $STABLE and $CANARY in expected states.
	revs *strings.Replacer
}

// givenRoutedApp starts a world that runs v1 of routedApp with routes,
// under rollout, and logs every version of the Rollout, pods, Services
// and the routing objects of kinds gvks from before they exist.
func givenRoutedApp(t *testing.T, rollout, routes string, gvks ...schema.GroupVersionKind) *trafficStory {
	return givenRoutedWorkload(t, "Deployment", rollout, routes, gvks...)
}

// givenRoutedWorkload is givenRoutedApp with a workload of kind.
func givenRoutedWorkload(t *testing.T, kind, rollout, routes string, gvks ...schema.GroupVersionKind) *trafficStory {
	start := time.Now()
	w := newWorld(t)
	s := &trafficStory{t: t, w: w, routes: routes, kind: kind, gvks: map[string]schema.GroupVersionKind{}}
	for _, gvk := range append(gvks, serviceGVK, podGVK, rolloutGVK) {
		s.gvks[gvk.Kind] = gvk
	}
	if _, istio := s.gvks[virtualSvcGVK.Kind]; istio {
		w.ApplyFiles(filepath.Join(repo.Root(), "traffic", "testdata", "crds", "istio-networking-minimal.yaml"))
	}
	s.rec = w.watchObjects(w.NS, s.gvks)
	w.ApplyYAML(s.app("echo:1.0"))
	w.ApplyYAML(rollout)
	w.Eventually(60*time.Second, "v1 running and the Rollout healthy", func(ctx context.Context) (bool, error) {
		ro := w.Rollout(w.NS, "echoserver")
		return w.Pods(w.NS, "echoserver")["echo:1.0"] == [2]int{5, 5} && conditions.IsReady(ro) &&
			s.workload().GetLabels()[v1alpha1.LabelControlled] != "", nil
	})
	t.Logf("v1 runs under its Rollout after %s", time.Since(start).Round(time.Millisecond))
	return s
}

// release applies v2, waits for the release to complete, then goes through
// every write the cluster made in its order, and checks that
//
//   - whatever the Rollout's status said, each object was in a state of
//     the phases that status allows: the routes never ran ahead of the
//     status nor behind it (the controller writes the status before it
//     moves traffic, and a step is paused only once its traffic is in
//     place);
//   - the status was seen at step 1, step 2 and done with its traffic in
//     place;
//   - each object went through exactly the distinct states of want, in
//     order, and through nothing else.
//
// It logs the time each Service received requests without a ready pod
// behind it.
func (s *trafficStory) release(want map[routedKey]routePhases, views map[string]routeView) {
	t, w := s.t, s.w
	start := time.Now()
	stable := w.Rollout(w.NS, "echoserver").Status.StableRevision
	w.ApplyYAML(s.app("echo:2.0"))
	var ro *v1alpha1.Rollout
	w.Eventually(60*time.Second, "the release completes", func(ctx context.Context) (bool, error) {
		ro = w.Rollout(w.NS, "echoserver")
		if ro.Status.Phase == v1alpha1.PhaseFailed {
			return false, fmt.Errorf("the release failed: %s", ro.Status.Message)
		}
		return ro.Status.Phase == v1alpha1.PhaseHealthy && ro.Status.StableRevision != stable &&
			ro.Status.StableRevision == ro.Status.CanaryRevision, nil
	})
	t.Logf("release of %s completed after %s", ro.Status.CanaryRevision, time.Since(start).Round(time.Millisecond))
	s.revs = s.revisionValues(stable, ro.Status.CanaryRevision)
	s.rec.catchUp(w)
	keys := make([]routedKey, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	s.replay(keys, want, views, stable)
	for _, k := range keys {
		s.assertHistory(k, views[k.kind], want[k])
	}
}

// replay goes through the log in etcd's order (kwok runs one etcd, whose
// revisions are the resourceVersions of every kind) and checks each state
// of the objects of want against the Rollout status of the moment.
func (s *trafficStory) replay(keys []routedKey, want map[routedKey]routePhases, views map[string]routeView, stable string) {
	t := s.t
	expected := map[routedKey][phaseCount]any{}
	for k, p := range want {
		var e [phaseCount]any
		for i := range p {
			e[i] = s.norm(p[i])
		}
		expected[k] = e
	}
	live := map[routedKey]*unstructured.Unstructured{}
	var st *v1alpha1.RolloutStatus
	settled := map[int]int{}
	wrong := map[routedKey]bool{}
	unserved := &servedLog{}
	for _, ev := range s.rec.timeline() {
		live[ev.key] = ev.obj
		if ev.key == rolloutKey && ev.obj != nil {
			var ro v1alpha1.Rollout
			fromUnstructured(t, ev.obj, &ro)
			st = &ro.Status
		}
		if st == nil {
			continue
		}
		if st.CanaryRevision != "" && st.CanaryRevision != stable {
			unserved.update(ev, live)
		}
		allowed := allowedPhases(st, stable)
		if ev.key == rolloutKey && len(allowed) == 1 {
			settled[allowed[0]]++
		}
		for _, k := range keys {
			var got any
			if live[k] != nil {
				got = jsonValue(views[k.kind](live[k]))
			}
			ok := len(allowed) == 0
			var names []string
			for _, p := range allowed {
				ok = ok || reflect.DeepEqual(got, expected[k][p])
				names = append(names, phaseNames[p])
			}
			if !ok && !wrong[k] {
				wrong[k] = true
				t.Errorf("at resourceVersion %d (%s), with the Rollout at %s, %s is\n%s\nwant it %s:\n%s",
					ev.rv, ev.key, position(st), k, yamlOf(got), strings.Join(names, " or "), yamlOf(expected[k][allowed[0]]))
			}
		}
	}
	t.Logf("status writes with their traffic in place, by phase: %s", describeCounts(settled))
	for _, p := range []int{phaseStep1, phaseStep2, phaseDone} {
		if settled[p] == 0 {
			t.Errorf("the Rollout was never seen at %s with its traffic in place", phaseNames[p])
		}
	}
	for _, line := range unserved.lines {
		t.Logf("requests without a ready pod: %s", line)
	}
}

// allowedPhases are the phases whose states the routing objects may be in
// while a status holds; nil for a status that says nothing about them.
func allowedPhases(st *v1alpha1.RolloutStatus, stable string) []int {
	inRelease := st.CanaryRevision != "" && st.CanaryRevision != stable
	switch {
	case !inRelease && st.Phase == v1alpha1.PhaseHealthy:
		return []int{phaseDeclared}
	case !inRelease:
		return nil
	case st.Phase == v1alpha1.PhaseHealthy && st.StableRevision == st.CanaryRevision:
		return []int{phaseDone}
	case st.Phase != v1alpha1.PhaseProgressing:
		return nil
	}
	step := phaseStep1 + int(st.CurrentStepIndex) - 1
	switch st.CurrentStepState {
	case v1alpha1.StepUpgrade:
		if step == phaseStep1 {
			return []int{phaseDeclared, phaseToStable}
		}
		return []int{step - 1} // the pods come up under the traffic of the step before
	case v1alpha1.StepTrafficRouting:
		return []int{step - 1, step}
	case v1alpha1.StepMetricsAnalysis, v1alpha1.StepPaused, v1alpha1.StepReady:
		return []int{step}
	case v1alpha1.StepCompleted:
		// Every story's last step sends all requests to the new
		// revision: it finishes promoted, then the declared objects come
		// back once every pod runs it (the status's stable revision is
		// then the new one).
		if st.StableRevision == st.CanaryRevision {
			return []int{phasePromoted, phaseDone}
		}
		return []int{step, phasePromoted}
	}
	return nil
}

func position(st *v1alpha1.RolloutStatus) string {
	return fmt.Sprintf("%s, step %d %s", st.Phase, st.CurrentStepIndex, st.CurrentStepState)
}

func describeCounts(m map[int]int) string {
	var parts []string
	for p, name := range phaseNames {
		if m[p] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", name, m[p]))
		}
	}
	return strings.Join(parts, ", ")
}

// servedLog finds the spans during which a routing object sent requests
// to a Service that selected no ready pod.
type servedLog struct {
	open  map[string]objectVersion
	lines []string
}

func (l *servedLog) update(ev objectVersion, live map[routedKey]*unstructured.Unstructured) {
	if l.open == nil {
		l.open = map[string]objectVersion{}
	}
	targets := map[string]bool{}
	for k, u := range live {
		for _, svc := range receivers(k, u, live) {
			targets[svc] = true
		}
	}
	for svc := range targets {
		if _, open := l.open[svc]; !open && readyBehind(live, svc) == 0 {
			l.open[svc] = ev
		}
	}
	for svc, from := range l.open {
		if !targets[svc] || readyBehind(live, svc) > 0 {
			l.lines = append(l.lines, fmt.Sprintf("Service %s for %s (resourceVersions %d to %d: %s, then %s)",
				svc, ev.at.Sub(from.at).Round(time.Millisecond), from.rv, ev.rv, from.key, ev.key))
			delete(l.open, svc)
		}
	}
}

// receivers are the Services an object sends requests to. An Ingress
// sends none when a canary Ingress takes them all, or when it is a canary
// Ingress that takes none.
func receivers(k routedKey, u *unstructured.Unstructured, live map[routedKey]*unstructured.Unstructured) []string {
	if u == nil {
		return nil
	}
	var out []string
	weighted := func(m map[string]any) bool {
		w, ok, _ := unstructured.NestedInt64(m, "weight")
		return !ok || w > 0
	}
	switch k.kind {
	case "HTTPRoute":
		rules, _, _ := unstructured.NestedSlice(u.Object, "spec", "rules")
		for _, r := range rules {
			refs, _, _ := unstructured.NestedSlice(r.(map[string]any), "backendRefs")
			for _, ref := range refs {
				if m := ref.(map[string]any); weighted(m) {
					out = append(out, m["name"].(string))
				}
			}
		}
	case "Ingress":
		canary := func(u *unstructured.Unstructured, weight string) bool {
			a := u.GetAnnotations()
			return a["nginx.ingress.kubernetes.io/canary"] == "true" && a[nginxCanaryWeight] == weight && a["nginx.ingress.kubernetes.io/canary-by-header"] == ""
		}
		if c := live[routedKey{"Ingress", k.name + "-canary"}]; canary(u, "0") || c != nil && canary(c, "100") {
			return nil
		}
		rules, _, _ := unstructured.NestedSlice(u.Object, "spec", "rules")
		for _, r := range rules {
			paths, _, _ := unstructured.NestedSlice(r.(map[string]any), "http", "paths")
			for _, p := range paths {
				name, _, _ := unstructured.NestedString(p.(map[string]any), "backend", "service", "name")
				out = append(out, name)
			}
		}
	case "VirtualService":
		routes, _, _ := unstructured.NestedSlice(u.Object, "spec", "http")
		for _, r := range routes {
			dests, _, _ := unstructured.NestedSlice(r.(map[string]any), "route")
			for _, d := range dests {
				host, _, _ := unstructured.NestedString(d.(map[string]any), "destination", "host")
				if weighted(d.(map[string]any)) {
					out = append(out, strings.Split(host, ".")[0])
				}
			}
		}
	}
	return out
}

// readyBehind counts the ready pods, not terminating, that Service svc
// selects; a Service that does not exist has none.
func readyBehind(live map[routedKey]*unstructured.Unstructured, svc string) int {
	u := live[routedKey{"Service", svc}]
	if u == nil {
		return 0
	}
	sel, _, _ := unstructured.NestedStringMap(u.Object, "spec", "selector")
	n := 0
	for k, p := range live {
		if k.kind != "Pod" || p == nil || p.GetDeletionTimestamp() != nil || !labels.SelectorFromSet(sel).Matches(labels.Set(p.GetLabels())) {
			continue
		}
		conds, _, _ := unstructured.NestedSlice(p.Object, "status", "conditions")
		for _, c := range conds {
			if m := c.(map[string]any); m["type"] == "Ready" && m["status"] == "True" {
				n++
			}
		}
	}
	return n
}

// assertHistory checks that the object went through exactly the distinct
// states of want, in order.
func (s *trafficStory) assertHistory(k routedKey, v routeView, want routePhases) {
	s.t.Helper()
	var wantStates []any
	for _, p := range append([]string{absentObject}, want[:]...) {
		st := s.norm(p)
		if n := len(wantStates); n == 0 || !reflect.DeepEqual(wantStates[n-1], st) {
			wantStates = append(wantStates, st)
		}
	}
	got := []any{nil}
	for _, x := range s.rec.versions(k) {
		var st any
		if x.obj != nil {
			st = jsonValue(v(x.obj))
		}
		if !reflect.DeepEqual(got[len(got)-1], st) {
			got = append(got, st)
		}
	}
	if !reflect.DeepEqual(got, wantStates) {
		s.t.Errorf("%s went through %d states, want %d:\n%s\nwant:\n%s", k, len(got), len(wantStates), yamlOf(got), yamlOf(wantStates))
		return
	}
	s.t.Logf("%s went through the %d states expected", k, len(got))
}

// assertAsApplied checks that an object the user declared, and the stable
// Service, are exactly as first stored: labels, annotations and spec.
func (s *trafficStory) assertAsApplied(gvk schema.GroupVersionKind, name string) {
	s.t.Helper()
	for _, k := range []routedKey{{gvk.Kind, name}, {"Service", "echoserver"}} {
		first := jsonValue(metaView(s.rec.first(k)))
		if got := s.get(k, metaView); !reflect.DeepEqual(got, first) {
			s.t.Errorf("%s is not as applied:\n%s\napplied:\n%s", k, yamlOf(got), yamlOf(first))
		}
	}
}

// assertNow checks one object's view now.
func (s *trafficStory) assertNow(k routedKey, v routeView, want string) {
	s.t.Helper()
	if got, w := s.get(k, v), s.norm(want); !reflect.DeepEqual(got, w) {
		s.t.Fatalf("%s is\n%s\nwant\n%s", k, yamlOf(got), yamlOf(w))
	}
}

// get reads the view of an object; nil when it does not exist.
func (s *trafficStory) get(k routedKey, v routeView) any {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(s.gvks[k.kind])
	if err := s.w.C.Get(context.Background(), client.ObjectKey{Namespace: s.w.NS, Name: k.name}, u); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		s.t.Fatal(err)
	}
	return jsonValue(v(u))
}

// norm parses an expected state (YAML, revisions replaced); absentObject
// is nil.
func (s *trafficStory) norm(state string) any {
	if state == absentObject {
		return nil
	}
	if s.revs != nil {
		state = s.revs.Replace(state)
	}
	b, err := yaml.YAMLToJSON([]byte(state))
	if err != nil {
		s.t.Fatalf("expected state %q: %v", state, err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		s.t.Fatal(err)
	}
	return out
}

// jsonValue makes a value read from an object comparable with a parsed
// one.
func jsonValue(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return out
}

func yamlOf(v any) string {
	b, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func fromUnstructured(t *testing.T, u *unstructured.Unstructured, out any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
		t.Fatal(err)
	}
}

func describeVersions(vs []objectVersion, v routeView) string {
	var b strings.Builder
	for _, x := range vs {
		if x.obj == nil {
			fmt.Fprintf(&b, "- %s %d deleted\n", x.at.Format("15:04:05.000"), x.rv)
			continue
		}
		fmt.Fprintf(&b, "- %s %d:\n%s", x.at.Format("15:04:05.000"), x.rv, yamlOf(jsonValue(v(x.obj))))
	}
	return b.String()
}

// runsOf renders samples as runs: "100/0 x3, 80/20 x97".
func runsOf(samples []string) string {
	var parts []string
	for i := 0; i < len(samples); {
		j := i
		for j < len(samples) && samples[j] == samples[i] {
			j++
		}
		parts = append(parts, fmt.Sprintf("%s x%d", samples[i], j-i))
		i = j
	}
	return strings.Join(parts, ", ")
}

// objectLog keeps every version of the objects of some kinds in one
// namespace, from watches started before they exist.
type objectLog struct {
	ns   string
	gvks map[string]schema.GroupVersionKind
	mu   sync.Mutex
	seen map[routedKey][]objectVersion
}

// objectVersion is one version of an object, when the watch delivered it;
// obj is nil for a deletion.
type objectVersion struct {
	key routedKey
	rv  uint64
	at  time.Time
	obj *unstructured.Unstructured
}

// watchObjects starts watching the kinds gvks in namespace ns until the
// test ends. It returns once every watch is established.
func (w *world) watchObjects(ns string, gvks map[string]schema.GroupVersionKind) *objectLog {
	w.T.Helper()
	wc, err := client.NewWithWatch(w.cluster.RESTConfig, client.Options{Scheme: w.C.Scheme()})
	if err != nil {
		w.T.Fatal(err)
	}
	l := &objectLog{ns: ns, gvks: gvks, seen: map[routedKey][]objectVersion{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, gvk := range gvks {
		wi, err := wc.Watch(ctx, listOf(gvk), client.InNamespace(ns))
		if err != nil {
			cancel()
			w.T.Fatalf("watch %s: %v", gvk.Kind, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := l.follow(ctx, wc, gvk, wi); err != nil && ctx.Err() == nil {
				w.T.Errorf("watch %s: %v (its log is incomplete)", gvk.Kind, err)
			}
		}()
	}
	w.T.Cleanup(func() { cancel(); wg.Wait() })
	return l
}

func listOf(gvk schema.GroupVersionKind) *unstructured.UnstructuredList {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	return list
}

// follow logs the events of wi, and of a new watch from the last version
// seen whenever the API server ends one.
func (l *objectLog) follow(ctx context.Context, wc client.WithWatch, gvk schema.GroupVersionKind, wi watch.Interface) error {
	last := ""
	for {
		for ev := range wi.ResultChan() {
			switch ev.Type {
			case watch.Added, watch.Modified, watch.Deleted:
				u := ev.Object.(*unstructured.Unstructured)
				last = u.GetResourceVersion()
				if err := l.add(u, ev.Type == watch.Deleted); err != nil {
					return err
				}
			case watch.Error:
				wi.Stop()
				return apierrors.FromObject(ev.Object)
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		var err error
		if wi, err = wc.Watch(ctx, listOf(gvk), client.InNamespace(l.ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: last}}); err != nil {
			return err
		}
	}
}

func (l *objectLog) add(u *unstructured.Unstructured, deleted bool) error {
	rv, err := strconv.ParseUint(u.GetResourceVersion(), 10, 64)
	if err != nil {
		return fmt.Errorf("resourceVersion of %s %s: %w", u.GetKind(), u.GetName(), err)
	}
	k := routedKey{u.GetKind(), u.GetName()}
	v := objectVersion{key: k, rv: rv, at: time.Now(), obj: u.DeepCopy()}
	if deleted {
		v.obj = nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen[k] = append(l.seen[k], v)
	return nil
}

// versions returns the versions of an object logged so far.
func (l *objectLog) versions(k routedKey) []objectVersion {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]objectVersion(nil), l.seen[k]...)
}

// first returns the object as first stored.
func (l *objectLog) first(k routedKey) *unstructured.Unstructured {
	for _, v := range l.versions(k) {
		if v.obj != nil {
			return v.obj
		}
	}
	panic(fmt.Sprintf("%s was never seen", k))
}

// timeline returns every version logged, in the order etcd wrote them.
func (l *objectLog) timeline() []objectVersion {
	l.mu.Lock()
	var out []objectVersion
	for _, vs := range l.seen {
		out = append(out, vs...)
	}
	l.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].rv < out[j].rv })
	return out
}

// catchUp waits until the log holds the current version of every object
// of its kinds, and no object that is gone.
func (l *objectLog) catchUp(w *world) {
	w.T.Helper()
	w.Eventually(30*time.Second, "the watches deliver every write", func(ctx context.Context) (bool, error) {
		for _, gvk := range l.gvks {
			list := listOf(gvk)
			if err := w.C.List(ctx, list, client.InNamespace(l.ns)); err != nil {
				return false, err
			}
			listed := map[string]string{}
			for _, it := range list.Items {
				listed[it.GetName()] = it.GetResourceVersion()
			}
			l.mu.Lock()
			caught := true
			for k, vs := range l.seen {
				if k.kind != gvk.Kind {
					continue
				}
				last, rv := vs[len(vs)-1], listed[k.name]
				caught = caught && (last.obj == nil) == (rv == "") && (last.obj == nil || last.obj.GetResourceVersion() == rv)
				delete(listed, k.name)
			}
			l.mu.Unlock()
			if !caught || len(listed) > 0 {
				return false, nil
			}
		}
		return true, nil
	})
}

// window returns how long the object's view was state in writes: from the
// first version in that state to the next version in another.
func (l *objectLog) window(writes []objectVersion, k routedKey, v routeView, state any) time.Duration {
	var start time.Time
	for _, x := range writes {
		if x.key != k || x.obj == nil {
			continue
		}
		is := reflect.DeepEqual(jsonValue(v(x.obj)), state)
		switch {
		case is && start.IsZero():
			start = x.at
		case !is && !start.IsZero():
			return x.at.Sub(start)
		}
	}
	if start.IsZero() {
		return 0
	}
	return time.Since(start)
}
