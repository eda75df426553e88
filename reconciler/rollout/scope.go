package rollout

import (
	"time"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/reconciler/analysis"
	"github.com/rollgate/rollgate/reconciler/workload"
	"github.com/rollgate/rollgate/strategy"
	"github.com/rollgate/rollgate/strategy/rules"
	"github.com/rollgate/rollgate/strategy/verdict"
	"github.com/rollgate/rollgate/traffic"
)

// scope is one reconcile of a Rollout. The observe… phases fill in what
// they read; the act… phases add what they did and what the world
// answered. Nothing in it is a condition: updateStatus alone turns a
// scope into the Rollout's conditions.
type scope struct {
	ro  *v1alpha1.Rollout
	now time.Time

	// What the observe… phases read.

	// adapter moves the workload; workload is what it saw.
	adapter  workload.Adapter
	workload workload.Observation
	// router carries the traffic of every trafficRouting; routerErr says
	// why it could not be built.
	router    traffic.Router
	routerErr error
	// missing names the objects and scripts a release needs that do not
	// exist, each with the field that names it.
	missing []string
	// repository is the Repository resource spec.git names; git is its
	// open repository (nil without spec.git, or when it cannot be opened).
	repository *v1alpha1.Repository
	git        gitRepository
	// gitApprovals are the approvals found on the tracked branch;
	// gitReadErr says why Git could not be read.
	gitApprovals []v1alpha1.Approval
	gitReadErr   error
	// approvalVerdict judges the approval of the waiting gate found on the
	// tracked branch, when the Repository restricts approvals.
	approvalVerdict *gitsync.Verdict
	// analysis is what the metric providers answered.
	analysis analysisSeen
	// fleet judges spec.fleet.waitFor from the other clusters' progress
	// in Git, one gate per wait.
	fleet []strategy.FleetGate
	// freezes are the freezes and windows that hold the Rollout now.
	freezes []rules.Hold
	// budgets are the budgets of the release rules covering the Rollout.
	budgets []coveringBudget
	// group is the lockstep group of spec.group: the other members;
	// groupInvalid says why the group cannot be released (a member in
	// another shard).
	group        *strategy.Group
	groupInvalid *strategy.SpecError

	// What the act… phases did.

	// plan is the planner's answer; moved says the release moved (another
	// step, state, phase, revision or traffic).
	plan  *strategy.Plan
	moved bool
	// planAgain says the plans of this reconcile ran out (planRounds)
	// with a move the routers confirmed at once: the next reconcile plans
	// again right away, and the status waits for it (planAgain).
	planAgain bool
	// events are the plans' events, recorded when the reconcile ends.
	events []strategy.Event
	// traffic is the routers' last answer.
	traffic trafficAnswer
	// workloadDone is the adapter's answer to the plan's workload action.
	workloadDone bool
	// gitQueued says the progress goes to the status branch (gitState,
	// queued once the status is persisted); gitWriteErr why writing to
	// Git failed.
	gitQueued   bool
	gitState    *gitsync.RolloutState
	gitWriteErr error
	// failure is the error the reconcile stopped on, if any.
	failure *failure
	// replaced are the Rollout's versions before each status write
	// (ownWrites).
	replaced []string
}

// trafficAnswer is what the routers answered for the traffic last asked.
type trafficAnswer struct {
	// asked is the traffic sent to the routers; sent is false until then.
	asked strategy.Traffic
	sent  bool
	// done: the routers carry it; wait: a grace period to wait first.
	done bool
	wait time.Duration
	err  error
}

// analysisSeen is what the metric providers answered in this reconcile.
type analysisSeen struct {
	// ran is true when measurements were taken (a release in progress);
	// results are then the merged status.analysis.
	ran     bool
	results []v1alpha1.MetricResult
	// step is the outcome of the current step's analysis, if it runs;
	// background that of the release's background analysis.
	step       *verdict.Outcome
	background strategy.AnalysisResult
	// nextAt is when the next measurement is due.
	nextAt time.Time
	// invalid says why a template cannot be used (missing, bad condition).
	invalid *strategy.SpecError
	// jobs are the Jobs the Job checks need created or deleted
	// (actStartChecks).
	jobs []*analysis.Writes
}

// failure is an error a reconcile stopped on.
type failure struct {
	reason, message string
	// stalled: nothing changes without a change to the spec or the
	// cluster (no retry with backoff); final: Reconciling is dropped.
	stalled, final bool
}

func newScope(ro *v1alpha1.Rollout, now time.Time) *scope {
	return &scope{ro: ro, now: now}
}
