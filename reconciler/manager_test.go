package reconciler

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/internal/rollouttest"
	"github.com/rollgate/rollgate/reconciler/workload"
	"github.com/rollgate/rollgate/test/envtest"
	"github.com/rollgate/rollgate/test/rig"
)

// startAPIServer starts an API server with rollgate's scheme and returns a
// context that ends with the test (at most a minute), a client, and a
// function that starts the manager's cache (cacheOptions, for the shard
// selected by shard, nil for every Rollout) on it.
func startAPIServer(t *testing.T) (context.Context, client.Client, func(shard labels.Selector, before ...func(cache.Cache) error) cache.Cache) {
	t.Helper()
	scheme, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	cfg, c := envtest.Start(t, envtest.WithScheme(scheme))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx, c, func(shard labels.Selector, before ...func(cache.Cache) error) cache.Cache {
		t.Helper()
		opts := cacheOptions("rollgate-system", shard, watchScope{})
		opts.Scheme = scheme
		cached, err := newManagerCache(cfg, opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range before {
			if err := f(cached); err != nil {
				t.Fatal(err)
			}
		}
		go func() { _ = cached.Start(ctx) }()
		if !cached.WaitForCacheSync(ctx) {
			t.Fatal("cache did not start")
		}
		return cached
	}
}

// TestCacheStripsManagedFields checks that the manager's cache keeps no
// managedFields (a large part of every cached Pod, ReplicaSet and
// Deployment at 10,000 Rollouts), no Deployment's status conditions and
// of its pod template only its revision and images (StripDeployment),
// while the object in the API server keeps all of them, and that
// rollgate's write of a Deployment, a merge patch between two cached
// copies, leaves them there.
func TestCacheStripsManagedFields(t *testing.T) {
	ctx, c, startCache := startAPIServer(t)
	dep := rig.DeploymentObject("default", "web", 1, corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "web:1"}}})
	if err := c.Create(ctx, dep, client.FieldOwner("kustomize-controller")); err != nil {
		t.Fatal(err)
	}
	dep.Status = appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1, Conditions: []appsv1.DeploymentCondition{
		{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable", Message: "Deployment has minimum availability."},
	}}
	if err := c.Status().Update(ctx, dep, client.FieldOwner("kube-controller-manager")); err != nil {
		t.Fatal(err)
	}

	cached := startCache(nil)
	var got appsv1.Deployment
	if err := cached.Get(ctx, client.ObjectKeyFromObject(dep), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.ManagedFields) != 0 {
		t.Errorf("cached Deployment has %d managedFields entries, want none", len(got.ManagedFields))
	}
	// No status conditions (workload.StripDeployment), the counts kept.
	if len(got.Status.Conditions) != 0 || got.Status.AvailableReplicas != 1 || got.Status.ObservedGeneration != 1 {
		t.Errorf("cached Deployment status %+v, want the counts without conditions", got.Status)
	}
	if got.Spec.Template.Spec.Containers[0].Image != "web:1" || got.UID != dep.UID || len(got.Spec.Template.Labels) != 0 {
		t.Errorf("cached Deployment: uid %s, template %+v; want its images alone", got.UID, got.Spec.Template)
	}
	if workload.DeploymentRevision(&got) != workload.Revision(&dep.Spec.Template) {
		t.Errorf("cached Deployment's revision %s, want its template's %s", workload.DeploymentRevision(&got), workload.Revision(&dep.Spec.Template))
	}

	// A write from the cached copy (no managedFields, no template in the
	// request) keeps the API server's record of who owns which field.
	orig := got.DeepCopy()
	got.Annotations["rollgate.dev/test"] = "1"
	if err := c.Patch(ctx, &got, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner("rollgate")); err != nil {
		t.Fatal(err)
	}
	var live appsv1.Deployment
	if err := c.Get(ctx, client.ObjectKeyFromObject(dep), &live); err != nil {
		t.Fatal(err)
	}
	managers := map[string]bool{}
	for _, e := range live.ManagedFields {
		managers[e.Manager] = true
	}
	if !managers["kustomize-controller"] || !managers["rollgate"] {
		t.Errorf("API server's managedFields after an update from the cache: managers %v, want kustomize-controller and rollgate", managers)
	}
	if len(live.Status.Conditions) != 1 {
		t.Errorf("API server's status conditions after an update from the cache: %+v, want the one the Deployment controller wrote", live.Status.Conditions)
	}
	if workload.Revision(&live.Spec.Template) != workload.Revision(&dep.Spec.Template) || live.Annotations["rollgate.dev/test"] != "1" {
		t.Errorf("API server's Deployment after a write from the cache: template %+v, annotations %v; want the template as created and the new annotation",
			live.Spec.Template, live.Annotations)
	}
	if _, ok := live.Annotations["rollgate.dev/cached-template-revision"]; ok {
		t.Errorf("the cache's own annotation reached the API server: %v", live.Annotations)
	}
}

