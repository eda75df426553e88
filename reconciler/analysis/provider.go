package analysis

import (
	"context"
	"errors"
	"net/http"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/strategy/verdict"
)

// Value is a measured value in the shape of the CEL `result` variable.
type Value = verdict.Value

// DefaultTimeout bounds one query when the metric sets no timeout.
const DefaultTimeout = 30 * time.Second

// Query is one measurement to take, with placeholders already expanded.
// Exactly one of Prometheus, Web and Job is set.
type Query struct {
	// Prometheus is the metric's Prometheus provider.
	Prometheus *v1alpha1.PrometheusMetric
	// Web is the metric's web provider.
	Web *v1alpha1.WebMetric
	// Job is the spec of a Job check's Job, with rollgate's defaults, and
	// Check the measurement it takes.
	Job   *batchv1.JobSpec
	Check *Check
	// Owner, when set, owns what a measurement creates (a Job check's
	// Job): the Rollout.
	Owner *metav1.OwnerReference
	// Note, when set, receives what the provider has to add to the
	// measurement's message (a Job's outcome and log).
	Note *string
	// Writes collects what the measurement needs written (a Job check's
	// Jobs to create or delete): providers only read.
	Writes *Writes
	// Secret is the data of the provider's secretRef; nil without one.
	Secret SecretData
	// Time is when the instant query is evaluated and where a range
	// query ends.
	Time time.Time
}

// Provider takes one measurement. Errors never contain credentials.
type Provider interface {
	Measure(ctx context.Context, q Query) (Value, error)
}

// ErrNoProvider: the query names no provider this process can serve.
var ErrNoProvider = errors.New("no metric provider")

// Providers routes each query to the provider of its kind.
type Providers struct {
	// Prometheus serves queries with Query.Prometheus set.
	Prometheus Provider
	// Web serves queries with Query.Web set.
	Web Provider
	// Job serves queries with Query.Job set; nil refuses them.
	Job Provider
}

// DefaultProviders returns the built-in Prometheus and web providers.
func DefaultProviders() Providers {
	return Providers{Prometheus: &PrometheusProvider{}, Web: &WebProvider{}}
}

// Measure implements Provider.
func (p Providers) Measure(ctx context.Context, q Query) (Value, error) {
	switch {
	case q.Prometheus != nil && p.Prometheus != nil:
		return p.Prometheus.Measure(ctx, q)
	case q.Web != nil && p.Web != nil:
		return p.Web.Measure(ctx, q)
	case q.Job != nil && p.Job != nil:
		return p.Job.Measure(ctx, q)
	}
	return Value{}, ErrNoProvider
}

// headerMap indexes headers by canonical name; of two with the same name,
// the last wins.
func headerMap(hs []v1alpha1.HTTPHeader) map[string]string {
	m := make(map[string]string, len(hs))
	for _, h := range hs {
		m[http.CanonicalHeaderKey(h.Name)] = h.Value
	}
	return m
}

func timeoutOf(d *metav1.Duration) time.Duration {
	if d == nil || d.Duration <= 0 {
		return DefaultTimeout
	}
	return d.Duration
}
