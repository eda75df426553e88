package rollout

import (
	"testing"
	"time"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/strategy"
)

// A release whose workload is still moving is looked at again when its
// next pod becomes available (minReadySeconds after it became Ready: no
// object changes at that moment), and otherwise only after workloadPoll,
// since the watches bring every other change of its pods. At a gate, with
// nothing of the workload left to move, a pod becoming available sets no
// timer.
func TestRequeueAtTheNextAvailablePod(t *testing.T) {
	now := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	r := &Reconciler{}
	moving := func() *scope {
		sc := newScope(&v1alpha1.Rollout{Status: v1alpha1.RolloutStatus{
			Phase: v1alpha1.PhaseProgressing, CurrentStepState: v1alpha1.StepUpgrade,
		}}, now)
		sc.plan = &strategy.Plan{Workload: strategy.WorkloadScale}
		return sc
	}
	for _, c := range []struct {
		name  string
		setup func(sc *scope)
		want  time.Duration
	}{
		{"no pod waits to become available", func(*scope) {}, workloadPoll},
		{"a pod becomes available in 7 s", func(sc *scope) { sc.workload.AvailableAt = now.Add(7 * time.Second) }, 7 * time.Second},
		{"a pod became available already", func(sc *scope) { sc.workload.AvailableAt = now.Add(-time.Second) }, cacheLagPoll},
		{"a pod becomes available after the poll", func(sc *scope) { sc.workload.AvailableAt = now.Add(time.Hour) }, workloadPoll},
		{"at a gate", func(sc *scope) {
			sc.ro.Status.CurrentStepState = v1alpha1.StepPaused
			sc.plan.Workload, sc.workloadDone = strategy.WorkloadKeep, true
			sc.workload.AvailableAt = now.Add(7 * time.Second)
		}, releaseResync},
	} {
		sc := moving()
		c.setup(sc)
		if got := r.requeue(sc); got != c.want {
			t.Errorf("%s: requeue after %v, want %v", c.name, got, c.want)
		}
	}
}
