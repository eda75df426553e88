package strategy

import (
	"reflect"
	"strconv"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// TrafficMode says which kind of traffic the routers should carry.
type TrafficMode string

// Traffic modes.
const (
	// TrafficOriginal: the routes as Git declares them; the routers restore
	// whatever they changed (the stable Service then reaches every pod of
	// the workload).
	TrafficOriginal TrafficMode = "Original"
	// TrafficStable: every request to the stable revision and none to the
	// canary (canary weight 0, no matches). Used before the first traffic
	// step and while rolling back.
	TrafficStable TrafficMode = "Stable"
	// TrafficCanary: Weight percent of requests, or the requests that match
	// Matches, to the canary revision.
	TrafficCanary TrafficMode = "Canary"
	// TrafficPromoted: all requests to the canary revision, as at a step
	// of 100% (Weight 100), and the stable Service narrowed to the canary
	// revision as well, so that nothing reaches the old pods any more, not
	// even a client that calls the stable Service directly. A release whose
	// traffic is all on the canary finishes with it: the old pods shut down
	// with no request on them, and the declared routes come back only once
	// every pod runs the new revision. Restoring them first would send
	// requests back to the old pods after all traffic had left them (half
	// of them, in a blue-green release, until the old pods are gone).
	TrafficPromoted TrafficMode = "Promoted"
)

// Traffic is what the routers should carry. The canary and stable
// revisions are those of the plan's status.
type Traffic struct {
	// Mode says which kind of traffic.
	Mode TrafficMode
	// Weight is the percentage (0-100) of requests for the canary, in mode
	// Canary. When Matches are set they take precedence.
	Weight int32
	// Matches send matching requests to the canary (A/B testing), in mode
	// Canary.
	Matches []v1alpha1.HttpRouteMatch
	// RequestHeaderModifier changes requests routed to the canary, in mode
	// Canary.
	RequestHeaderModifier *gatewayv1.HTTPHeaderFilter
	// Mirror is the percentage (1-100) of requests copied to the canary
	// while stable answers every one (a mirror step), in mode Canary with
	// Weight 0 and no matches.
	Mirror int32
}

// Equal reports whether two traffic states are the same.
func (t Traffic) Equal(o Traffic) bool { return reflect.DeepEqual(t, o) }

// String describes the traffic for status.traffic: "" for the original
// routes, "0%" for all to stable, "5%", "matches", or "mirror 20%".
func (t Traffic) String() string {
	switch {
	case t.Mode == TrafficOriginal:
		return ""
	case t.Mode == TrafficStable:
		return "0%"
	case len(t.Matches) > 0:
		return "matches"
	case t.Mirror > 0:
		return "mirror " + strconv.Itoa(int(t.Mirror)) + "%"
	}
	return strconv.Itoa(int(t.Weight)) + "%"
}

// weight is the canary weight for status.canaryWeight.
func (t Traffic) weight() int32 {
	if (t.Mode == TrafficCanary || t.Mode == TrafficPromoted) && len(t.Matches) == 0 {
		return t.Weight
	}
	return 0
}

// DesiredTraffic is the traffic a status asks for. It depends on the spec
// and the status only, so the reconciler can ask the routers for it before
// planning and pass their answer as Observed.TrafficDone; Plan.Traffic is
// DesiredTraffic of the next status.
//
// Outside a release, when disabled, or without trafficRoutings it is
// Original. During a step it is the traffic of the previous step while the
// step's pods come up (StepUpgrade) and the step's own traffic afterwards.
// Rolling back and failed releases ask for Stable; finishing a release asks
// for Original, or for Promoted when the traffic of its step was all on the
// canary (finalize). If the spec's traffic cannot be parsed it falls back to
// Stable during a release, the safe choice.
func DesiredTraffic(spec *v1alpha1.RolloutSpec, status *v1alpha1.RolloutStatus) Traffic {
	original := Traffic{Mode: TrafficOriginal}
	stable := Traffic{Mode: TrafficStable}
	if len(spec.Strategy.TrafficRoutings()) == 0 || status.Phase == v1alpha1.PhaseDisabled || !inRelease(status) {
		return original
	}
	switch {
	case status.Phase == v1alpha1.PhaseFailed, status.CurrentStepState == v1alpha1.StepRollingBack:
		return stable
	}
	raw, _, err := specSteps(spec)
	if err != nil {
		return stable
	}
	idx := min(max(int(status.CurrentStepIndex), 1), len(raw))
	if status.CurrentStepState == v1alpha1.StepCompleted {
		return finishing(spec, idx)
	}
	if status.CurrentStepState == v1alpha1.StepUpgrade || status.CurrentStepState == "" {
		idx--
	}
	t, err := trafficAt(spec, idx)
	if err != nil {
		return stable
	}
	return t
}

// finishing is the traffic that finishes a release completed (or promoted)
// at step idx: Promoted when that step sent every request to the canary,
// otherwise the declared routes.
func finishing(spec *v1alpha1.RolloutSpec, idx int) Traffic {
	t, err := trafficAt(spec, idx)
	if err != nil || t.Mode != TrafficCanary || t.Weight != 100 || len(t.Matches) > 0 {
		return Traffic{Mode: TrafficOriginal}
	}
	t.Mode = TrafficPromoted
	return t
}

// sameTarget reports whether two statuses ask the routers for the same
// thing, so that an answer about one holds for the other.
func sameTarget(spec *v1alpha1.RolloutSpec, a, b *v1alpha1.RolloutStatus) bool {
	ta, tb := DesiredTraffic(spec, a), DesiredTraffic(spec, b)
	if !ta.Equal(tb) {
		return false
	}
	return ta.Mode == TrafficOriginal ||
		(a.CanaryRevision == b.CanaryRevision && a.StableRevision == b.StableRevision)
}

// inRelease reports whether a status records a release that has not
// finished: a canary revision other than the stable one.
func inRelease(s *v1alpha1.RolloutStatus) bool {
	return s.CanaryRevision != "" && s.CanaryRevision != s.StableRevision
}
