package analysis

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/strategy/verdict"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// fakeProvider answers from a function and records the queries.
type fakeProvider struct {
	mu      sync.Mutex
	queries []Query
	answer  func(Query) (Value, error)
}

func (f *fakeProvider) Measure(_ context.Context, q Query) (Value, error) {
	f.mu.Lock()
	f.queries = append(f.queries, q)
	f.mu.Unlock()
	return f.answer(q)
}

func i32(v int32) *int32 { return &v }

func strp(s string) *string { return &s }

func template(name string, metrics ...v1alpha1.Metric) v1alpha1.AnalysisTemplate {
	return v1alpha1.AnalysisTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "demo"},
		Spec: v1alpha1.AnalysisTemplateSpec{Args: []v1alpha1.TemplateArg{{Name: "service"}, {Name: "window", Value: strp("1m")}}, Metrics: metrics}}
}

func promMetric(name, cond string) v1alpha1.Metric {
	return v1alpha1.Metric{Name: name, Interval: &metav1.Duration{Duration: time.Minute}, Count: i32(3), SuccessCondition: cond,
		Provider: v1alpha1.MetricProvider{Prometheus: &v1alpha1.PrometheusMetric{Address: "http://prom:9090",
			Query: `x{svc="{{args.service}}",ns="{{rollout.namespace}}",rev="{{rollout.canaryRevision}}"}[{{args.window}}]`}}}
}

func input(tmpls ...v1alpha1.AnalysisTemplate) Input {
	return Input{Templates: tmpls, Args: []v1alpha1.AnalysisArg{{Name: "service", Value: "echo"}},
		Facts: verdict.Facts{Namespace: "demo", Name: "echo", CanaryRevision: "abc"}, Step: 2, StartedAt: t0, Now: t0}
}

func TestRunExpandsAndSchedules(t *testing.T) {
	fp := &fakeProvider{answer: func(Query) (Value, error) { return verdict.List([]float64{0.01}), nil }}
	r := &Runner{Provider: fp}
	in := input(template("success-rate", promMetric("error-rate", "result[0] < 0.05")))

	rep, err := r.Run(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fp.queries[0].Prometheus.Query, `x{svc="echo",ns="demo",rev="abc"}[1m]`; got != want {
		t.Fatalf("query = %s, want %s", got, want)
	}
	if !fp.queries[0].Time.Equal(t0) {
		t.Fatalf("query time = %v, want now", fp.queries[0].Time)
	}
	if rep.Measured != 1 || rep.Outcome.Phase != verdict.PhaseRunning || !rep.NextAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("first run: measured %d, outcome %+v, next %v", rep.Measured, rep.Outcome, rep.NextAt)
	}
	res := rep.Results[0]
	if res.Template != "success-rate" || res.Metric != "error-rate" || res.Step != 2 || res.Successful != 1 {
		t.Fatalf("result = %+v", res)
	}

	// Thirty seconds later nothing is due.
	in.Previous, in.Now = rep.Results, t0.Add(30*time.Second)
	rep, _ = r.Run(context.Background(), in)
	if rep.Measured != 0 || len(fp.queries) != 1 {
		t.Fatalf("not due: measured %d, queries %d", rep.Measured, len(fp.queries))
	}
	// Two more intervals complete the count of three.
	for i := 1; i <= 2; i++ {
		in.Previous, in.Now = rep.Results, t0.Add(time.Duration(i)*time.Minute)
		rep, _ = r.Run(context.Background(), in)
	}
	if rep.Outcome.Phase != verdict.PhaseSuccessful || !rep.NextAt.IsZero() {
		t.Fatalf("after count: outcome %+v, next %v", rep.Outcome, rep.NextAt)
	}
}

func TestRunIgnoresOtherSteps(t *testing.T) {
	fp := &fakeProvider{answer: func(Query) (Value, error) { return verdict.List([]float64{0.01}), nil }}
	in := input(template("t", promMetric("m", "result[0] < 0.05")))
	in.Previous = []v1alpha1.MetricResult{{Template: "t", Metric: "m", Step: 1, Phase: "Failed", Failed: 1}}
	rep, err := (&Runner{Provider: fp}).Run(context.Background(), in)
	if err != nil || rep.Results[0].Failed != 0 || rep.Results[0].Successful != 1 {
		t.Fatalf("step 2 picked up step 1's result: %+v, %v", rep.Results, err)
	}
}

