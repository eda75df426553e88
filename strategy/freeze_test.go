package strategy

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/strategy/rules"
)

var blackFriday = rules.Hold{Name: "black-friday", Steps: true,
	Why: "freeze black-friday (shop peak), merged in 1a2b3c4 by Jane <jane@example.com>"}

// A freeze keeps a new revision from being released: no pod, no traffic,
// the message names the freeze and who merged it; lifted, the release
// starts at step 1.
func TestFreezeHoldsTheStartOfARelease(t *testing.T) {
	spec := echoSpec()
	healthy := &v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseHealthy, StableRevision: "v1", CanaryRevision: "v1"}
	obs := observed(10, 0)
	obs.Freezes = []rules.Hold{blackFriday}

	p := decide(t, spec, healthy, obs, t0)
	if p.Workload != WorkloadKeep || p.Traffic.Mode != TrafficOriginal || p.Status.CanaryRevision != "v1" {
		t.Fatalf("workload %s traffic %+v canary %s: the release started under a freeze", p.Workload, p.Traffic, p.Status.CanaryRevision)
	}
	if p.Conditions.Progressing.Reason != v1alpha1.ReasonWaitingForFreeze || !strings.Contains(p.Status.Message, blackFriday.Why) {
		t.Fatalf("reason %q message %q, want WaitingForFreeze naming the freeze and who merged it", p.Conditions.Progressing.Reason, p.Status.Message)
	}
	if p.RequeueAfter == 0 || p.RequeueAfter > freezePoll {
		t.Fatalf("requeue after %s, want a look at Git within %s", p.RequeueAfter, freezePoll)
	}

	// A window that ends in 10 s: looked at again then.
	obs.Freezes = []rules.Hold{{Name: "weekend", Window: true, Steps: true, Why: "window weekend is closed", Until: at(10 * time.Second)}}
	if p := decide(t, spec, persist(p), obs, t0); p.RequeueAfter != 10*time.Second || p.Status.CanaryRevision != "v1" {
		t.Fatalf("requeue after %s canary %s, want held and looked at again when the window ends", p.RequeueAfter, p.Status.CanaryRevision)
	}
	// A freeze of Starts holds a start too.
	obs.Freezes = []rules.Hold{{Name: "starts", Why: "freeze starts"}}
	if p := decide(t, spec, persist(p), obs, t0); p.Status.CanaryRevision != "v1" {
		t.Fatalf("canary %s: a freeze of starts let a release start", p.Status.CanaryRevision)
	}

	obs.Freezes = nil
	p = decide(t, spec, persist(p), obs, at(time.Second))
	if w := whereOf(&p.Status); w.Phase != v1alpha1.PhaseProgressing || w.Index != 1 || p.Status.CanaryRevision != "v2" {
		t.Fatalf("at %+v canary %s, want the release of v2 at step 1 once the freeze is lifted", w, p.Status.CanaryRevision)
	}
}

// Under way, a freeze of steps holds the next step with the current one's
// pods and traffic; a freeze of starts does not. A release past its last
// gate finishes under a freeze.
func TestFreezeHoldsTheNextStepUntilPastTheLastGate(t *testing.T) {
	spec := routedSpec(
		step("5%", num(1), nil),
		step("40%", pct("40%"), gatePause()),
		step("100%", pct("100%"), nil),
	)
	obs := observed(10, 1)
	obs.Freezes = []rules.Hold{blackFriday}

	p := decide(t, spec, releasing(1, v1alpha1.StepReady, -time.Minute), obs, t0)
	if w := whereOf(&p.Status); w.Index != 1 || w.State != v1alpha1.StepReady {
		t.Fatalf("at %+v, want step 1 Ready, held by the freeze", w)
	}
	if p.CanaryReplicas != 1 || p.Traffic.Weight != 5 {
		t.Fatalf("canary replicas %d traffic %+v, want step 1's 1 pod and 5%%", p.CanaryReplicas, p.Traffic)
	}
	if p.Conditions.Progressing.Reason != v1alpha1.ReasonWaitingForFreeze ||
		!strings.Contains(p.Status.Message, "step 1/3 of v2 waits before step 2: "+blackFriday.Why) {
		t.Fatalf("reason %q message %q", p.Conditions.Progressing.Reason, p.Status.Message)
	}
	again := decide(t, spec, persist(p), obs, at(time.Hour))
	if w := whereOf(&again.Status); w.Index != 1 || w.State != v1alpha1.StepReady {
		t.Fatalf("at %+v an hour later, want still step 1", w)
	}

	obs.Freezes = []rules.Hold{{Name: "starts", Why: "freeze starts"}}
	if p := decide(t, spec, persist(again), obs, at(time.Hour)); whereOf(&p.Status).Index != 2 {
		t.Fatalf("at %+v, want step 2: a freeze of starts holds no step of a release under way", whereOf(&p.Status))
	}

	// Step 2's gate approved: nothing left to approve, so the freeze
	// lets the release go on to its end.
	obs.Freezes = []rules.Hold{blackFriday}
	obs.Approvals = []v1alpha1.Approval{approval("v2", 2)}
	obs.Pods = map[string]PodCounts{"v1": {Total: 6, Ready: 6}, "v2": {Total: 4, Ready: 4}}
	p = decide(t, spec, releasing(2, v1alpha1.StepReady, -time.Minute), obs, t0)
	if w := whereOf(&p.Status); w.Index != 3 {
		t.Fatalf("at %+v (%s), want step 3: past its last gate a release finishes under a freeze", w, p.Status.Message)
	}
}

