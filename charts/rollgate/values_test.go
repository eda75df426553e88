package rollgate_test

// The chart's values, rendered with Helm's own library (the same loader,
// schema validation and template engine as `helm install` and `helm
// template`), no cluster needed: each value reaches the objects it is
// for, and each value that cannot work is refused with a message naming it.
// test/chart holds the golden files, lint and the cluster stories.

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
)

// rendered is what one rendering produced, by kind and name.
type rendered struct {
	t       *testing.T
	objects map[string]map[string][]byte // kind -> name -> manifest
}

// render renders the chart as release "rg" in rollgate-system with the
// values in YAML (over the chart's defaults), as `helm template` does.
func render(t *testing.T, values string) (*rendered, error) {
	t.Helper()
	c, err := loader.Load(".")
	if err != nil {
		t.Fatalf("load the chart: %v", err)
	}
	vals, err := chartutil.ReadValues([]byte(values))
	if err != nil {
		t.Fatalf("the test's values: %v", err)
	}
	rv, err := chartutil.ToRenderValues(c, vals.AsMap(), chartutil.ReleaseOptions{
		Name: "rg", Namespace: "rollgate-system", Revision: 1, IsInstall: true,
	}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	files, err := engine.Render(c, rv)
	if err != nil {
		return nil, err
	}
	r := &rendered{t: t, objects: map[string]map[string][]byte{}}
	for name, text := range files {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		for _, doc := range strings.Split(text, "\n---") {
			var u unstructured.Unstructured
			if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
				t.Fatalf("%s: %v\n%s", name, err, doc)
			}
			if u.Object == nil {
				continue
			}
			if r.objects[u.GetKind()] == nil {
				r.objects[u.GetKind()] = map[string][]byte{}
			}
			r.objects[u.GetKind()][u.GetName()] = []byte(doc)
		}
	}
	return r, nil
}

// mustRender renders values that must be accepted.
func mustRender(t *testing.T, values string) *rendered {
	t.Helper()
	r, err := render(t, values)
	if err != nil {
		t.Fatalf("values refused:\n%s\n%v", values, err)
	}
	return r
}

// get decodes the object of kind and name into out; ok is false if there
// is none.
func (r *rendered) get(kind, name string, out any) bool {
	r.t.Helper()
	doc, ok := r.objects[kind][name]
	if !ok {
		return false
	}
	if err := yaml.UnmarshalStrict(doc, out); err != nil {
		r.t.Fatalf("%s %s: %v\n%s", kind, name, err, doc)
	}
	return true
}

func (r *rendered) deployment(name string) *appsv1.Deployment {
	r.t.Helper()
	var d appsv1.Deployment
	if !r.get("Deployment", name, &d) {
		r.t.Fatalf("no Deployment %s; Deployments: %v", name, slices.Sorted(maps.Keys(r.objects["Deployment"])))
	}
	return &d
}

func (r *rendered) pdb(name string) *policyv1.PodDisruptionBudget {
	r.t.Helper()
	var p policyv1.PodDisruptionBudget
	if !r.get("PodDisruptionBudget", name, &p) {
		r.t.Fatalf("no PodDisruptionBudget %s", name)
	}
	return &p
}

func controller(t *testing.T, d *appsv1.Deployment) corev1.Container {
	t.Helper()
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == "controller" {
			return c
		}
	}
	t.Fatalf("Deployment %s has no container controller", d.Name)
	return corev1.Container{}
}

func equal(t *testing.T, what string, got, want any) {
	t.Helper()
	g, _ := yaml.Marshal(got)
	w, _ := yaml.Marshal(want)
	if string(g) != string(w) {
		t.Errorf("%s:\n got %s\nwant %s", what, g, w)
	}
}

