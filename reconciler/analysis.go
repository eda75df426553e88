package reconciler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/analysis"
	"github.com/rollgate/rollgate/strategy"
	plan "github.com/rollgate/rollgate/strategy/analysis"
	"github.com/rollgate/rollgate/traffic"
)

// observeAnalysis takes the measurements that are due for the step's
// analysis and the background analysis, records them in status.analysis,
// and hands the outcomes to the planner.
func (r *RolloutReconciler) observeAnalysis(ctx context.Context, rel *release, obs *strategy.Observed) error {
	ro := rel.ro
	st := ro.Status
	inRelease := st.CanaryRevision != "" && st.CanaryRevision != st.StableRevision && st.Phase == v1alpha1.PhaseProgressing
	if !inRelease {
		return nil
	}
	prev := ro.Status.Analysis
	merged := prev
	if bg := backgroundAnalysis(ro); bg != nil && st.ReleaseStartedAt != nil {
		rep, err := r.runAnalysis(ctx, rel, bg, 0, st.ReleaseStartedAt.Time, since(prev, st.ReleaseStartedAt.Time))
		if err != nil {
			return r.analysisSpecError(ro, err)
		}
		obs.BackgroundAnalysis = strategy.AnalysisResult{Phase: strategy.AnalysisPhase(rep.Outcome.Phase), Message: rep.Outcome.Message}
		if merged, err = plan.MergeResults(merged, 0, rep.Results); err != nil {
			return r.analysisSpecError(ro, err)
		}
		rel.analysisAt = earliest(rel.analysisAt, rep.NextAt)
	}
	if st.CurrentStepState == v1alpha1.StepMetricsAnalysis && st.StepStartedAt != nil {
		if a := stepAnalysis(ro, st.CurrentStepIndex); a != nil {
			rep, err := r.runAnalysis(ctx, rel, a, st.CurrentStepIndex, st.StepStartedAt.Time, since(prev, st.StepStartedAt.Time))
			if err != nil {
				return r.analysisSpecError(ro, err)
			}
			obs.StepAnalysis = strategy.AnalysisResult{Phase: strategy.AnalysisPhase(rep.Outcome.Phase), Message: rep.Outcome.Message}
			if merged, err = plan.MergeResults(merged, st.CurrentStepIndex, rep.Results); err != nil {
				return r.analysisSpecError(ro, err)
			}
			rel.analysisAt = earliest(rel.analysisAt, rep.NextAt)
			r.markAnalysis(ro, rep.Outcome)
		}
	}
	ro.Status.Analysis = merged
	return nil
}

func (r *RolloutReconciler) runAnalysis(ctx context.Context, rel *release, a *v1alpha1.RolloutAnalysis, step int32, started time.Time, prev []v1alpha1.MetricResult) (analysis.Report, error) {
	ro := rel.ro
	in := analysis.Input{Args: a.Args, Step: step, StartedAt: started, Previous: prev, Now: rel.now, Facts: facts(ro)}
	for _, name := range a.Templates {
		var t v1alpha1.AnalysisTemplate
		if err := r.Get(ctx, types.NamespacedName{Namespace: ro.Namespace, Name: name}, &t); apierrors.IsNotFound(err) {
			return analysis.Report{}, fmt.Errorf("%w: AnalysisTemplate %s/%s named in the Rollout's analysis does not exist", analysis.ErrInvalidTemplate, ro.Namespace, name)
		} else if err != nil {
			return analysis.Report{}, err
		}
		in.Templates = append(in.Templates, t)
	}
	runner := analysis.Runner{Secrets: func(ctx context.Context, name string) (map[string][]byte, error) {
		var s corev1.Secret
		if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: ro.Namespace, Name: name}, &s); err != nil {
			return nil, err
		}
		return s.Data, nil
	}}
	rep, err := runner.Run(ctx, in)
	if err == nil {
		r.Options.Metrics.Measured(ro.Namespace, ro.Name, in.Previous, rep.Results)
	}
	return rep, err
}

// analysisSpecError stalls the release on a template problem (a missing
// template, a bad condition) and keeps everything in place.
func (r *RolloutReconciler) analysisSpecError(ro *v1alpha1.Rollout, err error) error {
	if errors.Is(err, analysis.ErrInvalidTemplate) || errors.Is(err, plan.ErrTooManyResults) {
		r.markStalled(ro, v1alpha1.ReasonInvalidSpec, err.Error(), false)
		conditions.MarkFalse(ro, v1alpha1.AnalysisCondition, v1alpha1.ReasonInvalidSpec, "%s", err.Error())
		return nil
	}
	return err
}

func (r *RolloutReconciler) markAnalysis(ro *v1alpha1.Rollout, o plan.Outcome) {
	switch o.Phase {
	case plan.PhaseSuccessful:
		conditions.MarkTrue(ro, v1alpha1.AnalysisCondition, string(o.Phase), "%s", o.Message)
	case plan.PhaseFailed, plan.PhaseError:
		conditions.MarkFalse(ro, v1alpha1.AnalysisCondition, v1alpha1.ReasonAnalysisFailed, "%s", o.Message)
	case plan.PhaseInconclusive:
		conditions.MarkFalse(ro, v1alpha1.AnalysisCondition, v1alpha1.ReasonAnalysisInconclusive, "%s", o.Message)
	default:
		conditions.MarkUnknown(ro, v1alpha1.AnalysisCondition, string(o.Phase), "%s", o.Message)
	}
}

func facts(ro *v1alpha1.Rollout) plan.Facts {
	f := plan.Facts{Namespace: ro.Namespace, Name: ro.Name, CanaryRevision: ro.Status.CanaryRevision, StableRevision: ro.Status.StableRevision}
	if rs := routings(ro); len(rs) > 0 {
		f.StableService, f.CanaryService = rs[0].Service, traffic.CanaryServiceName(rs[0].Service)
	}
	return f
}

func routings(ro *v1alpha1.Rollout) []v1alpha1.TrafficRoutingRef {
	if c := ro.Spec.Strategy.Canary; c != nil {
		return c.TrafficRoutings
	}
	if b := ro.Spec.Strategy.BlueGreen; b != nil {
		return b.TrafficRoutings
	}
	return nil
}

func backgroundAnalysis(ro *v1alpha1.Rollout) *v1alpha1.RolloutAnalysis {
	if c := ro.Spec.Strategy.Canary; c != nil {
		return c.Analysis
	}
	if b := ro.Spec.Strategy.BlueGreen; b != nil {
		return b.Analysis
	}
	return nil
}

func stepAnalysis(ro *v1alpha1.Rollout, idx int32) *v1alpha1.RolloutAnalysis {
	var steps []v1alpha1.CanaryStep
	if c := ro.Spec.Strategy.Canary; c != nil {
		steps = c.Steps
	} else if b := ro.Spec.Strategy.BlueGreen; b != nil {
		steps = b.Steps
	}
	if idx < 1 || int(idx) > len(steps) {
		return nil
	}
	return steps[idx-1].Analysis
}

// since keeps the results with a measurement at or after t: the results of
// an earlier visit to the same step (an earlier attempt) never count.
func since(results []v1alpha1.MetricResult, t time.Time) []v1alpha1.MetricResult {
	var out []v1alpha1.MetricResult
	for _, r := range results {
		// Status times have whole seconds and step stamps are rounded up:
		// allow one second.
		if n := len(r.Measurements); n > 0 && !r.Measurements[n-1].At.Time.Before(t.Add(-time.Second)) {
			out = append(out, r)
		}
	}
	return out
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}
