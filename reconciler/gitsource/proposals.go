package gitsource

import (
	"context"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/rollgate/rollgate/gitsync"
)

// A gate's approval branch is pushed by its repository's proposer, not
// by the Rollout's reconcile. Proposing is several exchanges with the Git
// server (read the tracked branch and the branch, push it, list and
// delete the branches of earlier gates); done in the reconcile, it held
// one of the few Rollout workers for all of them, and its clone's lock
// for each, so that in a wave of approvals the woken Rollouts waited for
// a worker and the fetch that wakes them waited behind the pushes. The
// proposer pushes one branch at a time on a clone of its own (not the
// status writer's: see Pool.open), the reconcile asks it for the branch of its gate (Propose) and
// records it once it is pushed; the Rollout is woken then.

// Proposal is the approval branch one gate waits for.
type Proposal struct {
	// Tracked is the branch the approval is merged into; Path the
	// Rollout's manifest on it.
	Tracked, Path string
	Approval      gitsync.Approval
	// Live are the Rollout's stable and canary revisions: the branch's
	// commit prunes spec.approvals to them.
	Live []string
}

func (p Proposal) equal(q Proposal) bool {
	return p.Tracked == q.Tracked && p.Path == q.Path && p.Approval == q.Approval && slices.Equal(p.Live, q.Live)
}

// Proposed is the outcome of a proposal.
type Proposed struct {
	proposal Proposal
	// Branch is the pushed approval branch; Approved says the tracked
	// branch already holds the approval (no branch is needed).
	Branch   string
	Approved bool
	// Err says why the branch, or the removal of the branches of earlier
	// gates, failed (Branch is set when only the removal did).
	Err error
}

// proposer pushes the approval branches of one repository's gates, one
// at a time, in the order they were asked for.
type proposer struct {
	clone *gitsync.Repository
	// done gets the Rollouts whose proposal ended.
	done *notifier

	mu sync.Mutex
	// order and waiting are the proposals not yet started; running is
	// the one under way; results the ended ones not yet taken by ask.
	order   []types.NamespacedName
	waiting map[types.NamespacedName]Proposal
	running map[types.NamespacedName]Proposal
	results map[types.NamespacedName]Proposed
	wake    chan struct{}
}

func newProposer(clone *gitsync.Repository, done *notifier) *proposer {
	return &proposer{
		clone: clone, done: done,
		waiting: map[types.NamespacedName]Proposal{}, running: map[types.NamespacedName]Proposal{},
		results: map[types.NamespacedName]Proposed{}, wake: make(chan struct{}, 1),
	}
}

// ask returns the outcome of proposal p of Rollout key once it has ended
// (ok), and forgets it: the Rollout records it in its status. Until then
// it queues p, once, and reports !ok; the Rollout is notified when it
// ends. A result for another proposal of key (an earlier gate) is
// dropped.
func (q *proposer) ask(key types.NamespacedName, p Proposal) (Proposed, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if res, ok := q.results[key]; ok {
		delete(q.results, key)
		if res.proposal.equal(p) {
			return res, true
		}
	}
	if r, ok := q.running[key]; ok && r.equal(p) {
		return Proposed{}, false
	}
	if _, queued := q.waiting[key]; !queued {
		q.order = append(q.order, key)
	}
	q.waiting[key] = p
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return Proposed{}, false
}

// forget drops what the proposer holds for a Rollout that is gone.
func (q *proposer) forget(key types.NamespacedName) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.waiting, key)
	delete(q.results, key)
}

// start proposes until ctx ends; the Rollouts whose proposals were still
// to come are notified then, to ask the repository that replaces this one.
func (q *proposer) start(ctx context.Context) {
	for {
		key, p, ok := q.next()
		if !ok {
			select {
			case <-ctx.Done():
				q.mu.Lock()
				keys := q.order
				q.order, q.waiting = nil, map[types.NamespacedName]Proposal{}
				q.mu.Unlock()
				q.notify(keys...)
				return
			case <-q.wake:
				continue
			}
		}
		res := pushApprovalBranch(ctx, q.clone, key, p)
		q.mu.Lock()
		delete(q.running, key)
		q.results[key] = res
		q.mu.Unlock()
		q.notify(key)
	}
}

func (q *proposer) notify(keys ...types.NamespacedName) {
	if q.done != nil {
		q.done.notify(keys...)
	}
}

// next takes the oldest waiting proposal and marks it running.
func (q *proposer) next() (types.NamespacedName, Proposal, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.order) > 0 {
		key := q.order[0]
		q.order = q.order[1:]
		if p, ok := q.waiting[key]; ok {
			delete(q.waiting, key)
			q.running[key] = p
			return key, p, true
		}
	}
	return types.NamespacedName{}, Proposal{}, false
}

// pushApprovalBranch pushes the approval branch of proposal p of Rollout
// key, its commit pruning spec.approvals to the live revisions, and
// removes the Rollout's approval branches of earlier gates, which can no
// longer approve anything.
func pushApprovalBranch(ctx context.Context, clone *gitsync.Repository, key types.NamespacedName, p Proposal) Proposed {
	res := Proposed{proposal: p}
	out, err := gitsync.ProposeApproval(ctx, clone, p.Tracked, p.Path, key.Namespace, key.Name, p.Approval, "rollgate", p.Live...)
	if err != nil || out.AlreadyApproved {
		res.Approved, res.Err = out.AlreadyApproved, err
		return res
	}
	res.Branch = out.Branch
	keep := func(b string) bool { return b == out.Branch }
	_, res.Err = gitsync.CleanupApprovalBranches(ctx, clone, key.Namespace, key.Name, keep)
	return res
}