// TestDefaultsRestricted: by default the controller pod meets the
// restricted Pod Security Standard, its root filesystem is read-only with
// /tmp writable, and the optional objects are not rendered.
func TestDefaultsRestricted(t *testing.T) {
	r := mustRender(t, "")
	d := r.deployment("rg-rollgate")
	pod := d.Spec.Template.Spec
	if sc := pod.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot ||
		sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v: want runAsNonRoot and seccompProfile RuntimeDefault", sc)
	}
	c := controller(t, d)
	sc := c.SecurityContext
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container securityContext %+v: want allowPrivilegeEscalation false, readOnlyRootFilesystem, drop ALL", sc)
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/tmp" && !m.ReadOnly }) ||
		!slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == "tmp" && v.EmptyDir != nil }) {
		t.Errorf("want /tmp on an emptyDir: mounts %+v, volumes %+v", c.VolumeMounts, pod.Volumes)
	}
	if pod.ImagePullSecrets != nil || pod.PriorityClassName != "" || pod.TopologySpreadConstraints != nil {
		t.Errorf("optional pod fields rendered by default: %+v %q %+v", pod.ImagePullSecrets, pod.PriorityClassName, pod.TopologySpreadConstraints)
	}
	if got := *d.Spec.Replicas; got != 2 {
		t.Errorf("replicas %d, want 2", got)
	}
	if p := r.pdb("rg-rollgate"); p.Spec.MinAvailable == nil || p.Spec.MinAvailable.IntValue() != 1 || p.Spec.MaxUnavailable != nil {
		t.Errorf("PodDisruptionBudget spec %+v, want minAvailable 1 only", p.Spec)
	}
	for _, kind := range []string{"ServiceMonitor", "NetworkPolicy"} {
		if got := slices.Sorted(maps.Keys(r.objects[kind])); len(got) > 0 {
			t.Errorf("%s %v rendered by default", kind, got)
		}
	}
}

// TestPodValues: each value for the controller pod reaches every
// controller Deployment, the main one and a shard's.
func TestPodValues(t *testing.T) {
	r := mustRender(t, `
sharding: {shards: [shard1]}
imagePullSecrets: [{name: regcred}, {name: mirror}]
extraEnv:
- {name: HTTPS_PROXY, value: "http://proxy.example.com:3128"}
- {name: NO_PROXY, value: ".svc,.cluster.local,10.0.0.0/8"}
resources:
  requests: {cpu: 250m, memory: 256Mi}
  limits: {memory: 1Gi}
priorityClassName: system-cluster-critical
nodeSelector: {kubernetes.io/arch: arm64}
tolerations: [{key: dedicated, operator: Equal, value: platform, effect: NoSchedule}]
affinity:
  nodeAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      nodeSelectorTerms: [{matchExpressions: [{key: pool, operator: In, values: [system]}]}]
podSecurityContext: {runAsNonRoot: true, runAsUser: 65532, fsGroup: 65532, seccompProfile: {type: RuntimeDefault}}
securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, runAsGroup: 65532, capabilities: {drop: [ALL]}}
`)
	for _, name := range []string{"rg-rollgate", "rg-rollgate-shard1"} {
		t.Run(name, func(t *testing.T) {
			d := r.deployment(name)
			pod := d.Spec.Template.Spec
			c := controller(t, d)
			equal(t, "imagePullSecrets", pod.ImagePullSecrets, []corev1.LocalObjectReference{{Name: "regcred"}, {Name: "mirror"}})
			equal(t, "env", c.Env[1:], []corev1.EnvVar{
				{Name: "HTTPS_PROXY", Value: "http://proxy.example.com:3128"},
				{Name: "NO_PROXY", Value: ".svc,.cluster.local,10.0.0.0/8"},
			})
			if c.Env[0].Name != "POD_NAMESPACE" {
				t.Errorf("first variable %q, want POD_NAMESPACE kept", c.Env[0].Name)
			}
			equal(t, "resources", c.Resources, corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
			})
			equal(t, "priorityClassName", pod.PriorityClassName, "system-cluster-critical")
			equal(t, "nodeSelector", pod.NodeSelector, map[string]string{"kubernetes.io/arch": "arm64"})
			equal(t, "tolerations", pod.Tolerations, []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "platform", Effect: corev1.TaintEffectNoSchedule}})
			if a := pod.Affinity; a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil ||
				a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Key != "pool" {
				t.Errorf("affinity %+v, want the node affinity on pool", a)
			}
			if sc := pod.SecurityContext; sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 65532 || sc.FSGroup == nil || *sc.FSGroup != 65532 {
				t.Errorf("pod securityContext %+v, want runAsUser and fsGroup 65532", sc)
			}
			if sc := c.SecurityContext; sc == nil || sc.RunAsGroup == nil || *sc.RunAsGroup != 65532 {
				t.Errorf("container securityContext %+v, want runAsGroup 65532", sc)
			}
		})
	}
}

