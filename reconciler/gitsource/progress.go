package gitsource

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
)

// forgetRollout drops the Rollout from the writer (see
// gitsync.Writer.Forget), the proposer and the revert cleanups of every
// open repository.
func (g *Pool) forgetRollout(namespace, name string) {
	g.owned.Lock()
	defer g.owned.Unlock()
	g.mu.Lock()
	writers := make([]*gitsync.Writer, 0, len(g.entries))
	proposers := make([]*proposer, 0, len(g.entries))
	key := types.NamespacedName{Namespace: namespace, Name: name}
	for _, e := range g.entries {
		e.reverts.forget(key)
		if e.writer != nil {
			writers = append(writers, e.writer)
		}
		if e.proposer != nil {
			proposers = append(proposers, e.proposer)
		}
	}
	g.mu.Unlock()
	for _, w := range writers {
		w.Forget(namespace, name)
	}
	for _, p := range proposers {
		p.forget(key)
	}
}

// QueueProgress queues a Rollout's progress, whose status was just
// persisted, for e's status branch, unless the Rollout has left this
// instance's cache: relabelled to another shard while this reconcile ran,
// its file is the other shard's to write, and a state queued after
// forgetRollout would be written over the other shard's. The cache drops
// the Rollout before its delete handler (forgetRollout) runs, and both
// hold the pool's owned: either the read below misses it, or the Forget
// comes after the Enqueue.
func (e *Repo) QueueProgress(ctx context.Context, cache client.Reader, st gitsync.RolloutState) {
	if e == nil || e.writer == nil {
		return
	}
	e.pool.owned.Lock()
	defer e.pool.owned.Unlock()
	if err := cache.Get(ctx, client.ObjectKey{Namespace: st.Namespace, Name: st.Name}, &v1alpha1.Rollout{}); apierrors.IsNotFound(err) {
		return
	}
	e.writer.Enqueue(st)
}
