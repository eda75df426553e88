package v1alpha1

// The accessors below answer for whichever strategy is set (canary or
// blue-green), so callers never test both for nil.

// Steps returns the steps of the strategy that is set.
func (s *RolloutStrategy) Steps() []CanaryStep {
	switch {
	case s.Canary != nil:
		return s.Canary.Steps
	case s.BlueGreen != nil:
		return s.BlueGreen.Steps
	}
	return nil
}

// TrafficRoutings returns the trafficRoutings of the strategy that is set.
func (s *RolloutStrategy) TrafficRoutings() []TrafficRoutingRef {
	switch {
	case s.Canary != nil:
		return s.Canary.TrafficRoutings
	case s.BlueGreen != nil:
		return s.BlueGreen.TrafficRoutings
	}
	return nil
}

// BackgroundAnalysis returns the analysis that runs for the whole release
// (spec.strategy.*.analysis), or nil.
func (s *RolloutStrategy) BackgroundAnalysis() *RolloutAnalysis {
	switch {
	case s.Canary != nil:
		return s.Canary.Analysis
	case s.BlueGreen != nil:
		return s.BlueGreen.Analysis
	}
	return nil
}

// StepAnalysis returns the analysis of the 1-based step idx, or nil.
func (s *RolloutStrategy) StepAnalysis(idx int32) *RolloutAnalysis {
	steps := s.Steps()
	if idx < 1 || int(idx) > len(steps) {
		return nil
	}
	return steps[idx-1].Analysis
}

// PatchPodTemplateMetadata returns the canary's patchPodTemplateMetadata,
// or nil (blue-green has none).
func (s *RolloutStrategy) PatchPodTemplateMetadata() *PatchPodTemplateMetadata {
	if s.Canary != nil {
		return s.Canary.PatchPodTemplateMetadata
	}
	return nil
}