// TestTopologySpread: a constraint without a labelSelector spreads the
// pods of its own Deployment; one with a labelSelector keeps it.
func TestTopologySpread(t *testing.T) {
	r := mustRender(t, `
sharding: {shards: [shard1]}
topologySpreadConstraints:
- {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway}
- {maxSkew: 2, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {team: platform}}}
`)
	for _, name := range []string{"rg-rollgate", "rg-rollgate-shard1"} {
		t.Run(name, func(t *testing.T) {
			d := r.deployment(name)
			tsc := d.Spec.Template.Spec.TopologySpreadConstraints
			if len(tsc) != 2 {
				t.Fatalf("topologySpreadConstraints %+v, want 2", tsc)
			}
			if tsc[0].TopologyKey != "topology.kubernetes.io/zone" || tsc[0].MaxSkew != 1 || tsc[0].WhenUnsatisfiable != corev1.ScheduleAnyway {
				t.Errorf("first constraint %+v", tsc[0])
			}
			equal(t, "defaulted labelSelector", tsc[0].LabelSelector, d.Spec.Selector)
			equal(t, "given labelSelector", tsc[1].LabelSelector, &metav1.LabelSelector{MatchLabels: map[string]string{"team": "platform"}})
		})
	}
}

// TestPodDisruptionBudgetValues: minAvailable, maxUnavailable (which wins)
// and enabled.
func TestPodDisruptionBudgetValues(t *testing.T) {
	for _, tc := range []struct {
		name, values   string
		min, maxUnavai *intstr.IntOrString // nil: not set
		none           bool
	}{
		{name: "minAvailable", values: "replicaCount: 3\npodDisruptionBudget: {minAvailable: 2}", min: ptr(intstr.FromInt32(2))},
		{name: "maxUnavailable", values: "replicaCount: 3\npodDisruptionBudget: {maxUnavailable: 1}", maxUnavai: ptr(intstr.FromInt32(1))},
		{name: "maxUnavailable percentage", values: "replicaCount: 4\npodDisruptionBudget: {maxUnavailable: \"25%\"}", maxUnavai: ptr(intstr.FromString("25%"))},
		{name: "disabled", values: "podDisruptionBudget: {enabled: false}", none: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := mustRender(t, tc.values)
			var p policyv1.PodDisruptionBudget
			found := r.get("PodDisruptionBudget", "rg-rollgate", &p)
			if tc.none {
				if found {
					t.Fatalf("PodDisruptionBudget rendered: %+v", p.Spec)
				}
				return
			}
			if !found {
				t.Fatal("no PodDisruptionBudget")
			}
			equal(t, "minAvailable", p.Spec.MinAvailable, tc.min)
			equal(t, "maxUnavailable", p.Spec.MaxUnavailable, tc.maxUnavai)
		})
	}
}

