package analysis

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/strategy/verdict"
	"github.com/rollgate/rollgate/test/prom"
)

// app is a scrape target whose request counters grow at rates the test
// sets: 100 requests/s, of which errPerSec fail.
type app struct {
	mu        sync.Mutex
	last      time.Time
	ok, errs  float64
	errPerSec float64
}

func (a *app) setErrorRate(perSec float64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.advance()
	a.errPerSec = perSec
}

func (a *app) advance() {
	now := time.Now()
	if !a.last.IsZero() {
		dt := now.Sub(a.last).Seconds()
		a.errs += a.errPerSec * dt
		a.ok += (100 - a.errPerSec) * dt
	}
	a.last = now
}

func (a *app) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	a.mu.Lock()
	a.advance()
	ok, errs := a.ok, a.errs
	a.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	fmt.Fprintf(w, "# TYPE http_requests_total counter\n")
	fmt.Fprintf(w, "http_requests_total{service=\"echo\",code=\"200\"} %g\n", ok)
	fmt.Fprintf(w, "http_requests_total{service=\"echo\",code=\"500\"} %g\n", errs)
	fmt.Fprintf(w, "# TYPE build_info gauge\nbuild_info{version=\"1\"} 1\nbuild_info{version=\"2\"} 2\n")
}

// startPrometheus serves an app and a Prometheus scraping it every second,
// and waits until a rate over the app's counters can be computed.
func startPrometheus(t testing.TB) (*app, *prom.Server) {
	t.Helper()
	a := &app{}
	target := httptest.NewServer(a)
	t.Cleanup(target.Close)
	srv := prom.Start(t, prom.Options{Targets: []string{strings.TrimPrefix(target.URL, "http://")}, ScrapeInterval: time.Second})
	q := Query{Prometheus: &v1alpha1.PrometheusMetric{Address: srv.URL, Query: echoErrorRate}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		q.Time = time.Now()
		v, err := (&PrometheusProvider{}).Measure(context.Background(), q)
		if err == nil && !v.Empty() && !v.HasNaN() {
			return a, srv
		}
		if time.Now().After(deadline) {
			t.Fatalf("no error rate from Prometheus after 30s: %v %v\n%s", v, err, srv.LogTail(10))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

const errorRateQuery = `sum(rate(http_requests_total{service="{{args.service}}",code="500"}[3s])) / sum(rate(http_requests_total{service="{{args.service}}"}[3s]))`

// echoErrorRate is errorRateQuery expanded for service "echo".
var echoErrorRate = strings.ReplaceAll(errorRateQuery, "{{args.service}}", "echo")

func errorRateTemplate(address string, count, errLimit int32) v1alpha1.AnalysisTemplate {
	m := v1alpha1.Metric{Name: "error-rate", Interval: &metav1.Duration{Duration: time.Second}, Count: &count,
		ConsecutiveErrorLimit: &errLimit, SuccessCondition: "result[0] < 0.05",
		Provider: v1alpha1.MetricProvider{Prometheus: &v1alpha1.PrometheusMetric{Address: address, Query: errorRateQuery}}}
	return v1alpha1.AnalysisTemplate{ObjectMeta: metav1.ObjectMeta{Name: "success-rate"},
		Spec: v1alpha1.AnalysisTemplateSpec{Args: []v1alpha1.TemplateArg{{Name: "service", Value: strp("echo")}}, Metrics: []v1alpha1.Metric{m}}}
}

// analyse runs the analysis on the wall clock until it ends, calling
// between after each Run that measured, and returns the last report.
func analyse(t *testing.T, tmpl v1alpha1.AnalysisTemplate, between func(rep Report)) Report {
	t.Helper()
	in := Input{Templates: []v1alpha1.AnalysisTemplate{tmpl}, Step: 1, StartedAt: time.Now()}
	deadline := time.Now().Add(60 * time.Second)
	for {
		in.Now = time.Now()
		rep, err := (&Runner{}).Run(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		in.Previous = rep.Results
		if rep.Outcome.Phase.Terminal() {
			return rep
		}
		if rep.Measured > 0 && between != nil {
			between(rep)
		}
		if time.Now().After(deadline) {
			t.Fatalf("analysis still %s after 60s: %+v", rep.Outcome.Phase, rep.Results)
		}
		time.Sleep(time.Until(rep.NextAt))
	}
}

func TestPrometheusHealthyMetricSucceeds(t *testing.T) {
	_, srv := startPrometheus(t)
	rep := analyse(t, errorRateTemplate(srv.URL, 3, 4), nil)
	if rep.Outcome.Phase != verdict.PhaseSuccessful || rep.Results[0].Successful != 3 {
		t.Fatalf("outcome %+v, result %+v; want 3 successful measurements", rep.Outcome, rep.Results[0])
	}
	if v := rep.Results[0].Measurements[2].Value; v != "0" {
		t.Fatalf("error rate = %s, want 0", v)
	}
}

func TestPrometheusRisingErrorRateFails(t *testing.T) {
	a, srv := startPrometheus(t)
	rep := analyse(t, errorRateTemplate(srv.URL, 30, 4), func(rep Report) {
		if rep.Results[0].Successful == 2 {
			a.setErrorRate(20) // 20% of requests fail from now on
		}
	})
	res := rep.Results[0]
	if rep.Outcome.Phase != verdict.PhaseFailed || res.Successful < 2 || res.Failed != 1 {
		t.Fatalf("outcome %+v, result %+v; want Failed after 2 good measurements", rep.Outcome, res)
	}
	if !strings.HasPrefix(rep.Outcome.Message, `metric "error-rate" value 0.`) ||
		!strings.Contains(rep.Outcome.Message, `failed condition "result[0] < 0.05"`) {
		t.Fatalf("message %q does not name the metric, its value and the condition", rep.Outcome.Message)
	}
	t.Logf("outcome: %s", rep.Outcome.Message)
}

func TestPrometheusDownFailsSafe(t *testing.T) {
	_, srv := startPrometheus(t)
	rep := analyse(t, errorRateTemplate(srv.URL, 100, 2), func(rep Report) {
		if rep.Results[0].Successful == 2 {
			if err := srv.Close(); err != nil {
				t.Errorf("stop prometheus: %v", err)
			}
		}
	})
	res := rep.Results[0]
	if rep.Outcome.Phase != verdict.PhaseError || res.Successful != 2 || res.Errors != 3 || res.ConsecutiveErrors != 3 {
		t.Fatalf("outcome %+v, result %+v; want Error after 2 good and 3 failed measurements", rep.Outcome, res)
	}
	if !strings.Contains(rep.Outcome.Message, "connection refused") || !strings.Contains(rep.Outcome.Message, "3 consecutive errors, consecutiveErrorLimit 2") {
		t.Fatalf("message %q does not say why", rep.Outcome.Message)
	}
	t.Logf("outcome: %s", rep.Outcome.Message)
}

func TestPrometheusResultShapes(t *testing.T) {
	_, srv := startPrometheus(t)
	for _, tc := range []struct {
		name, query string
		rng         *v1alpha1.PrometheusRange
		kind        verdict.Kind
		cond        string // must hold for the value
	}{
		{"scalar", "scalar(vector(0.5))", nil, verdict.KindList, "result == [0.5]"},
		{"vector sorted by labels", `build_info`, nil, verdict.KindList, "result == [1.0, 2.0]"},
		{"empty vector", `nonexistent_metric`, nil, verdict.KindList, "size(result) == 0"},
		{"matrix", `build_info`, &v1alpha1.PrometheusRange{Duration: metav1.Duration{Duration: 2 * time.Second},
			Step: metav1.Duration{Duration: time.Second}}, verdict.KindMatrix,
			"size(result) == 2 && size(result[1]) >= 2 && result[0].all(v, v == 1.0) && result[1].all(v, v == 2.0)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := Query{Time: time.Now(), Prometheus: &v1alpha1.PrometheusMetric{Address: srv.URL, Query: tc.query, Range: tc.rng}}
			v, err := (&PrometheusProvider{}).Measure(context.Background(), q)
			if err != nil || v.Kind() != tc.kind {
				t.Fatalf("Measure(%s) = %v (kind %v), %v; want kind %v", tc.query, v, v.Kind(), err, tc.kind)
			}
			c, err := verdict.Compile(tc.cond)
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := c.Eval(v); !ok || err != nil {
				t.Fatalf("Measure(%s) = %v; want %s", tc.query, v, tc.cond)
			}
		})
	}
	q := Query{Time: time.Now(), Prometheus: &v1alpha1.PrometheusMetric{Address: srv.URL, Query: "sum(("}}
	if _, err := (&PrometheusProvider{}).Measure(context.Background(), q); err == nil || !strings.Contains(err.Error(), "bad_data") {
		t.Fatalf("bad query: err = %v, want Prometheus' bad_data", err)
	}
}

func BenchmarkPrometheusInstantQuery(b *testing.B) {
	_, srv := startPrometheus(b)
	q := Query{Prometheus: &v1alpha1.PrometheusMetric{Address: srv.URL, Query: echoErrorRate}}
	b.ResetTimer()
	for b.Loop() {
		q.Time = time.Now()
		if _, err := (&PrometheusProvider{}).Measure(context.Background(), q); err != nil {
			b.Fatal(err)
		}
	}
}
