package strategy

import "github.com/rollgate/rollgate/api/v1alpha1"

// InFlight reports whether a status records a release under way (one
// rolling back included): what a budget of the release rules counts.
func InFlight(s *v1alpha1.RolloutStatus) bool { return inRelease(s) }

// StartsRelease reports whether a plan takes a Rollout from no release in
// flight (before) to one (after): the only move a budget gates.
func StartsRelease(before, after *v1alpha1.RolloutStatus) bool {
	return !inRelease(before) && inRelease(after)
}
