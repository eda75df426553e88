package chart

import (
	"context"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/rollgate/rollgate/reconciler"
	"github.com/rollgate/rollgate/test/kwok"
	"github.com/rollgate/rollgate/test/repo"
)

// rendered is what `helm template` renders: the controller Deployments
// and the Services, by name.
type rendered struct {
	deployments map[string]appsv1.Deployment
	services    map[string]corev1.Service
}

func render(t *testing.T, args ...string) rendered {
	t.Helper()
	out := helm(t, append([]string{"template", "rg", chartDir(), "--namespace", "rollgate-system"}, args...)...)
	r := rendered{deployments: map[string]appsv1.Deployment{}, services: map[string]corev1.Service{}}
	for _, doc := range strings.Split(out, "\n---\n") {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "Deployment":
			var d appsv1.Deployment
			if err := utilyaml.Unmarshal([]byte(doc), &d); err != nil {
				t.Fatal(err)
			}
			r.deployments[d.Name] = d
		case "Service":
			var s corev1.Service
			if err := utilyaml.Unmarshal([]byte(doc), &s); err != nil {
				t.Fatal(err)
			}
			r.services[s.Name] = s
		}
	}
	return r
}

// flagOf returns the value of --name=value in the controller's args, and
// whether it is there.
func flagOf(d appsv1.Deployment, name string) (string, bool) {
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// TestShardsRenderOneDeploymentEach: with sharding.shards, one controller
// Deployment per shard besides the main one; the controller's own parser
// reads their --watch-label-selector, and every Rollout label lands in
// exactly one Deployment's selector (a shard name the values do not list
// lands in none: docs/sharding.md); every Deployment elects on a Lease of
// its own and selects only its own pods; each shard's push-webhook Service
// reaches that shard's pods only.
func TestShardsRenderOneDeploymentEach(t *testing.T) {
	r := render(t, "--set", "sharding.shards={shard1,shard2}")
	names := []string{"rg-rollgate", "rg-rollgate-shard1", "rg-rollgate-shard2"}
	if got := slices.Sorted(maps.Keys(r.deployments)); !slices.Equal(got, names) {
		t.Fatalf("Deployments %v, want %v", got, names)
	}
	selectors := map[string]labels.Selector{}
	leases := map[string]string{}
	for _, name := range names {
		d := r.deployments[name]
		raw, ok := flagOf(d, "watch-label-selector")
		if !ok {
			t.Fatalf("%s: no --watch-label-selector", name)
		}
		sel, err := reconciler.ParseWatchSelector(raw)
		if err != nil || sel == nil {
			t.Fatalf("%s: --watch-label-selector=%s: %v", name, raw, err)
		}
		selectors[name] = sel
		lease, _ := flagOf(d, "leader-election-id")
		if other, dup := leases[lease]; dup || lease == "" {
			t.Errorf("%s and %s elect their leader on the same Lease %q", name, other, lease)
		}
		leases[lease] = name
	}
	// The main Deployment keeps the Lease of an unsharded install: during
	// the upgrade that turns sharding on, the old and the new main pods
	// still take turns.
	if lease, _ := flagOf(r.deployments["rg-rollgate"], "leader-election-id"); lease != "rollgate.dev" {
		t.Errorf("main Deployment's Lease %q, want rollgate.dev", lease)
	}
	for _, tc := range []struct {
		labels map[string]string
		want   []string
	}{
		{nil, []string{"rg-rollgate"}},
		{map[string]string{"team": "shop"}, []string{"rg-rollgate"}},
		{map[string]string{"sharding.fluxcd.io/key": "shard1"}, []string{"rg-rollgate-shard1"}},
		{map[string]string{"sharding.fluxcd.io/key": "shard2", "team": "shop"}, []string{"rg-rollgate-shard2"}},
		{map[string]string{"sharding.fluxcd.io/key": "shard3"}, nil},
	} {
		var got []string
		for _, name := range names {
			if selectors[name].Matches(labels.Set(tc.labels)) {
				got = append(got, name)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("a Rollout labelled %v is reconciled by %v, want %v", tc.labels, got, tc.want)
		}
	}
	for _, name := range names {
		sel := podSelector(t, r.deployments[name].Spec.Selector)
		for _, other := range names {
			pods := labels.Set(r.deployments[other].Spec.Template.Labels)
			if matches := sel.Matches(pods); matches != (name == other) {
				t.Errorf("Deployment %s selects the pods of %s: %v", name, other, matches)
			}
		}
	}
	for svc, want := range map[string]string{
		"rg-rollgate-webhook":            "rg-rollgate",
		"rg-rollgate-git-webhook":        "rg-rollgate",
		"rg-rollgate-shard1-git-webhook": "rg-rollgate-shard1",
		"rg-rollgate-shard2-git-webhook": "rg-rollgate-shard2",
		"rg-rollgate-shard2-metrics":     "rg-rollgate-shard2",
	} {
		s, ok := r.services[svc]
		if !ok {
			t.Errorf("no Service %s", svc)
			continue
		}
		for _, name := range names {
			pods := labels.Set(r.deployments[name].Spec.Template.Labels)
			if matches := labels.SelectorFromSet(s.Spec.Selector).Matches(pods); matches != (name == want) {
				t.Errorf("Service %s reaches the pods of %s: %v", svc, name, matches)
			}
		}
	}
}

// TestNoShardsByDefault: without sharding.shards the chart renders one
// controller that takes every Rollout, on the Lease it always had.
func TestNoShardsByDefault(t *testing.T) {
	r := render(t)
	if got := slices.Sorted(maps.Keys(r.deployments)); !slices.Equal(got, []string{"rg-rollgate"}) {
		t.Fatalf("Deployments %v, want [rg-rollgate]", got)
	}
	for _, flag := range []string{"watch-label-selector", "leader-election-id"} {
		if v, ok := flagOf(r.deployments["rg-rollgate"], flag); ok {
			t.Errorf("--%s=%s rendered without shards", flag, v)
		}
	}
}

// TestShardNamesAreChecked: a shard name that cannot name a Deployment or
// be a label value, or a name given twice, fails the rendering with a
// message naming the value.
func TestShardNamesAreChecked(t *testing.T) {
	for set, want := range map[string]string{
		"sharding.shards={Shard_1}":       `sharding.shards: "Shard_1" is not a valid shard name`,
		"sharding.shards={shard1,shard1}": "names a shard twice",
	} {
		out, err := helmErr(t, "template", "rg", chartDir(), "--set", set)
		if err == nil || !strings.Contains(out, want) {
			t.Errorf("--set %s: want an error saying %q, got (%v):\n%s", set, want, err, out)
		}
	}
}

func podSelector(t *testing.T, s *metav1.LabelSelector) labels.Selector {
	t.Helper()
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		t.Fatal(err)
	}
	return sel
}

// helmErr runs helm and returns its combined output and error, for
// renderings that must fail.
func helmErr(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(repo.Tool(t, "helm"), args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestUpgradeTurnsShardingOnAndOff: on a kwok cluster, `helm upgrade` of
// an installed release turns sharding on (the API server accepts the main
// Deployment, whose selector cannot change, and every shard Deployment
// becomes ready with its own pods) and off again (the shard Deployments,
// Services and budgets go; the main Deployment takes every Rollout).
func TestUpgradeTurnsShardingOnAndOff(t *testing.T) {
	t.Parallel()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := kwok.Start(t, kwok.Options{Nodes: 2, Scheme: scheme})
	kc := "--kubeconfig=" + c.Kubeconfig
	ns := "rollgate-system"
	helm(t, "install", "rg", chartDir(), kc, "-n", ns, "--create-namespace", "--wait", "--timeout=2m")
	waitReplicas(t, c, ns, "rg-rollgate", 2)

	helm(t, "upgrade", "rg", chartDir(), kc, "-n", ns, "--set", "sharding.shards={shard1,shard2}", "--wait", "--timeout=2m")
	for _, name := range []string{"rg-rollgate", "rg-rollgate-shard1", "rg-rollgate-shard2"} {
		waitReplicas(t, c, ns, name, 2)
	}
	var pods corev1.PodList
	if err := c.Client.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	owners := map[string]int{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			owners[p.Labels["rollgate.dev/shard"]]++
		}
	}
	if want := map[string]int{"": 2, "shard1": 2, "shard2": 2}; !maps.Equal(owners, want) {
		t.Errorf("controller pods by shard %v, want %v", owners, want)
	}
	main := &appsv1.Deployment{}
	if err := c.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "rg-rollgate"}, main); err != nil {
		t.Fatal(err)
	}
	if v, _ := flagOf(*main, "watch-label-selector"); v != "!sharding.fluxcd.io/key" {
		t.Errorf("main Deployment after the upgrade: --watch-label-selector=%q", v)
	}

	helm(t, "upgrade", "rg", chartDir(), kc, "-n", ns, "--set", "sharding.shards=null", "--wait", "--timeout=2m")
	var deps appsv1.DeploymentList
	if err := c.Client.List(context.Background(), &deps, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(deps.Items) != 1 || deps.Items[0].Name != "rg-rollgate" {
		t.Fatalf("after turning sharding off: %d Deployments, want rg-rollgate alone", len(deps.Items))
	}
	if v, ok := flagOf(deps.Items[0], "watch-label-selector"); ok {
		t.Errorf("main Deployment after turning sharding off: --watch-label-selector=%q", v)
	}
	var svcs corev1.ServiceList
	if err := c.Client.List(context.Background(), &svcs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, s := range svcs.Items {
		if strings.Contains(s.Name, "shard") {
			t.Errorf("Service %s left after turning sharding off", s.Name)
		}
	}
}

// TestServiceMonitorScrapesShards: the chart's ServiceMonitor selects the
// metrics Service of the main Deployment and of every shard, and no other.
func TestServiceMonitorScrapesShards(t *testing.T) {
	out := helm(t, "template", "rg", chartDir(), "--namespace", "rollgate-system",
		"--set", "sharding.shards={shard1,shard2}", "--set", "metrics.serviceMonitor.enabled=true")
	var selector map[string]string
	for _, doc := range strings.Split(out, "\n---\n") {
		var sm struct {
			Kind string
			Spec struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				}
			}
		}
		if err := yaml.Unmarshal([]byte(doc), &sm); err == nil && sm.Kind == "ServiceMonitor" {
			selector = sm.Spec.Selector.MatchLabels
		}
	}
	if selector == nil {
		t.Fatal("no ServiceMonitor rendered")
	}
	var got []string
	for name, s := range render(t, "--set", "sharding.shards={shard1,shard2}").services {
		if labels.SelectorFromSet(selector).Matches(labels.Set(s.Labels)) {
			got = append(got, name)
		}
	}
	slices.Sort(got)
	if want := []string{"rg-rollgate-metrics", "rg-rollgate-shard1-metrics", "rg-rollgate-shard2-metrics"}; !slices.Equal(got, want) {
		t.Errorf("the ServiceMonitor selects %v, want %v", got, want)
	}
}
