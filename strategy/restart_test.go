package strategy

import (
	"reflect"
	"testing"
	"time"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/strategy/verdict"
)

// world is a small cluster that carries out plans the way the reconciler
// and its adapters would: pods are ready as soon as they are asked for, the
// routers apply a new target at once and confirm it on the next ask, the
// step analysis succeeds on its second look, and a human approves a gate
// after it has waited two reconciles.
type world struct {
	t        *testing.T
	spec     *v1alpha1.RolloutSpec
	now      time.Time
	replicas int32
	frozen   bool
	canary   int32 // pods of v2 while frozen

	routes    Traffic
	routeRevs [2]string
	changedAt time.Time

	analysisLooks int
	gateWaits     map[int32]int
	approvals     []v1alpha1.Approval
	preApproved   bool
}

func newWorld(t *testing.T, spec *v1alpha1.RolloutSpec) *world {
	return &world{t: t, spec: spec, now: t0, replicas: 10, frozen: true,
		routes: Traffic{Mode: TrafficOriginal}, gateWaits: map[int32]int{}}
}

// ensure applies a traffic target and reports whether it was already there.
func (w *world) ensure(tr Traffic, s *v1alpha1.RolloutStatus) bool {
	revs := [2]string{s.CanaryRevision, s.StableRevision}
	if tr.Mode == TrafficOriginal {
		revs = [2]string{}
	}
	if tr.Equal(w.routes) && revs == w.routeRevs {
		return true
	}
	w.routes, w.routeRevs, w.changedAt = tr, revs, w.now
	return false
}

func (w *world) observe(s *v1alpha1.RolloutStatus) Observed {
	obs := Observed{Replicas: w.replicas, UpdateRevision: "v2", StableRevision: "v1", Held: w.frozen,
		Approvals: w.approvals, TrafficChangedAt: w.changedAt}
	if w.frozen {
		obs.Pods = map[string]PodCounts{"v1": {w.replicas - w.canary, w.replicas - w.canary}, "v2": {w.canary, w.canary}}
	} else {
		obs.Pods = map[string]PodCounts{"v2": {w.replicas, w.replicas}}
	}
	obs.TrafficDone = w.ensure(DesiredTraffic(w.spec, s), s)
	if s.CurrentStepState == v1alpha1.StepMetricsAnalysis {
		w.analysisLooks++
		obs.StepAnalysis.Phase = verdict.PhaseRunning
		if w.analysisLooks > 1 {
			obs.StepAnalysis.Phase = verdict.PhaseSuccessful
		}
	} else {
		w.analysisLooks = 0
	}
	return obs
}

func (w *world) carryOut(p Plan) {
	switch p.Workload {
	case WorkloadScale:
		w.canary = p.CanaryReplicas
	case WorkloadRollback:
		w.canary = 0
	case WorkloadRelease:
		w.frozen = false
	}
	w.ensure(p.Traffic, &p.Status)
}

// human approves a gate once it has been waiting for two reconciles.
func (w *world) human(p Plan) {
	if a := p.Status.AwaitingApproval; a != nil && !w.preApproved {
		w.gateWaits[a.Step]++
		if w.gateWaits[a.Step] == 2 {
			x := approval(a.Revision, a.Step)
			x.Attempt = a.Attempt
			w.approvals = append(w.approvals, x)
		}
	}
}

// tick moves the clock: to the end of a timed pause, else by a second (a
// watch event wakes the reconciler as soon as pods or routes change).
func (w *world) tick(p Plan) {
	step := time.Second
	if p.Conditions.Progressing.Reason == v1alpha1.ReasonPausing {
		step = p.RequeueAfter
	}
	w.now = w.now.Add(step)
}

// reconcile is one reconcile: observe, plan (twice, to check that planning
// is deterministic), carry out. It returns the plan.
func (w *world) reconcile(s *v1alpha1.RolloutStatus) Plan {
	w.t.Helper()
	obs := w.observe(s)
	p := decide(w.t, w.spec, s, obs, w.now)
	if again := decide(w.t, w.spec, s, obs, w.now); !reflect.DeepEqual(p, again) {
		w.t.Fatalf("the same inputs gave two plans:\n%+v\n%+v", p, again)
	}
	w.checkGates(s, &p.Status, obs)
	return p
}