// TestServiceMonitor: off by default (TestDefaultsRestricted); on, it
// scrapes the metrics Service's port with the given labels and interval.
func TestServiceMonitor(t *testing.T) {
	r := mustRender(t, "metrics: {port: 8090, serviceMonitor: {enabled: true, interval: 15s, labels: {release: prometheus}}}")
	var sm unstructured.Unstructured
	if !r.get("ServiceMonitor", "rg-rollgate", &sm.Object) {
		t.Fatalf("no ServiceMonitor; rendered %v", slices.Sorted(maps.Keys(r.objects)))
	}
	if got := sm.GetLabels()["release"]; got != "prometheus" {
		t.Errorf("label release=%q, want prometheus", got)
	}
	eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(eps) != 1 || eps[0].(map[string]any)["port"] != "metrics" || eps[0].(map[string]any)["interval"] != "15s" {
		t.Errorf("endpoints %v, want port metrics every 15s", eps)
	}
	var svc corev1.Service
	if !r.get("Service", "rg-rollgate-metrics", &svc) || svc.Spec.Ports[0].Port != 8090 {
		t.Errorf("metrics Service ports %+v, want 8090", svc.Spec.Ports)
	}
	match, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	if !labels.SelectorFromSet(match).Matches(labels.Set(svc.Labels)) {
		t.Errorf("the ServiceMonitor's selector %v does not select the metrics Service %v", match, svc.Labels)
	}
}

// TestNetworkPolicy: it selects every controller pod, main and shard, and
// opens their four ports, the metrics port to the given peers only.
func TestNetworkPolicy(t *testing.T) {
	r := mustRender(t, `
sharding: {shards: [shard1]}
networkPolicy:
  enabled: true
  metricsFrom: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}]
  gitWebhookFrom: [{ipBlock: {cidr: 192.0.2.0/24}}]
`)
	var np networkingv1.NetworkPolicy
	if !r.get("NetworkPolicy", "rg-rollgate", &np) {
		t.Fatalf("no NetworkPolicy; rendered %v", slices.Sorted(maps.Keys(r.objects)))
	}
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		t.Fatal(err)
	}
	ports := map[string][]networkingv1.NetworkPolicyPeer{}
	for _, rule := range np.Spec.Ingress {
		for _, p := range rule.Ports {
			ports[p.Port.String()] = rule.From
		}
	}
	for _, name := range []string{"rg-rollgate", "rg-rollgate-shard1"} {
		d := r.deployment(name)
		if !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("the NetworkPolicy's podSelector %s does not select the pods of %s (%v)", sel, name, d.Spec.Template.Labels)
		}
		for _, p := range controller(t, d).Ports {
			if _, ok := ports[p.Name]; !ok {
				t.Errorf("%s: port %s (%d) is not admitted; admitted %v", name, p.Name, p.ContainerPort, slices.Sorted(maps.Keys(ports)))
			}
		}
	}
	if from := ports["metrics"]; len(from) != 1 || from[0].NamespaceSelector == nil ||
		from[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "monitoring" {
		t.Errorf("metrics port open to %+v, want the monitoring namespace only", from)
	}
	// The push port admits the forge's peers and the controller pods, so
	// that a replica that does not lead can forward a call to the leader.
	if from := ports["git-webhook"]; len(from) != 2 || from[0].IPBlock == nil || from[0].IPBlock.CIDR != "192.0.2.0/24" || from[1].PodSelector == nil {
		t.Errorf("git-webhook port open to %+v, want 192.0.2.0/24 and the controller pods", from)
	} else if podSel, err := metav1.LabelSelectorAsSelector(from[1].PodSelector); err != nil || !podSel.Matches(labels.Set(r.deployment("rg-rollgate-shard1").Spec.Template.Labels)) {
		t.Errorf("git-webhook port's pod peer %v (%v) does not select the controller pods", from[1].PodSelector, err)
	}
	if from := ports["webhook"]; from != nil {
		t.Errorf("webhook port open to %+v only, want any source (the API server)", from)
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
		t.Errorf("policyTypes %v, want Ingress only", np.Spec.PolicyTypes)
	}
}

