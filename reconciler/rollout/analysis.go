package rollout

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/analysis"
	"github.com/rollgate/rollgate/strategy"
	"github.com/rollgate/rollgate/strategy/verdict"
	"github.com/rollgate/rollgate/traffic"
)

// observeAnalysis takes the measurements that are due for the step's
// analysis and the background analysis and keeps the outcomes, and the
// merged results for status.analysis, in the scope. A template that cannot
// be used is kept as sc.analysis.invalid: the planner holds the release
// and reports it.
func (r *Reconciler) observeAnalysis(ctx context.Context, sc *scope) error {
	ro := sc.ro
	st := ro.Status
	inRelease := st.CanaryRevision != "" && st.CanaryRevision != st.StableRevision && st.Phase == v1alpha1.PhaseProgressing
	if !inRelease || deleting(ro) {
		return nil
	}
	seen := &sc.analysis
	prev := ro.Status.Analysis
	merged := prev
	if bg := ro.Spec.Strategy.BackgroundAnalysis(); bg != nil && st.ReleaseStartedAt != nil {
		rep, err := r.runAnalysis(ctx, sc, bg, 0, st.ReleaseStartedAt.Time, since(prev, st.ReleaseStartedAt.Time), nil)
		if err == nil {
			merged, err = verdict.MergeResults(merged, 0, rep.Results)
		}
		if err != nil {
			return invalidAnalysis(seen, strategyField(ro)+".analysis", err)
		}
		seen.background = strategy.AnalysisResult{Phase: strategy.AnalysisPhase(rep.Outcome.Phase), Message: rep.Outcome.Message}
		seen.nextAt = earliest(seen.nextAt, rep.NextAt)
	}
	if st.CurrentStepState == v1alpha1.StepMetricsAnalysis && st.StepStartedAt != nil {
		a, verify := ro.Spec.Strategy.StepAnalysis(st.CurrentStepIndex), verification(ro, st.CurrentStepIndex)
		if a != nil || verify != nil {
			if a == nil {
				a = &v1alpha1.RolloutAnalysis{}
			}
			rep, err := r.runAnalysis(ctx, sc, a, st.CurrentStepIndex, st.StepStartedAt.Time, since(prev, st.StepStartedAt.Time), verify)
			if err == nil {
				merged, err = verdict.MergeResults(merged, st.CurrentStepIndex, rep.Results)
			}
			if err != nil {
				return invalidAnalysis(seen, fmt.Sprintf("%s.steps[%d].analysis", strategyField(ro), st.CurrentStepIndex-1), err)
			}
			out := rep.Outcome
			seen.step = &out
			seen.nextAt = earliest(seen.nextAt, rep.NextAt)
		}
	}
	seen.ran, seen.results = true, merged
	return nil
}

// invalidAnalysis keeps a template problem (a missing template, a bad
// condition) for the planner; any other error is returned.
func invalidAnalysis(seen *analysisSeen, field string, err error) error {
	if errors.Is(err, analysis.ErrInvalidTemplate) || errors.Is(err, verdict.ErrTooManyResults) {
		seen.invalid = &strategy.SpecError{Field: field, Detail: err.Error()}
		return nil
	}
	return err
}

// strategyField is the path of the strategy that is set.
func strategyField(ro *v1alpha1.Rollout) string {
	if ro.Spec.Strategy.BlueGreen != nil {
		return "spec.strategy.blueGreen"
	}
	return "spec.strategy.canary"
}

// runAnalysis measures analysis a (its templates read from the cluster)
// and, when set, the in-memory template extra (a step's traffic
// verification).
func (r *Reconciler) runAnalysis(ctx context.Context, sc *scope, a *v1alpha1.RolloutAnalysis, step int32, started time.Time, prev []v1alpha1.MetricResult, extra *v1alpha1.AnalysisTemplate) (analysis.Report, error) {
	ro := sc.ro
	in := analysis.Input{Args: a.Args, Step: step, Attempt: ro.Status.Attempt, StartedAt: started, Previous: prev, Now: sc.now, Facts: facts(ro),
		Owner: metav1.NewControllerRef(ro, v1alpha1.GroupVersion.WithKind("Rollout"))}
	for _, name := range a.Templates {
		var t v1alpha1.AnalysisTemplate
		if err := r.Get(ctx, types.NamespacedName{Namespace: ro.Namespace, Name: name}, &t); apierrors.IsNotFound(err) {
			return analysis.Report{}, fmt.Errorf("%w: AnalysisTemplate %s/%s named in the Rollout's analysis does not exist", analysis.ErrInvalidTemplate, ro.Namespace, name)
		} else if err != nil {
			return analysis.Report{}, err
		}
		in.Templates = append(in.Templates, t)
	}
	if extra != nil {
		in.Templates = append(in.Templates, *extra)
	}
	providers := analysis.DefaultProviders()
	if r.Jobs != nil {
		providers.Job = r.Jobs
	}
	runner := analysis.Runner{Provider: providers, Secrets: func(ctx context.Context, name string) (map[string][]byte, error) {
		var s corev1.Secret
		if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: ro.Namespace, Name: name}, &s); err != nil {
			return nil, err
		}
		return s.Data, nil
	}}
	rep, err := runner.Run(ctx, in)
	if err == nil {
		r.Options.Metrics.Measured(ro.Namespace, ro.Name, in.Previous, rep.Results)
		if rep.Writes != nil {
			sc.analysis.jobs = append(sc.analysis.jobs, rep.Writes)
		}
	}
	return rep, err
}

// actStartChecks creates the Jobs the analysis' Job checks asked for and
// deletes those they are done with (a pod that cannot start, the history
// bound). A failure is logged: the check asks again at its next look.
func (r *Reconciler) actStartChecks(ctx context.Context, sc *scope) {
	for _, w := range sc.analysis.jobs {
		if err := analysis.ApplyWrites(ctx, r.Client, w); err != nil {
			log.FromContext(ctx).Error(err, "Job checks")
		}
	}
}

func facts(ro *v1alpha1.Rollout) verdict.Facts {
	f := verdict.Facts{Namespace: ro.Namespace, Name: ro.Name, CanaryRevision: ro.Status.CanaryRevision, StableRevision: ro.Status.StableRevision}
	if ro.Status.CurrentStepIndex > 0 {
		f.Step = strconv.Itoa(int(ro.Status.CurrentStepIndex))
	}
	if rs := ro.Spec.Strategy.TrafficRoutings(); len(rs) > 0 {
		f.StableService, f.CanaryService = rs[0].Service, traffic.CanaryServiceName(rs[0].Service)
	}
	return f
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