// checkGates fails when a step with a gate was left without its approval.
func (w *world) checkGates(from, to *v1alpha1.RolloutStatus, obs Observed) {
	w.t.Helper()
	steps, err := ResolveSteps(w.spec, w.replicas)
	if err != nil || from.CanaryRevision != to.CanaryRevision {
		return
	}
	for i := from.CurrentStepIndex; i >= 1 && int(i) <= len(steps); i++ {
		leaves := i < to.CurrentStepIndex || (i == to.CurrentStepIndex && rank(to.CurrentStepState) > rank(v1alpha1.StepPaused))
		if !leaves {
			break
		}
		if steps[i-1].Gate && !hasApproval(obs.Approvals, to.CanaryRevision, to.Attempt, i) {
			w.t.Fatalf("step %d's gate was passed without an approval (%+v -> %+v)", i, whereOf(from), whereOf(to))
		}
	}
}

// hasApproval reports whether as approve step of attempt of rev, an unset
// attempt meaning attempt 1 (written out here rather than calling
// Approval.Approves, so the test checks the planner independently).
func hasApproval(as []v1alpha1.Approval, rev string, attempt, step int32) bool {
	for _, a := range as {
		if a.Revision == rev && a.Step == step && max(a.Attempt, 1) == max(attempt, 1) {
			return true
		}
	}
	return false
}

func rank(s v1alpha1.StepState) int {
	for i, x := range []v1alpha1.StepState{v1alpha1.StepUpgrade, v1alpha1.StepTrafficRouting, v1alpha1.StepMetricsAnalysis,
		v1alpha1.StepPaused, v1alpha1.StepReady, v1alpha1.StepCompleted} {
		if s == x {
			return i
		}
	}
	return -1
}

// crash says what a controller crash loses at reconcile n: the status
// write after the actions were carried out, or (writing status first) the
// actions after the status was written.
type crash func(n int) (loseStatus, loseActions bool)

// run drives a release of v2 to the end and returns the states its plans
// went through.
func (w *world) run(c crash) (visited []where, elapsed time.Duration) {
	st := idleAt("v1")
	for n := 0; n < 300; n++ {
		p := w.reconcile(st)
		loseStatus, loseActions := c(n)
		if !loseActions {
			w.carryOut(p)
		}
		w.human(p)
		w.tick(p)
		if len(visited) == 0 || visited[len(visited)-1] != whereOf(&p.Status) {
			visited = append(visited, whereOf(&p.Status))
		}
		if loseStatus {
			continue
		}
		next := persist(p)
		if next.CanaryRevision == st.CanaryRevision && st.CurrentStepIndex > 0 && next.CurrentStepState != "" &&
			(next.CurrentStepIndex < st.CurrentStepIndex ||
				(next.CurrentStepIndex == st.CurrentStepIndex && rank(next.CurrentStepState) < rank(st.CurrentStepState))) {
			w.t.Fatalf("went backwards: %+v -> %+v", whereOf(st), whereOf(next))
		}
		if next.CurrentStepIndex > st.CurrentStepIndex+1 && st.CurrentStepIndex > 0 {
			w.t.Fatalf("advanced two steps at once: %+v -> %+v", whereOf(st), whereOf(next))
		}
		st = next
		if st.Phase == v1alpha1.PhaseHealthy && st.StableRevision == "v2" {
			return visited, w.now.Sub(t0)
		}
	}
	w.t.Fatalf("the release did not finish; visited %+v", visited)
	return nil, 0
}

func contains(ws []where, w where) bool {
	for _, x := range ws {
		if x == w {
			return true
		}
	}
	return false
}

