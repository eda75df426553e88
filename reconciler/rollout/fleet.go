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
			g.Why = fmt.Sprintf("%s: cannot read the status branch in Git: %v", waitName(w), err)
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

// judgement is what a wait concluded about one upstream release.
type judgement struct {
	open bool
	// why says why it is closed, naming the cluster.
	why string
	// until is when a closed wait opens by itself (the end of a bake).
	until time.Time
	// failed is true when the upstream release of the same images failed.
	failed bool
}

// judge reports whether the upstream release has released the images as
// far as the wait asks (and baked as long as it asks), why not, and when
// a bake ends. A wait on a set of clusters (clusters) is judged in
// fleetshare.go.
func (u upstream) judge() (bool, string, time.Time) {
	if len(u.wait.Clusters) > 0 {
		v := u.judgeShare()
		return v.open, v.why, v.until
	}
	v := u.judgeOne(u.wait.Cluster)
	return v.open, v.why, v.until
}

// judgeOne judges the upstream release in cluster.
func (u upstream) judgeOne(cluster string) judgement {
	w := u.wait
	name := upstreamName(w, u.ro)
	key := cluster + "/" + name
	who := fmt.Sprintf("cluster %s: %s", cluster, name)
	f, ok := u.states[key]
	if !ok {
		return judgement{why: who + " has no status in Git: " + u.missing(cluster, name)}
	}
	if f.Distrust != "" {
		return judgement{why: who + ": " + f.Distrust}
	}
	s := f.RolloutState
	want := strings.Join(u.images, ",")
	canary, stable := strings.Join(s.Canary.Images, ","), strings.Join(s.Stable.Images, ",")
	released := v1alpha1.RolloutPhase(s.Phase) == v1alpha1.PhaseHealthy && stable == want
	switch {
	case released && w.BakeTime != nil:
		if s.LastTransitionTime.IsZero() {
			return judgement{why: fmt.Sprintf("%s released %s but wrote no completion time to Git, so its bake time of %s cannot be counted", who, want, w.BakeTime.Duration)}
		}
		end := s.LastTransitionTime.Add(w.BakeTime.Duration)
		if u.now.Before(end) {
			return judgement{why: fmt.Sprintf("%s released %s at %s; baking for %s, until %s", who, want,
				s.LastTransitionTime.UTC().Format(time.RFC3339), w.BakeTime.Duration, end.UTC().Format(time.RFC3339)), until: end}
		}
		return judgement{open: true}
	case released:
		return judgement{open: true}
	case canary == want && v1alpha1.RolloutPhase(s.Phase) == v1alpha1.PhaseFailed:
		return judgement{why: fmt.Sprintf("%s: the release of %s failed there: %s", who, want, s.Message), failed: true}
	case w.Step != nil && canary == want && reachedStep(s, int(*w.Step)):
		return judgement{open: true}
	}
	if cycle := u.cycle(key); cycle != "" {
		return judgement{why: fmt.Sprintf("%s waits for this Rollout in turn (%s): the waves form a cycle and none can start; remove one of these spec.fleet.waitFor entries", who, cycle)}
	}
	if cause := u.failedUpstream(key, want); cause != "" {
		return judgement{why: fmt.Sprintf("%s is held by a failed release upstream of it: %s", who, cause)}
	}
	switch {
	case canary == want && s.Step.Total > 0:
		return judgement{why: fmt.Sprintf("%s is at step %d/%d (%s) of %s, %s", who, s.Step.Current, s.Step.Total,
			s.Step.State, want, untilText(w))}
	case stable == want && v1alpha1.RolloutPhase(s.Phase) == v1alpha1.PhaseProgressing:
		// Every pod runs it; the declared routes are coming back.
		return judgement{why: fmt.Sprintf("%s is finishing the release of %s; %s", who, want, untilText(w))}
	case stable == "":
		return judgement{why: fmt.Sprintf("%s (%s) wrote no images to Git; %s", who, s.Phase, untilText(w))}
	}
	return judgement{why: fmt.Sprintf("%s runs %s (%s), not %s", who, stable, s.Phase, want)}
}

// missing says why no status file of name in cluster is on the status
// branch: the cluster wrote none at all (a typo, another status branch,
// or a controller that never ran), or none of that Rollout.
func (u upstream) missing(cluster, name string) string {
	var rollouts []string
	for k := range u.states {
		if c, n, _ := strings.Cut(k, "/"); c == cluster {
			rollouts = append(rollouts, n)
		}
	}
	if len(rollouts) > 0 {
		return fmt.Sprintf("cluster %s wrote the status of %s only; check spec.fleet.waitFor[].rollout", cluster, listed(rollouts))
	}
	return fmt.Sprintf("no cluster named %s wrote a status file on the status branch (%s); check the name, "+
		"and that its Repository's spec.status.cluster is %s, on the same status branch", cluster, u.clustersThere(), cluster)
}

// failedUpstream looks for a failed release of images among the
// releases key waits for, and theirs in turn (as their status files
// record them), nearest first. It returns what failed, where and the path
// to it; "" when nothing upstream failed.
func (u upstream) failedUpstream(key, images string) string {
	type hop struct {
		key  string
		path []string
	}
	seen := map[string]bool{key: true}
	queue := []hop{{key, []string{key}}}
	for len(queue) > 0 {
		h := queue[0]
		queue = queue[1:]
		for _, next := range u.waitsOf(h.key) {
			if seen[next] {
				continue
			}
			seen[next] = true
			path := append(slices.Clone(h.path), next)
			f, ok := u.states[next]
			if !ok || f.Distrust != "" {
				continue
			}
			if strings.Join(f.Canary.Images, ",") == images && v1alpha1.RolloutPhase(f.Phase) == v1alpha1.PhaseFailed {
				c, n, _ := strings.Cut(next, "/")
				return fmt.Sprintf("cluster %s: %s: the release of %s failed there: %s (%s)", c, n, images, f.Message, strings.Join(path, " waits for "))
			}
			queue = append(queue, hop{next, path})
		}
	}
	return ""
}

// waitsOf is what the release at key waits for, as its status file
// records it, with the patterns of a share expanded to the releases on
// the status branch (and this Rollout) they match, the release's own
// cluster excepted.
func (u upstream) waitsOf(key string) []string {
	own, _, _ := strings.Cut(key, "/")
	var out []string
	for _, w := range u.states[key].WaitsFor {
		pattern, name, _ := strings.Cut(w, "/")
		if !strings.Contains(pattern, "*") {
			out = append(out, w)
			continue
		}
		for k := range u.states {
			if c, n, _ := strings.Cut(k, "/"); c != own && n == name && matchCluster(pattern, c) {
				out = append(out, k)
			}
		}
		if c, n, _ := strings.Cut(u.self, "/"); u.self != "" && c != own && n == name && matchCluster(pattern, c) && !slices.Contains(out, u.self) {
			out = append(out, u.self)
		}
	}
	slices.Sort(out)
	return out
}

// listed is names, sorted, at most five and how many more.
func listed(names []string) string {
	names = slices.Sorted(slices.Values(names))
	if len(names) > 5 {
		return fmt.Sprintf("%s and %d more", strings.Join(names[:5], ", "), len(names)-5)
	}
	return strings.Join(names, ", ")
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
		for _, next := range u.waitsOf(k) {
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
