package gitsource

import (
	"context"
	"fmt"
	"net"

	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/gitpush"
)

// repositoryIndex indexes Rollouts by the Repository their spec.git names.
const repositoryIndex = "spec.git.repository"

// Setup registers the Git source with mgr: the pool of open repositories
// (a Runnable), the index of Rollouts by Repository that finds the gates
// on a branch, the Repository controller and, with opts.PushAddr, the
// push endpoint. The Rollout controller gets the pool it returns.
func Setup(mgr ctrl.Manager, opts Options) (*Pool, error) {
	ctx := context.Background()
	if err := mgr.GetFieldIndexer().IndexField(ctx, &v1alpha1.Rollout{}, repositoryIndex, func(o client.Object) []string {
		if g := o.(*v1alpha1.Rollout).Spec.Git; g != nil {
			return []string{g.Repository}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	g := NewPool(mgr.GetAPIReader(), opts)
	g.rollouts, g.cached = mgr.GetClient(), mgr.GetClient()
	if err := mgr.Add(g); err != nil {
		return nil, err
	}
	if err := forgetOnLeave(ctx, mgr.GetCache(), g); err != nil {
		return nil, err
	}
	if err := (&RepositoryReconciler{Client: mgr.GetClient(), git: g}).setupWithManager(mgr); err != nil {
		return nil, err
	}
	// A push makes the Repository controller fetch at once; the fetch
	// wakes the Rollouts whose approval it brought (wakeGated).
	if opts.PushAddr != "" && opts.PushAddr != "0" {
		push := &gitpush.Server{Addr: opts.PushAddr, Repositories: mgr.GetClient(), Secrets: mgr.GetAPIReader(), Stale: g.MarkStale, Interval: gitpush.DefaultInterval}
		if opts.Lease != nil {
			// Another replica forwards a push to the leader's pod.
			_, port, err := net.SplitHostPort(opts.PushAddr)
			if err != nil {
				return nil, fmt.Errorf("push webhook address %q: %w", opts.PushAddr, err)
			}
			push.Elected = mgr.Elected()
			push.Leader = leaderPushEndpoint(mgr.GetAPIReader(), *opts.Lease, port)
		}
		if err := mgr.Add(push); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// Woken are the Rollouts to reconcile because a fetch changed the
// manifest they wait on at a gate, or their Repository could no longer
// be opened; they enter the queue at priority.
func (g *Pool) Woken(priority int) source.Source { return g.moved.source(priority) }

// Written are the Rollouts whose latest progress a flush put in Git (their
// GitSynced turns True).
func (g *Pool) Written(priority int) source.Source { return g.written.source(priority) }

// Proposed are the Rollouts whose approval branch was pushed, or failed to
// be.
func (g *Pool) Proposed(priority int) source.Source { return g.proposed.source(priority) }

// forgetOnLeave drops a Rollout from this instance's Git writers when it
// leaves the cache: deleted, or relabelled into another shard (the API
// server ends a selector's watch of an object that stops matching with a
// delete). Its status file stays on the branch for the instance that
// releases it now; without this, the next flush here would write the
// last state this instance saw over that instance's.
func forgetOnLeave(ctx context.Context, c cache.Cache, g *Pool) error {
	inf, err := c.GetInformer(ctx, &v1alpha1.Rollout{})
	if err != nil {
		return fmt.Errorf("Rollout informer: %w", err)
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
		if gone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = gone.Obj
		}
		if ro, ok := obj.(*v1alpha1.Rollout); ok {
			g.forgetRollout(ro.Namespace, ro.Name)
		}
	}})
	return err
}
