package analysis

import (
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/strategy/verdict"
)

// ErrInvalidTemplate wraps every template problem Run finds before
// measuring (a condition that does not compile, a missing arg, an unknown
// placeholder, too many metrics). It is a spec error: retrying does not
// help, a person must fix the template or the Rollout.
var ErrInvalidTemplate = errors.New("invalid analysis template")

// SecretFunc returns the data of the Secret with the given name in the
// Rollout's namespace.
type SecretFunc func(ctx context.Context, name string) (map[string][]byte, error)

// Input is one analysis (the step's, or the background one) at one moment.
type Input struct {
	// Templates are the referenced AnalysisTemplates, in the Rollout's order.
	Templates []v1alpha1.AnalysisTemplate
	// Args are the Rollout's args for the templates.
	Args []v1alpha1.AnalysisArg
	// Facts fill the {{rollout.*}} placeholders.
	Facts verdict.Facts
	// Step is the 1-based step of a step analysis, 0 for background.
	Step int32
	// Attempt is the release's attempt (status.attempt): a Job check of a
	// retried release runs Jobs of its own, never reading the finished
	// Jobs of an attempt before it.
	Attempt int32
	// StartedAt is when the analysis began (initialDelay counts from here).
	StartedAt time.Time
	// Previous is status.analysis; entries are matched by template, metric
	// and step, others are ignored.
	Previous []v1alpha1.MetricResult
	// Now is the time of this evaluation.
	Now time.Time
	// Owner owns what measurements create (a Job check's Jobs): the
	// Rollout. Unset, nothing is owned.
	Owner *metav1.OwnerReference
}

// Report is what one Run found.
type Report struct {
	// Results are this analysis' metric results, in template and metric
	// order; put them in status.analysis with verdict.MergeResults.
	Results []v1alpha1.MetricResult
	// Outcome is the aggregated verdict.
	Outcome verdict.Outcome
	// NextAt is when a measurement is next due; zero once the outcome is
	// terminal.
	NextAt time.Time
	// Measured is how many measurements this Run took.
	Measured int
	// Writes are the Jobs this Run's Job checks need created or deleted
	// (ApplyWrites); nil when none.
	Writes *Writes
}

// Runner takes the due measurements of an analysis.
type Runner struct {
	// Provider takes measurements; nil means DefaultProviders().
	Provider Provider
	// Secrets reads secretRefs; nil means a metric with a secretRef errors.
	Secrets SecretFunc
	// Parallel bounds concurrent measurements; 0 means 4.
	Parallel int
}

// job is one metric of the analysis.
type job struct {
	metric *v1alpha1.Metric
	conds  verdict.Conditions
	query  Query
	secret string
	prev   v1alpha1.MetricResult
	meas   *v1alpha1.Measurement
	// pending: the measurement is under way (ErrPending), none recorded.
	pending bool
}

// PendingPoll is how soon a measurement under way is looked at again.
const PendingPoll = 2 * time.Second

// Run takes the measurements that are due at in.Now, advances each
// metric, and aggregates. Template problems are returned wrapped in
// ErrInvalidTemplate before anything is measured; provider failures are not
// returned but recorded as Error measurements. A cancelled ctx returns its
// error and records nothing.
func (r *Runner) Run(ctx context.Context, in Input) (Report, error) {
	jobs, err := prepare(in)
	if err != nil {
		return Report{}, err
	}
	var due []*job
	for _, j := range jobs {
		if verdict.Due(j.metric, j.prev, in.StartedAt, in.Now) {
			due = append(due, j)
		}
	}
	writes := &Writes{}
	r.measure(ctx, due, in.Now, writes)
	if err := ctx.Err(); err != nil {
		// Cancelled (shutdown): measurements cut short are not the
		// provider's fault and must not count as errors.
		return Report{}, err
	}
	rep := Report{Measured: len(due)}
	if !writes.Empty() {
		rep.Writes = writes
	}
	entries := make([]verdict.Entry, 0, len(jobs))
	for _, j := range jobs {
		res, _ := verdict.Advance(j.metric, j.prev, j.meas)
		rep.Results = append(rep.Results, res)
		entries = append(entries, verdict.Entry{Metric: j.metric, Result: res})
		next := verdict.NextMeasurementAt(j.metric, res, in.StartedAt)
		if j.pending {
			next = in.Now.Add(PendingPoll)
		}
		if !next.IsZero() && (rep.NextAt.IsZero() || next.Before(rep.NextAt)) {
			rep.NextAt = next
		}
	}
	rep.Outcome = verdict.Aggregate(entries)
	if rep.Outcome.Phase.Terminal() {
		rep.NextAt = time.Time{}
	}
	return rep, nil
}

