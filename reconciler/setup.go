package reconciler

import (
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/reconciler/gitsource"
	"github.com/rollgate/rollgate/reconciler/rollout"
)

// Setup registers the Rollout and Repository controllers, the admission
// webhook and the Git push endpoint with mgr. The webhook registers the index of Rollouts by
// workload (workload.RolloutWorkloadIndex) that the controller uses too.
func Setup(mgr ctrl.Manager, opts Options) error {
	return setup(mgr, opts, nil, watchScope{}, nil)
}

// setup is Setup with the reader the admission webhooks read Rollouts
// from; nil means the manager's cached client (an instance that is not a
// shard: its cache holds every Rollout), and the namespace the instance
// watches (its webhooks are sent only that namespace's requests), and
// the shard's selector (nil: not a shard).
func setup(mgr ctrl.Manager, opts Options, admission client.Reader, scope watchScope, shard labels.Selector) error {
	// The Git source: the pool of open repositories, the Repository
	// controller and the push endpoint.
	git, err := gitsource.Setup(mgr, opts.gitOptions())
	if err != nil {
		return err
	}
	if err := setupWebhook(mgr, opts, admission, scope); err != nil {
		return err
	}
	// The Rollout controller opens Repositories through the Git source.
	ro := opts.rolloutOptions()
	if shard != nil {
		ro.Shard, ro.AllRollouts = shard, admission
	}
	return rollout.Setup(mgr, ro, git)
}
