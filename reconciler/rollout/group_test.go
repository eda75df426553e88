package rollout

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/rig"
)

// TestGroupMemberInAnotherShardIsRefused: a shard sees only the Rollouts
// its selector matches, so a member of a lockstep group in another shard
// would be invisible to it and the others would release without it. The
// shard reads every Rollout (the admission view), finds it, and holds the
// release with a spec error naming the member and the fix; a group whose
// members are all its own is observed whole.
func TestGroupMemberInAnotherShardIsRefused(t *testing.T) {
	scheme := rig.NewScheme(t)
	member := func(name, shard string) *v1alpha1.Rollout {
		return &v1alpha1.Rollout{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", Labels: map[string]string{"sharding.fluxcd.io/key": shard}},
			Spec:       v1alpha1.RolloutSpec{Group: &v1alpha1.GroupReference{Name: "checkout"}},
		}
	}
	shard, err := labels.Parse("sharding.fluxcd.io/key in (shard1)")
	if err != nil {
		t.Fatal(err)
	}
	api, worker, far := member("api", "shard1"), member("worker", "shard1"), member("search", "shard2")
	index := func(o client.Object) []string {
		if g := o.(*v1alpha1.Rollout).Spec.Group; g != nil {
			return []string{g.Name}
		}
		return nil
	}
	// This shard's cache holds its own Rollouts; every Rollout is in the
	// admission view.
	own := fake.NewClientBuilder().WithScheme(scheme).WithIndex(&v1alpha1.Rollout{}, groupIndex, index).WithObjects(api.DeepCopy(), worker.DeepCopy()).Build()
	everyone := fake.NewClientBuilder().WithScheme(scheme).WithObjects(api.DeepCopy(), worker.DeepCopy(), far.DeepCopy()).Build()

	r := &Reconciler{Client: own, Options: Options{Shard: shard, AllRollouts: everyone}}
	sc := newScope(api.DeepCopy(), time.Now())
	if err := r.observeGroup(context.Background(), sc); err != nil {
		t.Fatal(err)
	}
	inv := sc.groupInvalid
	if inv == nil || inv.Field != "spec.group.name" || !strings.Contains(inv.Error(), "member search of group checkout is released by another shard") ||
		!strings.Contains(inv.Error(), "give them the same sharding label") {
		t.Fatalf("groupInvalid %v, want a spec error on spec.group.name naming search and the fix", inv)
	}
	if obs := observed(sc); obs.Invalid == nil {
		t.Fatalf("the planner is not told: Observed.Invalid is nil")
	}

	// search joins shard1: the group is whole.
	far.Labels["sharding.fluxcd.io/key"] = "shard1"
	everyone = fake.NewClientBuilder().WithScheme(scheme).WithObjects(api.DeepCopy(), worker.DeepCopy(), far.DeepCopy()).Build()
	r.Options.AllRollouts = everyone
	sc = newScope(api.DeepCopy(), time.Now())
	if err := r.observeGroup(context.Background(), sc); err != nil {
		t.Fatal(err)
	}
	if sc.groupInvalid != nil || sc.group == nil || len(sc.group.Members) != 1 || sc.group.Members[0].Name != "worker" {
		t.Fatalf("groupInvalid %v group %+v, want no error and worker as the other member this shard sees", sc.groupInvalid, sc.group)
	}
}
