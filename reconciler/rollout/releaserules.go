package rollout

import (
	"cmp"
	"context"
	"fmt"

	"github.com/rollgate/rollgate/strategy/rules"
)

// observeReleaseRules reads the Repository's release rules file
// (spec.releaseRules): which freezes and windows hold the Rollout now,
// naming who merged each freeze, and which budgets cover it (a place in
// them is asked for only when a release would start: queueTicket). It
// fails closed: when the file cannot be read or does not parse, one hold
// says why, and no release starts or steps on until the file is fixed in
// Git.
func (r *Reconciler) observeReleaseRules(ctx context.Context, sc *scope) {
	ro := sc.ro
	if sc.repository == nil || sc.repository.Spec.ReleaseRules == nil || ro.Spec.Disabled || !ro.DeletionTimestamp.IsZero() {
		return
	}
	if sc.git == nil {
		sc.freezes = []rules.Hold{{Name: "spec.releaseRules", Steps: true,
			Why: fmt.Sprintf("Repository %s/%s declares release rules and is not open, so whether one holds is unknown: %v",
				ro.Namespace, sc.repository.Name, sc.gitReadErr)}}
		return
	}
	f, err := sc.git.Rules(ctx)
	if err != nil {
		sc.freezes = []rules.Hold{{Name: "spec.releaseRules", Steps: true, Why: err.Error()}}
		sc.liftedInGit()
		return
	}
	for _, b := range f.Parsed.Budgets(ro.Namespace, ro.Labels) {
		sc.budgets = append(sc.budgets, coveringBudget{id: ro.Namespace + "/" + sc.repository.Name + "/" + b.Name, Budget: b})
	}
	for _, h := range f.Parsed.Holds(ro.Namespace, ro.Labels, sc.now) {
		if by, ok := f.MergedBy[h.Name]; ok && !h.Window {
			h.Why += ", " + by
		}
		sc.freezes = append(sc.freezes, h)
	}
	sc.liftedInGit()
}

// liftedInGit asks for the tracked branch to be fetched every interval,
// as a gate does, while a hold that only a merge lifts holds the Rollout:
// the merge then reaches it within an interval (the fetch wakes every
// Rollout of the Repository when the file changed).
func (sc *scope) liftedInGit() {
	for _, h := range sc.freezes {
		if h.Until.IsZero() {
			sc.git.GateWaits(cmp.Or(sc.repository.Spec.Branch, "main"), sc.now)
			return
		}
	}
}
