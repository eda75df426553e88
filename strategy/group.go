package strategy

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// groupPoll bounds the wait of a member for the other members of its
// lockstep group: their status changes wake it (the reconciler watches
// them), this only bounds a missed event.
const groupPoll = 10 * time.Second

// Group is the lockstep group a Rollout is a member of (spec.group): the
// other members as the reconciler saw them. The planner judges from their
// specs and statuses, so a member's memory stays its own status.
type Group struct {
	// Name is spec.group.name.
	Name string
	// Self is the name of the Rollout being planned.
	Self string
	// Members are the other members (same namespace, same group, neither
	// disabled nor being deleted), in any order.
	Members []GroupMember
}

// GroupMember is another member of a lockstep group.
type GroupMember struct {
	Name   string
	Spec   *v1alpha1.RolloutSpec
	Status *v1alpha1.RolloutStatus
}

// memberState is where a member stands in the group's release.
type memberState int

const (
	// memberIdle: no release, none waiting to start.
	memberIdle memberState = iota
	// memberWaiting: a new revision waits to start (a freeze, a fleet
	// gate, spec.strategy.paused, a missing object): Paused outside a
	// release.
	memberWaiting
	// memberQueued: waits for a place in a budget; does not hold the group
	// (holding it could wait forever for the place a member itself keeps).
	memberQueued
	// memberReleasing: a release under way.
	memberReleasing
	// memberFailed: its release failed or was aborted.
	memberFailed
)

func stateOf(s *v1alpha1.RolloutStatus) memberState {
	switch {
	case inRelease(s) && s.Phase == v1alpha1.PhaseFailed:
		return memberFailed
	case inRelease(s):
		return memberReleasing
	case s.Phase == v1alpha1.PhasePaused && s.Queue != nil:
		return memberQueued
	case s.Phase == v1alpha1.PhasePaused:
		return memberWaiting
	}
	return memberIdle
}

// finished reports whether a member in release is done with step idx: its
// step idx is ready for the next (or it completes), or it is past it.
func finished(s *v1alpha1.RolloutStatus, idx int32) bool {
	switch {
	case s.CurrentStepIndex > idx:
		return true
	case s.CurrentStepIndex < idx:
		return false
	}
	return s.CurrentStepState == v1alpha1.StepReady || s.CurrentStepState == v1alpha1.StepCompleted
}

// groupMismatch is CheckGroup of the planner's Rollout.
func (p *planner) groupMismatch() error {
	return CheckGroup(p.obs.Group, p.spec)
}

// CheckGroup checks that every other member of g has as many steps as
// spec, with gates at the same steps: one gate of the group is one step
// of each member. A member whose steps cannot be read is left to report
// its own spec, as is spec. The error is a *SpecError on spec.group.name
// naming the member and the fix.
func CheckGroup(g *Group, spec *v1alpha1.RolloutSpec) error {
	if g == nil {
		return nil
	}
	mine, _, err := specSteps(spec)
	if err != nil {
		return nil
	}
	for _, m := range g.sorted() {
		theirs, _, err := specSteps(m.Spec)
		if err != nil {
			continue
		}
		if len(theirs) != len(mine) {
			return specErrorf("spec.group.name", "member %s of group %s has %d steps and this Rollout %d: "+
				"members of a group need the same number of steps with gates at the same steps", m.Name, g.Name, len(theirs), len(mine))
		}
		if a, b := gateSteps(mine), gateSteps(theirs); !slices.Equal(a, b) {
			return specErrorf("spec.group.name", "member %s of group %s has gates (pause without duration) at steps %s and this Rollout at %s: "+
				"members of a group need gates at the same steps", m.Name, g.Name, stepsOrNone(b), stepsOrNone(a))
		}
	}
	return nil
}

// GroupCoordinator is the member whose gates are a group's when all of
// names release together: the first by name.
func GroupCoordinator(names []string) string {
	return slices.Min(names)
}

// gateSteps are the 1-based steps that are gates.
func gateSteps(steps []v1alpha1.CanaryStep) []int32 {
	var out []int32
	for i, s := range steps {
		if s.Pause != nil && s.Pause.Duration == nil {
			out = append(out, int32(i+1))
		}
	}
	return out
}

