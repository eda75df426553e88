package strategy

import "github.com/rollgate/rollgate/api/v1alpha1"

// StepPreview is what one step of a release does, for a workload of a
// given size, once the step is done.
type StepPreview struct {
	// Step is the step resolved against the workload's size: new pods
	// (Replicas), traffic, pause, gate and analysis.
	Step
	// Stable is how many pods of the old revision still run.
	Stable int32
}

// Preview resolves the steps of spec for a workload of replicas pods and
// says how many pods of each revision run once each step is done: the
// canary pods replace stable ones (partition), unless the old pods stay
// beside them (blue-green, or a canary with enableExtraWorkloadForCanary).
// It fails as ResolveSteps does.
func Preview(spec *v1alpha1.RolloutSpec, replicas int32) ([]StepPreview, error) {
	steps, err := ResolveSteps(spec, replicas)
	if err != nil {
		return nil, err
	}
	beside := spec.Strategy.BlueGreen != nil ||
		(spec.Strategy.Canary != nil && spec.Strategy.Canary.EnableExtraWorkloadForCanary)
	out := make([]StepPreview, len(steps))
	for i, s := range steps {
		stable := max(replicas, 0)
		if !beside {
			stable -= s.Replicas
		}
		out[i] = StepPreview{Step: s, Stable: stable}
	}
	return out, nil
}
