package gitsource

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/reconciler/internal/rollouttest"
	"github.com/rollgate/rollgate/test/gitserver"
)

// TestProgressOfARolloutThatLeftTheShardIsNotQueued: a shard caches the
// Rollouts its label selector matches. Progress of a Rollout still in the
// cache is queued for the status branch; once the Rollout is relabelled
// to another shard and has left the cache (its delete handler made the
// Writer forget it), progress that a reconcile still running computes is
// dropped, so the old shard never writes a stale state over the new
// shard's file.
func TestProgressOfARolloutThatLeftTheShardIsNotQueued(t *testing.T) {
	ctx, cfg, c, scheme := rollouttest.StartAPIServer(t)

	const ns, key = "shard-leave", "sharding.fluxcd.io/key"
	rollouttest.MustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	ro := rollouttest.GatedRollout(t, ns, "cart", nil)
	ro.Labels = map[string]string{key: "shard1"}
	rollouttest.MustCreate(t, c, ro)

	// shard1's cache: only Rollouts labelled for shard1.
	ca, err := cache.New(cfg, cache.Options{Scheme: scheme, DefaultLabelSelector: labels.SelectorFromSet(labels.Set{key: "shard1"})})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.GetInformer(ctx, &v1alpha1.Rollout{}); err != nil {
		t.Fatal(err)
	}
	go func() { _ = ca.Start(ctx) }()
	if !ca.WaitForCacheSync(ctx) {
		t.Fatal("cache did not sync")
	}
	inCache := func() bool {
		return ca.Get(ctx, client.ObjectKeyFromObject(ro), &v1alpha1.Rollout{}) == nil
	}
	rollouttest.WaitFor(ctx, t, "cart in shard1's cache", inCache)

	srv := gitserver.Start(t, gitserver.Options{})
	url, err := srv.CreateRepo("app", map[string]string{"a": "a\n"})
	if err != nil {
		t.Fatal(err)
	}
	repo, err := gitsync.Open(gitsync.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	w, err := gitsync.NewWriter(repo, gitsync.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g := NewPool(c, Options{})
	e := &Repo{pool: g, writer: w}
	state := func(phase string) gitsync.RolloutState {
		return gitsync.RolloutState{Namespace: ns, Name: "cart", Phase: phase}
	}

	// In the shard: queued.
	e.QueueProgress(ctx, ca, state("Paused"))
	res, err := w.Flush(ctx)
	if err != nil || res.Commit == "" || w.WrittenAs(state("Paused")) != res.Commit {
		t.Fatalf("progress of a Rollout in the shard: flush %+v, %v; written as %q", res, err, w.WrittenAs(state("Paused")))
	}

	// Relabelled to shard2: gone from the cache, forgotten, and a state
	// computed by a reconcile that read it before is not queued.
	if err := c.Get(ctx, client.ObjectKeyFromObject(ro), ro); err != nil {
		t.Fatal(err)
	}
	ro.Labels[key] = "shard2"
	if err := c.Update(ctx, ro); err != nil {
		t.Fatal(err)
	}
	rollouttest.WaitFor(ctx, t, "cart gone from shard1's cache", func() bool { return !inCache() })
	g.forgetRollout(ns, "cart")
	e.QueueProgress(ctx, ca, state("Progressing"))
	if res, err := w.Flush(ctx); err != nil || len(res.Changed) > 0 {
		t.Fatalf("flush after the relabel = %+v, %v; want no state written", res, err)
	}
	if s, err := srv.ReadFile("app", gitsync.DefaultStatusBranch, ns+"/cart.yaml"); err != nil || !containsPhase(s, "Paused") {
		t.Fatalf("cart's file after the relabel (%v):\n%s\nwant the last state shard1 wrote while it owned cart", err, s)
	}
}

func containsPhase(file, phase string) bool {
	st, ok, err := gitsync.ParseStatus([]byte(file))
	return ok && err == nil && st.Phase == phase
}
