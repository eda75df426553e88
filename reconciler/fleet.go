package reconciler

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/reconciler/gitsource"
	"github.com/rollgate/rollgate/strategy"
)

// observeFleet judges spec.fleet.waitFor: it reads the status files the
// controllers of the other clusters write to the shared status branch and
// tells the planner, per wait, whether the upstream release reached the
// point asked for with the version this Rollout is about to release (the
// same container images). It fails closed: when Git cannot be read, every
// gate is closed and says why.
func (r *RolloutReconciler) observeFleet(ctx context.Context, sc *scope) {
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
	for _, w := range ro.Spec.Fleet.WaitFor {
		g := strategy.FleetGate{BeforeStep: 1}
		if w.BeforeStep != nil {
			g.BeforeStep = *w.BeforeStep
		}
		if err != nil {
			g.Why = fmt.Sprintf("cluster %s: cannot read its progress from Git: %v", w.Cluster, err)
		} else {
			g.Open, g.Why = judgeUpstream(w, ro, states, sc.workload.Images)
		}
		sc.fleet = append(sc.fleet, g)
	}
}

// judgeUpstream reports whether the upstream release w names, as its
// cluster wrote it to Git (states, keyed "<cluster>/<namespace>/<name>"),
// has released images as far as w asks, and why not.
func judgeUpstream(w v1alpha1.FleetWait, ro *v1alpha1.Rollout, states map[string]gitsource.FleetStatus, images []string) (bool, string) {
	ns, name := ro.Namespace, ro.Name
	if w.Rollout != "" {
		name = w.Rollout
		if before, after, ok := strings.Cut(w.Rollout, "/"); ok {
			ns, name = before, after
		}
	}
	who := fmt.Sprintf("cluster %s: %s/%s", w.Cluster, ns, name)
	f, ok := states[w.Cluster+"/"+ns+"/"+name]
	if !ok {
		return false, who + " has no status in Git (is its Repository's spec.status.cluster " + w.Cluster + ", on the same status branch?)"
	}
	if f.Distrust != "" {
		return false, who + ": " + f.Distrust
	}
	s := f.RolloutState
	want := strings.Join(images, ",")
	canary, stable := strings.Join(s.Canary.Images, ","), strings.Join(s.Stable.Images, ",")
	released := v1alpha1.RolloutPhase(s.Phase) == v1alpha1.PhaseHealthy && stable == want
	switch {
	case released:
		return true, ""
	case canary == want && v1alpha1.RolloutPhase(s.Phase) == v1alpha1.PhaseFailed:
		return false, fmt.Sprintf("%s: the release of %s failed there: %s", who, want, s.Message)
	case w.Step != nil && canary == want && reachedStep(s, int(*w.Step)):
		return true, ""
	case canary == want && s.Step.Total > 0:
		return false, fmt.Sprintf("%s is at step %d/%d (%s) of %s, %s", who, s.Step.Current, s.Step.Total,
			s.Step.State, want, untilText(w))
	case stable == want && v1alpha1.RolloutPhase(s.Phase) == v1alpha1.PhaseProgressing:
		// Every pod runs it; the declared routes are coming back.
		return false, fmt.Sprintf("%s is finishing the release of %s; %s", who, want, untilText(w))
	case stable == "":
		return false, fmt.Sprintf("%s (%s) wrote no images to Git; %s", who, s.Phase, untilText(w))
	}
	return false, fmt.Sprintf("%s runs %s (%s), not %s", who, stable, s.Phase, want)
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
