package metrics

import (
	"errors"
	"time"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/luascripts"
)

// GitObserver returns the observer to put in the gitsync.Options of the
// Repository object namespace/repository; nil when m is nil.
func (m *Metrics) GitObserver(namespace, repository string) gitsync.ObserveFunc {
	if m == nil {
		return nil
	}
	return func(op gitsync.Operation, d time.Duration, err error) {
		result := ResultSuccess
		switch {
		case errors.Is(err, gitsync.ErrNonFastForward):
			result = ResultRejected
		case err != nil:
			result = ResultError
		}
		m.git.WithLabelValues(namespace, repository, string(op), result).Observe(d.Seconds())
	}
}

// LuaObserver returns the observer to put in traffic.Options.LuaObserve;
// nil when m is nil. Scripts are labelled by their ConfigMap key, which
// built-in scripts have too.
func (m *Metrics) LuaObserver() luascripts.ObserveFunc {
	if m == nil {
		return nil
	}
	return func(s luascripts.Script, d time.Duration, err error) {
		result := ResultSuccess
		switch {
		case errors.Is(err, luascripts.ErrTimeout):
			result = ResultTimeout
		case errors.Is(err, luascripts.ErrLimit):
			result = ResultLimit
		case err != nil:
			result = ResultError
		}
		script := s.Key
		if script == "" {
			script = s.Name
		}
		m.lua.WithLabelValues(script, result).Observe(d.Seconds())
	}
}

// Measured counts the measurements an analysis run took: the growth of
// each metric's counters from prev (the results the run started from) to
// results (what it returned). Results are matched by template, metric and
// step.
func (m *Metrics) Measured(namespace, name string, prev, results []v1alpha1.MetricResult) {
	if m == nil {
		return
	}
	for _, r := range results {
		var p v1alpha1.MetricResult
		for _, x := range prev {
			if x.Template == r.Template && x.Metric == r.Metric && x.Step == r.Step {
				p = x
				break
			}
		}
		for _, c := range []struct {
			phase     string
			now, then int32
		}{
			{"Successful", r.Successful, p.Successful},
			{"Failed", r.Failed, p.Failed},
			{"Inconclusive", r.Inconclusive, p.Inconclusive},
			{"Error", r.Errors, p.Errors},
		} {
			if c.now > c.then {
				m.measurements.WithLabelValues(namespace, name, r.Template, r.Metric, c.phase).Add(float64(c.now - c.then))
			}
		}
	}
}
