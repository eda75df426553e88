package rollout

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/reconciler/gitsource"
	"github.com/rollgate/rollgate/strategy"
)

// observeFleet judges spec.fleet.waitFor: it reads the status files the
// controllers of the other clusters write to the shared status branch and
// tells the planner, per wait, whether the upstream release reached the
// point asked for with the version this Rollout is about to release (the
// same container images), and after its bake time. It fails closed: when
// Git cannot be read, every gate is closed and says why.
func (r *Reconciler) observeFleet(ctx context.Context, sc *scope) {
	ro := sc.ro
	if ro.Spec.Fleet == nil || ro.Spec.Disabled || !ro.DeletionTimestamp.IsZero() {
		return
	}
	var states map[string]gitsource.FleetStatus
	var err error
	if sc.git == nil {
		err = fmt.Errorf("Repository %s/%s is not open: %v", ro.Namespace, ro.Spec.Git.Repository, sc.gitReadErr)
	} else {
		states, err = sc.git.FleetStates(ctx, sc.now)
	}
	self := ""
	if sc.repository != nil && sc.repository.Spec.Status.Cluster != "" {
		self = sc.repository.Spec.Status.Cluster + "/" + ro.Namespace + "/" + ro.Name
	}
	for _, w := range ro.Spec.Fleet.WaitFor {
		g := strategy.FleetGate{BeforeStep: 1}
		if w.BeforeStep != nil {
			g.BeforeStep = *w.BeforeStep
		}
		if err != nil {
			g.Why = fmt.Sprintf("cluster %s: cannot read its progress from Git: %v", w.Cluster, err)
		} else {
			u := upstream{wait: w, ro: ro, states: states, images: sc.workload.Images, now: sc.now, self: self}
			g.Open, g.Why, g.Until = u.judge()
		}
		sc.fleet = append(sc.fleet, g)
	}
}

// upstream is one spec.fleet.waitFor entry to judge against the status
// files of every cluster (states, keyed "<cluster>/<namespace>/<name>").
type upstream struct {
	wait   v1alpha1.FleetWait
	ro     *v1alpha1.Rollout
	states map[string]gitsource.FleetStatus
	images []string
	now    time.Time
	// self is this Rollout's own key in states ("" when its Repository
	// names no cluster): a wait that leads back to it is a cycle.
	self string
}

// upstreamName is the "<namespace>/<name>" a wait names.
func upstreamName(w v1alpha1.FleetWait, ro *v1alpha1.Rollout) string {
	if w.Rollout == "" {
		return ro.Namespace + "/" + ro.Name
	}
	if strings.Contains(w.Rollout, "/") {
		return w.Rollout
	}
	return ro.Namespace + "/" + w.Rollout
}

// judge reports whether the upstream release has released the images as
// far as the wait asks (and baked as long as it asks), why not, and when
// a bake ends.
func (u upstream) judge() (bool, string, time.Time) {
	w := u.wait
	key := w.Cluster + "/" + upstreamName(w, u.ro)
	who := fmt.Sprintf("cluster %s: %s", w.Cluster, upstreamName(w, u.ro))
	f, ok := u.states[key]
	if !ok {
		return false, who + " has no status in Git (is its Repository's spec.status.cluster " + w.Cluster + ", on the same status branch?)", time.Time{}
	}
	if f.Distrust != "" {
		return false, who + ": " + f.Distrust, time.Time{}
	}
	s := f.RolloutState
	want := strings.Join(u.images, ",")
	canary, stable := strings.Join(s.Canary.Images, ","), strings.Join(s.Stable.Images, ",")
	released := v1alpha1.RolloutPhase(s.Phase) == v1alpha1.PhaseHealthy && stable == want
	switch {
	case released && w.BakeTime != nil:
		if s.LastTransitionTime.IsZero() {
			return false, fmt.Sprintf("%s released %s but wrote no completion time to Git, so its bake time of %s cannot be counted", who, want, w.BakeTime.Duration), time.Time{}
		}
		end := s.LastTransitionTime.Add(w.BakeTime.Duration)
		if u.now.Before(end) {
			return false, fmt.Sprintf("%s released %s at %s; baking for %s, until %s", who, want,
				s.LastTransitionTime.UTC().Format(time.RFC3339), w.BakeTime.Duration, end.UTC().Format(time.RFC3339)), end
		}
		return true, "", time.Time{}
	case released:
		return true, "", time.Time{}
	case canary == want && v1alpha1.RolloutPhase(s.Phase) == v1alpha1.PhaseFailed:
		return false, fmt.Sprintf("%s: the release of %s failed there: %s", who, want, s.Message), time.Time{}
	case w.Step != nil && canary == want && reachedStep(s, int(*w.Step)):
		return true, "", time.Time{}
	}
	if cycle := u.cycle(key); cycle != "" {
		return false, fmt.Sprintf("%s waits for this Rollout in turn (%s): the waves form a cycle and none can start; remove one of these spec.fleet.waitFor entries", who, cycle), time.Time{}
	}
	switch {
	case canary == want && s.Step.Total > 0:
		return false, fmt.Sprintf("%s is at step %d/%d (%s) of %s, %s", who, s.Step.Current, s.Step.Total,
			s.Step.State, want, untilText(w)), time.Time{}
	case stable == want && v1alpha1.RolloutPhase(s.Phase) == v1alpha1.PhaseProgressing:
		// Every pod runs it; the declared routes are coming back.
		return false, fmt.Sprintf("%s is finishing the release of %s; %s", who, want, untilText(w)), time.Time{}
	case stable == "":
		return false, fmt.Sprintf("%s (%s) wrote no images to Git; %s", who, s.Phase, untilText(w)), time.Time{}
	}
	return false, fmt.Sprintf("%s runs %s (%s), not %s", who, stable, s.Phase, want), time.Time{}
}

// cycle follows the waits the status files record (WaitsFor) from the
// upstream at key and returns the path back to this Rollout, "" when
// there is none. It visits each release once (the graph is at most the
// status files on the branch).
func (u upstream) cycle(key string) string {
	if u.self == "" {
		return ""
	}
	seen := map[string]bool{}
	var walk func(k string, path []string) []string
	walk = func(k string, path []string) []string {
		if k == u.self {
			return path
		}
		if seen[k] {
			return nil
		}
		seen[k] = true
		for _, next := range u.states[k].WaitsFor {
			if p := walk(next, append(path, next)); p != nil {
				return p
			}
		}
		return nil
	}
	if p := walk(key, []string{u.self, key}); p != nil {
		return strings.Join(p, " waits for ")
	}
	return ""
}

// reachedStep reports whether a release brought up step's pods and
// traffic: it analyses, pauses or waits at that step, or is past it.
func reachedStep(s gitsync.RolloutState, step int) bool {
	if v1alpha1.RolloutPhase(s.Phase) != v1alpha1.PhaseProgressing && v1alpha1.RolloutPhase(s.Phase) != v1alpha1.PhasePaused {
		return false
	}
	if s.Step.Current > step {
		return true
	}
	return s.Step.Current == step && slices.Contains([]v1alpha1.StepState{
		v1alpha1.StepMetricsAnalysis, v1alpha1.StepPaused, v1alpha1.StepReady}, v1alpha1.StepState(s.Step.State))
}

func untilText(w v1alpha1.FleetWait) string {
	if w.Step != nil {
		return fmt.Sprintf("waiting for it to reach step %d", *w.Step)
	}
	return "waiting for it to complete"
}
