package analysis

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/rollgate/rollgate/strategy/verdict"
)

// maxPrometheusBody caps a Prometheus response (a large matrix).
const maxPrometheusBody = 16 << 20

// PrometheusProvider queries the Prometheus HTTP API (or any compatible
// one: Thanos, Mimir, VictoriaMetrics) with instant or range queries.
type PrometheusProvider struct{}

// Measure runs q.Prometheus.Query at q.Time, or over the range ending at
// q.Time, and converts the result to the CEL `result` shape: a scalar to a
// one-element list, an instant vector to one number per series, a matrix to
// one list of numbers per series. Series are ordered by their labels so
// result[i] is stable across measurements. An empty vector or matrix comes
// back as an empty Value, which strategy/verdict judges an Error.
func (p *PrometheusProvider) Measure(ctx context.Context, q Query) (Value, error) {
	pm := q.Prometheus
	if pm == nil {
		return Value{}, ErrNoProvider
	}
	timeout := timeoutOf(pm.Timeout)
	client, err := newClient(clientOptions{target: pm.Address, secret: q.Secret, headers: headerMap(pm.Headers),
		insecure: pm.InsecureSkipVerify, timeout: timeout, maxBody: maxPrometheusBody})
	if err != nil {
		return Value{}, err
	}
	defer client.CloseIdleConnections()
	c, err := api.NewClient(api.Config{Address: pm.Address, Client: client})
	if err != nil {
		return Value{}, fmt.Errorf("prometheus client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	at := q.Time
	if at.IsZero() {
		at = time.Now()
	}
	var res model.Value
	if r := pm.Range; r != nil {
		rng := promv1.Range{Start: at.Add(-r.Duration.Duration), End: at, Step: r.Step.Duration}
		res, _, err = promv1.NewAPI(c).QueryRange(ctx, pm.Query, rng, promv1.WithTimeout(timeout))
	} else {
		res, _, err = promv1.NewAPI(c).Query(ctx, pm.Query, at, promv1.WithTimeout(timeout))
	}
	if err != nil {
		return Value{}, redact(fmt.Errorf("prometheus query: %w", err), q.Secret)
	}
	return fromModel(res)
}

// fromModel converts a Prometheus result to a Value.
func fromModel(v model.Value) (Value, error) {
	switch r := v.(type) {
	case *model.Scalar:
		return verdict.List([]float64{float64(r.Value)}), nil
	case model.Vector:
		sort.Slice(r, func(i, j int) bool { return r[i].Metric.Before(r[j].Metric) })
		out := make([]float64, 0, len(r))
		for _, s := range r {
			if s.Histogram != nil {
				return Value{}, fmt.Errorf("series %s is a native histogram: reduce it to a number (histogram_quantile, histogram_count)", s.Metric)
			}
			out = append(out, float64(s.Value))
		}
		return verdict.List(out), nil
	case model.Matrix:
		sort.Slice(r, func(i, j int) bool { return r[i].Metric.Before(r[j].Metric) })
		out := make([][]float64, 0, len(r))
		for _, s := range r {
			if len(s.Histograms) > 0 {
				return Value{}, fmt.Errorf("series %s has native histogram samples: reduce it to a number", s.Metric)
			}
			vals := make([]float64, 0, len(s.Values))
			for _, p := range s.Values {
				vals = append(vals, float64(p.Value))
			}
			out = append(out, vals)
		}
		return verdict.Matrix(out), nil
	case nil:
		return verdict.List(nil), nil
	default:
		return Value{}, fmt.Errorf("query returned a %s, not a number", v.Type())
	}
}