// TestPortValues: the ports given reach the container's flags and ports.
func TestPortValues(t *testing.T) {
	c := controller(t, mustRender(t, "metrics: {port: 8090}\nwebhook: {port: 10250}\ngit: {webhookPort: 9393}").deployment("rg-rollgate"))
	for _, want := range []string{"--metrics-bind-address=:8090", "--webhook-port=10250", "--git-webhook-bind-address=:9393"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("args %q lack %s", c.Args, want)
		}
	}
	got := map[string]int32{}
	for _, p := range c.Ports {
		got[p.Name] = p.ContainerPort
	}
	equal(t, "container ports", got, map[string]int32{"metrics": 8090, "healthz": 8081, "webhook": 10250, "git-webhook": 9393})
}

// TestWebhookTimeout: webhook.timeoutSeconds (default 10) reaches every
// controller's --webhook-timeout-seconds, main and shard, so the controller
// keeps the webhook configurations at it. The configurations the chart
// renders carry no webhooks: their content is the controller's (a field the
// chart rendered and the controller rewrote would be a difference for
// Argo CD's self-heal and Flux's drift detection, docs/install.md).
func TestWebhookTimeout(t *testing.T) {
	for _, tc := range []struct {
		values string
		want   int32
	}{{"sharding: {shards: [s1]}", 10}, {"sharding: {shards: [s1]}\nwebhook: {timeoutSeconds: 1}", 1}, {"sharding: {shards: [s1]}\nwebhook: {timeoutSeconds: 30}", 30}} {
		r := mustRender(t, tc.values)
		flag := fmt.Sprintf("--webhook-timeout-seconds=%d", tc.want)
		for _, name := range []string{"rg-rollgate", "rg-rollgate-s1"} {
			if args := controller(t, r.deployment(name)).Args; !slices.Contains(args, flag) {
				t.Errorf("%q: Deployment %s args %q lack %s", tc.values, name, args, flag)
			}
		}
		var m admissionregistrationv1.MutatingWebhookConfiguration
		var v admissionregistrationv1.ValidatingWebhookConfiguration
		if !r.get("MutatingWebhookConfiguration", "rg-rollgate", &m) || !r.get("ValidatingWebhookConfiguration", "rg-rollgate", &v) {
			t.Fatalf("%q: no webhook configurations rg-rollgate: %v", tc.values, slices.Sorted(maps.Keys(r.objects)))
		}
		if len(m.Webhooks) != 0 || len(v.Webhooks) != 0 {
			t.Errorf("%q: the chart renders %d mutating and %d validating webhooks, want none (the controller writes them)", tc.values, len(m.Webhooks), len(v.Webhooks))
		}
	}
}

// TestWebhookDrain: webhook.drainSeconds (default 5) is a preStop sleep of
// every controller, main and shard, so a stopping pod keeps answering the
// webhooks while its removal reaches kube-proxy and the API server; 0 renders
// no hook.
func TestWebhookDrain(t *testing.T) {
	for _, tc := range []struct {
		values string
		want   int64 // 0: no hook
	}{{"sharding: {shards: [s1]}", 5}, {"sharding: {shards: [s1]}\nwebhook: {drainSeconds: 20}", 20}, {"sharding: {shards: [s1]}\nwebhook: {drainSeconds: 0}", 0}} {
		r := mustRender(t, tc.values)
		for _, name := range []string{"rg-rollgate", "rg-rollgate-s1"} {
			c := controller(t, r.deployment(name))
			var got int64
			if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
				got = c.Lifecycle.PreStop.Sleep.Seconds
			}
			if got != tc.want || (tc.want == 0 && c.Lifecycle != nil) {
				t.Errorf("%q: Deployment %s lifecycle %+v, want a preStop sleep of %d s", tc.values, name, c.Lifecycle, tc.want)
			}
		}
	}
}