// TestCacheStripsALastAppliedConfiguration checks that a cached Rollout
// has no kubectl last-applied configuration (a second copy of its spec)
// while keeping its other annotations, and that rollgate's write of a
// Rollout, a merge patch between two cached copies, leaves the annotation
// on the API server: kubectl apply and Argo CD's client-side diff read it.
func TestCacheStripsALastAppliedConfiguration(t *testing.T) {
	ctx, c, startCache := startAPIServer(t)
	ro := rollouttest.GatedRollout(t, "default", "web", nil)
	ro.Annotations = map[string]string{lastApplied: `{"apiVersion":"rollgate.dev/v1alpha1","kind":"Rollout"}`, "team": "web"}
	if err := c.Create(ctx, ro); err != nil {
		t.Fatal(err)
	}

	cached := startCache(nil)
	var got v1alpha1.Rollout
	if err := cached.Get(ctx, client.ObjectKeyFromObject(ro), &got); err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Annotations[lastApplied]; ok || got.Annotations["team"] != "web" || len(got.ManagedFields) != 0 {
		t.Errorf("cached Rollout: annotations %v, %d managedFields; want team=web alone and none", got.Annotations, len(got.ManagedFields))
	}

	// rollgate's write: a merge patch from the cached copy.
	base := got.DeepCopy()
	got.Annotations["rollgate.dev/test"] = "1"
	if err := c.Patch(ctx, &got, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		t.Fatal(err)
	}
	var live v1alpha1.Rollout
	if err := c.Get(ctx, client.ObjectKeyFromObject(ro), &live); err != nil {
		t.Fatal(err)
	}
	if live.Annotations[lastApplied] != ro.Annotations[lastApplied] || live.Annotations["rollgate.dev/test"] != "1" {
		t.Errorf("the API server's Rollout after a patch from the cache: annotations %v; want the last-applied configuration kept", live.Annotations)
	}
}

// TestCacheOptionsOneEntryPerKind: the cache's per-kind options are a map
// keyed by pointer, and two keys of one kind are taken at random, one on
// each start. So it was when the Rollout's transform went in beside the
// shard's selector: half the starts of a shard cached every Rollout, and
// the instances released each other's.
func TestCacheOptionsOneEntryPerKind(t *testing.T) {
	scheme, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	shard, err := ParseWatchSelector("sharding.fluxcd.io/key in (shard1)")
	if err != nil {
		t.Fatal(err)
	}
	for _, sel := range []labels.Selector{nil, shard} {
		seen := map[string]bool{}
		for obj, o := range cacheOptions("rollgate-system", sel, watchScope{}).ByObject {
			gvk, err := apiutil.GVKForObject(obj, scheme)
			if err != nil {
				t.Fatal(err)
			}
			if seen[gvk.String()] {
				t.Errorf("shard %v: two cache entries for %s", sel, gvk)
			}
			seen[gvk.String()] = true
			if gvk.Kind == "Rollout" && (o.Transform == nil || (sel != nil && o.Label == nil)) {
				t.Errorf("shard %v: the Rollouts' cache entry has transform %t and selector %v", sel, o.Transform != nil, o.Label)
			}
		}
	}
}

// TestShardCachesItsRolloutsAlone: a shard's cache holds the Rollouts its
// selector names, stripped, and no other.
func TestShardCachesItsRolloutsAlone(t *testing.T) {
	ctx, c, startCache := startAPIServer(t)
	for name, shard := range map[string]string{"web": "", "cart": "shard1", "pay": "shard2"} {
		ro := rollouttest.GatedRollout(t, "default", name, nil)
		ro.Annotations = map[string]string{lastApplied: "{}"}
		if shard != "" {
			ro.Labels = map[string]string{"sharding.fluxcd.io/key": shard}
		}
		if err := c.Create(ctx, ro); err != nil {
			t.Fatal(err)
		}
	}
	shard, err := ParseWatchSelector("sharding.fluxcd.io/key in (shard1)")
	if err != nil {
		t.Fatal(err)
	}
	var list v1alpha1.RolloutList
	if err := startCache(shard).List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "cart" {
		names := []string{}
		for _, ro := range list.Items {
			names = append(names, ro.Name)
		}
		t.Fatalf("shard1's cache holds the Rollouts %v, want cart alone", names)
	}
	if _, ok := list.Items[0].Annotations[lastApplied]; ok {
		t.Errorf("shard1's cached Rollout keeps its last-applied configuration")
	}
}

// TestFieldIndexesArePerNamespace checks the manager's cache files an
// object in a field index under its namespace only (not also under a key
// for all namespaces, which no lookup of rollgate's reads: half of the
// indexes' memory), that a lookup in one namespace finds what it did, and
// that a lookup across all namespaces by a field fails, naming the fix,
// instead of finding nothing.
func TestFieldIndexesArePerNamespace(t *testing.T) {
	ctx, c, startCache := startAPIServer(t)
	for _, ns := range []string{"shop", "blog"} {
		rollouttest.MustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		rollouttest.MustCreate(t, c, rig.Rollout{Name: "web", Namespace: ns, Steps: []string{`{replicas: 1, pause: {}}`}}.Object(t))
	}
	cached := startCache(nil, func(cached cache.Cache) error { return workload.IndexRollouts(ctx, cached) })

	var list v1alpha1.RolloutList
	byWorkload := client.MatchingFields{workload.RolloutWorkloadIndex: workload.WorkloadKey("Deployment", "web")}
	if err := cached.List(ctx, &list, client.InNamespace("shop"), byWorkload); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Namespace != "shop" {
		t.Fatalf("Rollouts of Deployment web in shop: %d, want shop's alone", len(list.Items))
	}
	err := cached.List(ctx, &list, byWorkload)
	if err == nil || !strings.Contains(err.Error(), "client.InNamespace") {
		t.Fatalf("a list by field across all namespaces: %v, want an error naming client.InNamespace", err)
	}

	inf, err := cached.GetInformer(ctx, &v1alpha1.Rollout{})
	if err != nil {
		t.Fatal(err)
	}
	keys := inf.(interface{ GetIndexer() toolscache.Indexer }).GetIndexer().ListIndexFuncValues("field:" + workload.RolloutWorkloadIndex)
	slices.Sort(keys)
	want := []string{"blog/" + workload.WorkloadKey("Deployment", "web"), "shop/" + workload.WorkloadKey("Deployment", "web")}
	if !slices.Equal(keys, want) {
		t.Fatalf("keys of the index: %q, want %q (one per namespace, none for all namespaces)", keys, want)
	}
}