// prepare resolves args, compiles conditions and expands queries.
func prepare(in Input) ([]*job, error) {
	var jobs []*job
	var errs []error
	for ti := range in.Templates {
		t := &in.Templates[ti]
		args, err := verdict.ResolveArgs(t.Spec.Args, in.Args)
		if err != nil {
			errs = append(errs, fmt.Errorf("template %q: %w", t.Name, err))
			continue
		}
		for mi := range t.Spec.Metrics {
			m := &t.Spec.Metrics[mi]
			j, err := newJob(m, args, in.Facts)
			if err != nil {
				errs = append(errs, fmt.Errorf("template %q metric %q: %w", t.Name, m.Name, err))
				continue
			}
			j.prev = previous(in.Previous, t.Name, m.Name, in.Step)
			if j.query.Job != nil {
				p := j.prev
				j.query.Check = &Check{Namespace: in.Facts.Namespace, Rollout: in.Facts.Name, Revision: in.Facts.CanaryRevision,
					Template: t.Name, Metric: m.Name, Step: in.Step, Attempt: in.Attempt, Index: p.Successful + p.Failed + p.Inconclusive + p.Errors}
				j.query.Owner = in.Owner
			}
			jobs = append(jobs, j)
		}
	}
	if len(jobs) > verdict.MaxResults {
		errs = append(errs, fmt.Errorf("the analysis has %d metrics; status holds at most %d", len(jobs), verdict.MaxResults))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidTemplate, err)
	}
	return jobs, nil
}

func newJob(m *v1alpha1.Metric, args map[string]string, facts verdict.Facts) (*job, error) {
	conds, err := verdict.CompileMetric(m)
	if err != nil {
		return nil, err
	}
	j := &job{metric: m, conds: conds}
	switch p := m.Provider; {
	case p.Prometheus != nil:
		pm := p.Prometheus.DeepCopy()
		if pm.Query, err = verdict.Expand(pm.Query, args, facts); err != nil {
			return nil, fmt.Errorf("query: %w", err)
		}
		j.query.Prometheus = pm
		if pm.SecretRef != nil {
			j.secret = pm.SecretRef.Name
		}
	case p.Web != nil:
		w := p.Web.DeepCopy()
		if w.URL, err = verdict.Expand(w.URL, args, facts); err != nil {
			return nil, fmt.Errorf("url: %w", err)
		}
		j.query.Web = w
		if w.SecretRef != nil {
			j.secret = w.SecretRef.Name
		}
	case p.Job != nil:
		spec, err := verdict.JobSpec(p.Job, func(s string) (string, error) { return verdict.Expand(s, args, facts) })
		if err != nil {
			return nil, fmt.Errorf("job spec: %w", err)
		}
		j.query.Job = spec
	default:
		return nil, errors.New("provider: set one of prometheus, web or job")
	}
	return j, nil
}

func previous(all []v1alpha1.MetricResult, template, metric string, step int32) v1alpha1.MetricResult {
	for _, r := range all {
		if r.Template == template && r.Metric == metric && r.Step == step {
			return r
		}
	}
	return v1alpha1.MetricResult{Template: template, Metric: metric, Step: step}
}