// TestBadValuesRefused: a value that cannot work fails the rendering (so
// `helm install`, `helm template`, Argo CD and Flux) with a message that
// names it.
func TestBadValuesRefused(t *testing.T) {
	for _, tc := range []struct {
		name, values string
		want         []string // each must be in the error
	}{
		{"no replica", "replicaCount: 0", []string{"/replicaCount", "minimum"}},
		{"negative replicas", "replicaCount: -1", []string{"/replicaCount"}},
		{"replicas not a number", "replicaCount: two", []string{"/replicaCount"}},
		{"a sharding mode", "sharding: {mode: hash}", []string{"/sharding", "'mode' not allowed"}},
		{"a shard that is not a name", "sharding: {shards: [{name: a}]}", []string{"/sharding/shards/0"}},
		{"a shard name a Deployment cannot have", "sharding: {shards: [Shard_1]}", []string{`sharding.shards: "Shard_1" is not a valid shard name`}},
		{"a shard named twice", "sharding: {shards: [a, a]}", []string{"sharding.shards: [a a] names a shard twice"}},
		{"webhook port is the metrics port", "webhook: {port: 8080}", []string{"webhook.port (8080) is the same port as metrics.port", "give webhook.port another port"}},
		{"webhook port is the health port", "webhook: {port: 8081}", []string{"webhook.port (8081) is the same port as the health probes' port"}},
		{"push port is the webhook port", "git: {webhookPort: 9443}", []string{"git.webhookPort (9443) is the same port as webhook.port"}},
		{"metrics port is the push port", "metrics: {port: 9292}", []string{"git.webhookPort (9292) is the same port as metrics.port"}},
		{"port out of range", "webhook: {port: 70000}", []string{"/webhook/port", "maximum"}},
		{"pull secret without a name", "imagePullSecrets: [{}]", []string{"/imagePullSecrets/0", "missing property 'name'"}},
		{"pull secret with an empty name", "imagePullSecrets: [{name: \"\"}]", []string{"/imagePullSecrets/0/name"}},
		{"pull secret as a bare string", "imagePullSecrets: [regcred]", []string{"/imagePullSecrets/0", "want object"}},
		{"pull secret with a misspelt key", "imagePullSecrets: [{nmae: regcred}]", []string{"/imagePullSecrets/0", "'nmae' not allowed"}},
		{"variable without a name", "extraEnv: [{value: http://proxy:3128}]", []string{"/extraEnv/0", "missing property 'name'"}},
		{"no budget left", "podDisruptionBudget: {maxUnavailable: 0}", []string{"/podDisruptionBudget/maxUnavailable"}},
		{"budget keeps every replica", "replicaCount: 2\npodDisruptionBudget: {minAvailable: 2}", []string{"podDisruptionBudget.minAvailable (2) must be lower than replicaCount (2)"}},
		{"budget not a percentage", "podDisruptionBudget: {minAvailable: half}", []string{"/podDisruptionBudget/minAvailable"}},
		{"spread without a topology key", "topologySpreadConstraints: [{maxSkew: 1, whenUnsatisfiable: DoNotSchedule}]", []string{"/topologySpreadConstraints/0", "topologyKey"}},
		{"pull policy unknown", "image: {pullPolicy: Sometimes}", []string{"/image/pullPolicy"}},
		{"log level unknown", "logLevel: loud", []string{"/logLevel"}},
		{"network policy misspelt", "networkPolicy: {enabled: true, metricFrom: []}", []string{"/networkPolicy", "'metricFrom' not allowed"}},
		{"webhook key misspelt", "webhook: {timeout: 5}", []string{"/webhook", "'timeout' not allowed"}},
		{"webhook timeout zero", "webhook: {timeoutSeconds: 0}", []string{"/webhook/timeoutSeconds", "minimum"}},
		{"webhook timeout above the API server's 30", "webhook: {timeoutSeconds: 31}", []string{"/webhook/timeoutSeconds", "maximum"}},
		{"webhook timeout as a duration", "webhook: {timeoutSeconds: 10s}", []string{"/webhook/timeoutSeconds", "want integer"}},
		{"webhook drain past the grace period", "webhook: {drainSeconds: 26}", []string{"/webhook/drainSeconds", "maximum"}},
		{"webhook drain below zero", "webhook: {drainSeconds: -1}", []string{"/webhook/drainSeconds", "minimum"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(t, tc.values)
			if err == nil {
				t.Fatalf("values accepted:\n%s", tc.values)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not say %q:\n%v", want, err)
				}
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