// groupFailure returns why this release rolls back because another member
// failed (or was aborted) since it started. A member that failed before
// this release started holds it instead (groupHolds).
func (p *planner) groupFailure() (string, bool) {
	g := p.obs.Group
	if g == nil || p.in.ReleaseStartedAt == nil {
		return "", false
	}
	// The member that failed first is named, not one that followed it.
	var cause, follower string
	for _, m := range g.sorted() {
		s := m.Status
		if stateOf(s) != memberFailed || s.StepStartedAt == nil || s.StepStartedAt.Before(p.in.ReleaseStartedAt) {
			continue
		}
		why := fmt.Sprintf("member %s of group %s failed (%s)", m.Name, g.Name, failReason(s))
		switch {
		case failReason(s) != v1alpha1.ReasonGroupFailed && cause == "":
			cause = why
		case follower == "":
			follower = why
		}
	}
	if cause == "" {
		cause = follower
	}
	return cause, cause != ""
}

// groupHolds returns why the group holds this member, done with step idx,
// before its next step (or its completion): the members in release that
// are not done with step idx yet, those waiting to start, and those that
// failed before this release started.
func (p *planner) groupHolds(idx int32) (string, bool) {
	g := p.obs.Group
	if g == nil {
		return "", false
	}
	var behind, waiting, failed []string
	for _, m := range g.sorted() {
		switch stateOf(m.Status) {
		case memberReleasing:
			if !finished(m.Status, idx) {
				behind = append(behind, fmt.Sprintf("%s (step %d/%d, %s)", m.Name, m.Status.CurrentStepIndex, m.Status.StepCount, m.Status.CurrentStepState))
			}
		case memberWaiting:
			waiting = append(waiting, m.Name)
		case memberFailed:
			failed = append(failed, m.Name)
		}
	}
	var why []string
	if len(behind) > 0 {
		why = append(why, fmt.Sprintf("group %s waits for %s to finish step %d", g.Name, strings.Join(behind, ", "), idx))
	}
	if len(waiting) > 0 {
		why = append(why, fmt.Sprintf("group %s waits for %s to start (see their status)", g.Name, strings.Join(waiting, ", ")))
	}
	if len(failed) > 0 {
		why = append(why, fmt.Sprintf("member %s of group %s failed before this release started: the group does not advance "+
			"while a member is failed; revert it in Git, or retry it (spec.retry)", strings.Join(failed, ", "), g.Name))
	}
	return strings.Join(why, "; "), len(why) > 0
}

// groupCoordinator is the member whose gates are the group's: the first
// by name of the members in release, this one included. Only its gates
// wait for an approval (and open an approval pull request); the other
// members pass a gate once the coordinator passed it.
func (p *planner) groupCoordinator() string {
	g := p.obs.Group
	coord := g.Self
	for _, m := range g.Members {
		if stateOf(m.Status) == memberReleasing && m.Name < coord {
			coord = m.Name
		}
	}
	return coord
}

// groupGate decides the manual gate at step idx of a member that is not
// the group's coordinator: it opens when the coordinator passed its gate
// at idx. handled is false when this member's own approval decides (it
// coordinates, or it joined the group's release after the coordinator
// left that step: no approval of the group covers its gate).
func (p *planner) groupGate(idx int32, then v1alpha1.StepState) (moved, handled bool) {
	g := p.obs.Group
	if g == nil {
		return false, false
	}
	coord := p.groupCoordinator()
	if coord == g.Self {
		return false, false
	}
	i := slices.IndexFunc(g.Members, func(m GroupMember) bool { return m.Name == coord })
	s := g.Members[i].Status
	switch {
	case s.CurrentStepIndex > idx:
		return false, false
	case s.CurrentStepIndex == idx && s.CurrentStepState == v1alpha1.StepReady:
		p.enter(then)
		return true, true
	}
	p.next.AwaitingApproval = nil
	p.reason = v1alpha1.ReasonWaitingForGroup
	p.next.Message = fmt.Sprintf("step %d/%d of %s waits at the gate of group %s: approve step %d of Rollout %s, the group's coordinator "+
		"(merge its approval pull request); this member passes the gate with it", idx, len(p.steps), p.canary, g.Name, idx, coord)
	p.requeue(groupPoll)
	return false, true
}

// sorted returns the members ordered by name, for stable messages.
func (g *Group) sorted() []GroupMember {
	out := slices.Clone(g.Members)
	slices.SortFunc(out, func(a, b GroupMember) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// stepsOrNone is joinSteps, or "none".
func stepsOrNone(steps []int32) string {
	if len(steps) == 0 {
		return "none"
	}
	return joinSteps(steps)
}