func TestRunInvalidTemplate(t *testing.T) {
	fp := &fakeProvider{answer: func(Query) (Value, error) { t.Fatal("measured an invalid template"); return Value{}, nil }}
	bad := promMetric("bad", "result[0] <")
	unknown := promMetric("unknown", "true")
	unknown.Provider.Prometheus.Query = "{{rollout.image}}"
	in := input(template("t", bad, unknown))
	in.Args = nil
	_, err := (&Runner{Provider: fp}).Run(context.Background(), in)
	if !errors.Is(err, ErrInvalidTemplate) {
		t.Fatalf("err = %v, want ErrInvalidTemplate", err)
	}
	for _, want := range []string{`template "t": missing arg: arg "service" has no default`} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("err = %v, want it to contain %q", err, want)
		}
	}
	in.Args = []v1alpha1.AnalysisArg{{Name: "service", Value: "x"}}
	_, err = (&Runner{Provider: fp}).Run(context.Background(), in)
	for _, want := range []string{`template "t" metric "bad": successCondition:`, `template "t" metric "unknown": query: bad placeholder: unknown placeholder {{rollout.image}}`} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("err = %v, want it to contain %q", err, want)
		}
	}
}

func TestRunSecrets(t *testing.T) {
	fp := &fakeProvider{answer: func(q Query) (Value, error) {
		if string(q.Secret["token"]) != "tok" {
			return Value{}, errors.New("no token")
		}
		return verdict.List([]float64{0.01}), nil
	}}
	a, b := promMetric("a", "result[0] < 0.05"), promMetric("b", "result[0] < 0.05")
	a.Provider.Prometheus.SecretRef = &v1alpha1.LocalObjectReference{Name: "prom-auth"}
	b.Provider.Prometheus.SecretRef = &v1alpha1.LocalObjectReference{Name: "prom-auth"}
	reads := 0
	r := &Runner{Provider: fp, Secrets: func(_ context.Context, name string) (map[string][]byte, error) {
		reads++
		if name != "prom-auth" {
			return nil, errors.New("not found")
		}
		return map[string][]byte{"token": []byte("tok")}, nil
	}}
	rep, err := r.Run(context.Background(), input(template("t", a, b)))
	if err != nil || reads != 1 || rep.Results[0].Successful != 1 || rep.Results[1].Successful != 1 {
		t.Fatalf("reads %d, results %+v, err %v; want one read and two successes", reads, rep.Results, err)
	}
	a.Provider.Prometheus.SecretRef.Name = "missing"
	rep, _ = r.Run(context.Background(), input(template("t", a)))
	if m := rep.Results[0].Measurements[0]; m.Phase != "Error" || m.Message != `secret "missing": not found` {
		t.Fatalf("missing secret: measurement %+v, want an Error naming the secret", m)
	}
}

func TestRunFailureMessage(t *testing.T) {
	fp := &fakeProvider{answer: func(Query) (Value, error) { return verdict.List([]float64{0.12}), nil }}
	rep, err := (&Runner{Provider: fp}).Run(context.Background(), input(template("success-rate", promMetric("error-rate", "result[0] < 0.05"))))
	if err != nil {
		t.Fatal(err)
	}
	want := `metric "error-rate" value 0.12 failed condition "result[0] < 0.05"`
	if rep.Outcome.Phase != verdict.PhaseFailed || !strings.HasPrefix(rep.Outcome.Message, want) || !rep.NextAt.IsZero() {
		t.Fatalf("outcome %+v next %v; want Failed starting with %s", rep.Outcome, rep.NextAt, want)
	}
}

func TestRunTooManyMetrics(t *testing.T) {
	var ms []v1alpha1.Metric
	for i := 0; i <= verdict.MaxResults; i++ {
		ms = append(ms, promMetric(string(rune('a'+i)), "true"))
	}
	_, err := (&Runner{Provider: &fakeProvider{}}).Run(context.Background(), input(template("t", ms...)))
	if !errors.Is(err, ErrInvalidTemplate) || !strings.Contains(err.Error(), "status holds at most 20") {
		t.Fatalf("err = %v", err)
	}
}

func TestRunCancelledRecordsNothing(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	fp := &fakeProvider{answer: func(Query) (Value, error) { cancel(); return Value{}, context.Canceled }}
	rep, err := (&Runner{Provider: fp}).Run(ctx, input(template("t", promMetric("m", "true"))))
	if !errors.Is(err, context.Canceled) || len(rep.Results) != 0 {
		t.Fatalf("Run = %+v, %v; want context.Canceled and no results", rep, err)
	}
}