func TestSimulatedRelease(t *testing.T) {
	for name, c := range map[string]crash{
		"no crash":                      func(int) (bool, bool) { return false, false },
		"status lost after acting":      func(n int) (bool, bool) { return n%7 == 3 || n%11 == 5, false },
		"five status writes lost":       func(n int) (bool, bool) { return n >= 2 && n < 7, false },
		"actions lost after the status": func(n int) (bool, bool) { return false, n%3 == 1 },
		"both":                          func(n int) (bool, bool) { return n%7 == 3, n%5 == 1 },
	} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t, echoSpec())
			visited, elapsed := w.run(c)
			gate := where{v1alpha1.PhaseProgressing, 1, v1alpha1.StepPaused}
			pause := where{v1alpha1.PhaseProgressing, 2, v1alpha1.StepPaused}
			if !contains(visited, gate) || !contains(visited, pause) {
				t.Errorf("visited %+v, want step 1's gate and step 2's pause", visited)
			}
			if elapsed < 10*time.Minute {
				t.Errorf("the release took %s, less than step 2's 10m pause", elapsed)
			}
			if len(w.approvals) != 1 || w.approvals[0].Step != 1 {
				t.Errorf("approvals %+v, want one for step 1", w.approvals)
			}
		})
	}
}

func TestPreApprovedGatesStillRunEveryStep(t *testing.T) {
	w := newWorld(t, echoSpec())
	w.preApproved = true
	w.approvals = []v1alpha1.Approval{approval("v2", 1), approval("v2", 2), approval("v2", 3)}
	visited, elapsed := w.run(func(int) (bool, bool) { return false, false })
	for _, want := range []where{
		{v1alpha1.PhaseProgressing, 2, v1alpha1.StepUpgrade},
		{v1alpha1.PhaseProgressing, 2, v1alpha1.StepMetricsAnalysis},
		{v1alpha1.PhaseProgressing, 2, v1alpha1.StepPaused},
		{v1alpha1.PhaseProgressing, 3, v1alpha1.StepCompleted},
	} {
		if !contains(visited, want) {
			t.Errorf("visited %+v, missing %+v", visited, want)
		}
	}
	if elapsed < 10*time.Minute {
		t.Errorf("the release took %s, less than step 2's 10m pause", elapsed)
	}
}

func TestWaitingIsAFixedPoint(t *testing.T) {
	tests := map[string]struct {
		status *v1alpha1.RolloutStatus
		obs    Observed
	}{
		"gate without approval": {releasing(1, v1alpha1.StepPaused, -time.Hour), observed(10, 1)},
		"gate with wrong approvals": {releasing(1, v1alpha1.StepPaused, -time.Hour), func() Observed {
			o := observed(10, 1)
			o.Approvals = []v1alpha1.Approval{approval("v3", 1), approval("v2", 2)}
			return o
		}()},
		"analysis running": {releasing(2, v1alpha1.StepMetricsAnalysis, -time.Minute), func() Observed {
			o := observed(10, 4)
			o.StepAnalysis.Phase = verdict.PhaseRunning
			return o
		}()},
		"failed and rolled back": {failedStatus(v1alpha1.ReasonAborted), observed(10, 0)},
		"healthy":                {idleAt("v2"), atRevision(10, "v2")},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			first := decide(t, echoSpec(), tt.status, tt.obs, t0)
			st := persist(first)
			for i := range 5 {
				p := decide(t, echoSpec(), st, tt.obs, t0)
				if !reflect.DeepEqual(persist(p), st) {
					t.Fatalf("call %d changed the status:\n%+v\n%+v", i+2, st, p.Status)
				}
				if !p.Event.IsZero() {
					t.Fatalf("call %d emitted %+v without a transition", i+2, p.Event)
				}
			}
		})
	}
}

func BenchmarkPlan(b *testing.B) {
	spec := echoSpec()
	st := releasing(2, v1alpha1.StepTrafficRouting, 0)
	obs := observed(10, 4)
	obs.Approvals = []v1alpha1.Approval{approval("v2", 1)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decide(spec, st, obs, t0); err != nil {
			b.Fatal(err)
		}
	}
}