// A release with no gate at all was approved by nobody: a freeze holds
// every step of it.
func TestFreezeHoldsEveryStepOfAReleaseWithoutGates(t *testing.T) {
	spec := routedSpec(step("5%", num(1), nil), step("100%", pct("100%"), nil))
	obs := observed(10, 1)
	obs.Freezes = []rules.Hold{blackFriday}
	st := releasing(1, v1alpha1.StepReady, -time.Minute)
	st.StepCount = 2
	p := decide(t, spec, st, obs, t0)
	if w := whereOf(&p.Status); w.Index != 1 || p.Conditions.Progressing.Reason != v1alpha1.ReasonWaitingForFreeze {
		t.Fatalf("at %+v reason %q, want step 1 held by the freeze", w, p.Conditions.Progressing.Reason)
	}
}

// Rollbacks, aborts, deletion and spec.disabled never wait for a freeze:
// the plan is the one made without it.
func TestFreezeNeverHoldsARollback(t *testing.T) {
	abort := echoSpec()
	abort.Abort = &v1alpha1.RevisionRequest{Revision: "v2", Reason: "bad"}
	disabled := echoSpec()
	disabled.Disabled = true
	deleting := observed(10, 1)
	deleting.Deleting = true
	cases := map[string]struct {
		spec *v1alpha1.RolloutSpec
		st   *v1alpha1.RolloutStatus
		obs  Observed
	}{
		"a failed release rolling back": {echoSpec(), failedStatus(v1alpha1.ReasonAnalysisFailed), observed(10, 1)},
		"an abort":                      {abort, releasing(2, v1alpha1.StepPaused, -time.Minute), observed(10, 1)},
		"spec.disabled":                 {disabled, releasing(2, v1alpha1.StepPaused, -time.Minute), observed(10, 1)},
		"deletion":                      {echoSpec(), releasing(2, v1alpha1.StepPaused, -time.Minute), deleting},
		"a rollback by template":        {echoSpec(), releasing(2, v1alpha1.StepPaused, -time.Minute), atRevision(10, "v1")},
	}
	for what, c := range cases {
		free := decide(t, c.spec, c.st, c.obs, t0)
		c.obs.Freezes = []rules.Hold{blackFriday}
		frozen := decide(t, c.spec, c.st, c.obs, t0)
		if !reflect.DeepEqual(free, frozen) {
			t.Errorf("%s: the freeze changed the plan:\n without %+v\n with    %+v", what, free, frozen)
		}
	}
}

// Over budget, a new revision waits before its first pod with its place
// in the queue in status.queue; the time it began to wait is kept while
// it waits. Given a place, it starts and the queue entry goes.
func TestBudgetQueuesTheStartOfARelease(t *testing.T) {
	spec := echoSpec()
	healthy := &v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseHealthy, StableRevision: "v1", CanaryRevision: "v1"}
	obs := observed(10, 0)
	obs.Queue = &QueueTicket{Budget: "shop", Position: 2, Why: "budget shop allows 1 release in flight: shop/cart"}

	p := decide(t, spec, healthy, obs, t0)
	if p.Workload != WorkloadKeep || p.Status.CanaryRevision != "v1" || StartsRelease(healthy, &p.Status) {
		t.Fatalf("workload %s canary %s: the release started over budget", p.Workload, p.Status.CanaryRevision)
	}
	if p.Conditions.Progressing.Reason != v1alpha1.ReasonWaitingForBudget ||
		p.Status.Message != "revision v2 waits to be released: budget shop allows 1 release in flight: shop/cart; position 2 in its queue" {
		t.Fatalf("reason %q message %q", p.Conditions.Progressing.Reason, p.Status.Message)
	}
	q := p.Status.Queue
	if q == nil || q.Budget != "shop" || q.Position != 2 || !q.Since.Time.Equal(t0) || p.RequeueAfter != budgetPoll {
		t.Fatalf("queue %+v requeue %s, want shop, position 2, since now, asked again in %s", q, p.RequeueAfter, budgetPoll)
	}
	obs.Queue.Position = 1
	p = decide(t, spec, persist(p), obs, at(time.Minute))
	if q := p.Status.Queue; q == nil || q.Position != 1 || !q.Since.Time.Equal(t0) {
		t.Fatalf("queue %+v a minute later, want position 1 and the first wait's time", q)
	}

	obs.Queue = nil
	before := persist(p)
	p = decide(t, spec, before, obs, at(2*time.Minute))
	if p.Status.Queue != nil || p.Status.CanaryRevision != "v2" || !StartsRelease(before, &p.Status) {
		t.Fatalf("queue %+v canary %s, want the release started and out of the queue", p.Status.Queue, p.Status.CanaryRevision)
	}
}
