package metrics_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/util/wait"
	// Both register controller-runtime's collectors in its Registry: the
	// reconcile metrics and the admission webhook metrics.
	_ "sigs.k8s.io/controller-runtime/pkg/controller"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	_ "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/luascripts"
	"github.com/rollgate/rollgate/reconciler/metrics"
	"github.com/rollgate/rollgate/test/prom"
	"github.com/rollgate/rollgate/test/repo"
)

// dashboardPath is the Grafana dashboard shipped in the chart.
func dashboardPath() string {
	return filepath.Join(repo.Root(), "charts", "rollgate", "dashboards", "rollgate.json")
}

// dashboardQueries returns every PromQL expression of the dashboard: the
// panels' targets and the template variables' queries.
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(dashboardPath())
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Type       string `json:"type"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardPath(), err)
	}
	var out []string
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			if tg.Expr == "" {
				t.Errorf("panel %q has a target without an expression", p.Title)
			}
			out = append(out, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		if v.Type == "query" {
			out = append(out, v.Definition)
		}
	}
	if len(out) < 20 {
		t.Fatalf("only %d queries found in the dashboard; is it the right file?", len(out))
	}
	return out
}

// metricNameRE matches the names of rollgate's and controller-runtime's
// metrics in PromQL.
var metricNameRE = regexp.MustCompile(`\b(?:rollgate|controller_runtime)_[a-zA-Z0-9_]*[a-zA-Z0-9]`)

// selectorRE matches a metric selector with label matchers, and labelRE a
// matcher's label name.
var (
	selectorRE = regexp.MustCompile(`\b((?:rollgate|controller_runtime)_[a-zA-Z0-9_]+)\{([^}]*)\}`)
	labelRE    = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
)

// touchAll records something in every collector, errors included.
func touchAll(t *testing.T, m *metrics.Metrics) {
	t.Helper()
	feedRelease(m, "shop", "web")
	m.SetRollout(rollout("shop", "api", v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseProgressing, CanaryRevision: "r2", StableRevision: "r1",
		CurrentStepIndex: 1, StepCount: 2, CanaryWeight: 10,
		AwaitingApproval: &v1alpha1.ApprovalRequest{Revision: "r2", Step: 1, Since: *at(time.Now().Add(-time.Hour))}}))
	m.Measured("shop", "web", nil, []v1alpha1.MetricResult{{Template: "slo", Metric: "errors", Successful: 1, Errors: 1}})
	git := m.GitObserver("shop", "apps")
	for _, op := range []gitsync.Operation{gitsync.OpList, gitsync.OpFetch, gitsync.OpPush} {
		git(op, 100*time.Millisecond, nil)
		git(op, time.Second, errors.New("connection refused"))
	}
	lua := m.LuaObserver()
	s := luascripts.Script{Name: "built-in ingress.nginx", Key: luascripts.IngressKey("nginx"), BuiltIn: true}
	lua(s, time.Millisecond, nil)
	lua(s, time.Second, &luascripts.ScriptError{Script: s.Name, Kind: luascripts.ErrTimeout})
	m.Woken("Pod", 3)
	m.Woken(metrics.SourceSpec, 1)
}

// exported gathers reg and returns every series name it exposes (a
// histogram's _bucket, _sum and _count) with the label names of each.
func exported(t *testing.T, reg prometheus.Gatherer) map[string]map[string]bool {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]bool{}
	for _, f := range families {
		labels := map[string]bool{}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = true
			}
		}
		names := []string{f.GetName()}
		if f.GetType().String() == "HISTOGRAM" {
			names = []string{f.GetName() + "_bucket", f.GetName() + "_sum", f.GetName() + "_count"}
		}
		for _, n := range names {
			out[n] = map[string]bool{}
			for l := range labels {
				out[n][l] = true
			}
			if strings.HasSuffix(n, "_bucket") {
				out[n]["le"] = true
			}
		}
	}
	return out
}

// registeredInControllerRuntime reports whether controller-runtime's
// Registry has a metric called name (a histogram's series are named after
// it): registering another collector of that name fails when it has.
func registeredInControllerRuntime(name string) bool {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && registeredInControllerRuntime(base) {
			return true
		}
	}
	probe := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "probe of the dashboard test"})
	if err := ctrlmetrics.Registry.Register(probe); err != nil {
		return true
	}
	ctrlmetrics.Registry.Unregister(probe)
	return false
}

// The dashboard cannot drift from the code: every metric it queries is
// exported by Metrics or by controller-runtime, and every label it selects
// a rollgate metric by is one of that metric's labels.
func TestDashboardUsesExportedMetrics(t *testing.T) {
	m, reg := newMetrics(t)
	touchAll(t, m)
	have := exported(t, reg)
	if got, want := len(have), 0; got == want {
		t.Fatal("nothing gathered")
	}
	used := map[string]bool{}
	for _, q := range dashboardQueries(t) {
		for _, name := range metricNameRE.FindAllString(q, -1) {
			used[name] = true
			switch {
			case strings.HasPrefix(name, "rollgate_"):
				if have[name] == nil {
					t.Errorf("the dashboard queries %s, which Metrics does not export (query %s)", name, q)
				}
			case !registeredInControllerRuntime(name):
				t.Errorf("the dashboard queries %s, which controller-runtime does not export (query %s)", name, q)
			}
		}
		for _, sel := range selectorRE.FindAllStringSubmatch(q, -1) {
			labels := have[sel[1]]
			if labels == nil {
				continue // reported above, or controller-runtime's
			}
			for _, l := range labelRE.FindAllStringSubmatch(sel[2], -1) {
				if name := l[1]; name != "job" && !labels[name] {
					t.Errorf("the dashboard selects %s by label %q, which it does not have (query %s)", sel[1], name, q)
				}
			}
		}
	}
	// Every rollgate metric is on the dashboard.
	var missing []string
	for name := range have {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
		if !used[name] && !used[base+"_bucket"] && !used[base+"_count"] && !used[base] {
			missing = append(missing, base)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("metrics not on the dashboard: %v", missing)
	}
}

// grafanaVars replaces the dashboard's variables by values Prometheus
// accepts, and a Grafana label_values(selector, label) query by its
// selector.
func grafanaVars(q string) string {
	q = strings.NewReplacer(`$__rate_interval`, `1m`, `$__range`, `5m`, `$job`, `rollgate`, `$namespace`, `.*`).Replace(q)
	if inner, ok := strings.CutPrefix(q, "label_values("); ok {
		q = inner[:strings.LastIndex(inner, ",")]
	}
	return q
}

// Every expression of the dashboard is valid PromQL that a real Prometheus
// evaluates against what rollgate serves.
func TestDashboardQueriesRunOnPrometheus(t *testing.T) {
	m, reg := newMetrics(t)
	touchAll(t, m)
	srv := httptest.NewServer(promhttp.HandlerFor(prometheus.Gatherers{reg, ctrlmetrics.Registry}, promhttp.HandlerOpts{}))
	defer srv.Close()
	p := prom.Start(t, prom.Options{Targets: []string{strings.TrimPrefix(srv.URL, "http://")}, ScrapeInterval: 500 * time.Millisecond})
	client, err := promapi.NewClient(promapi.Config{Address: p.URL})
	if err != nil {
		t.Fatal(err)
	}
	api := promv1.NewAPI(client)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		v, _, err := api.Query(ctx, `count_over_time(rollgate_rollout_phase{job="rollgate",name="web",phase="Healthy"}[1m])`, time.Now())
		vec, ok := v.(model.Vector)
		return err == nil && ok && len(vec) == 1 && vec[0].Value >= 2, nil
	})
	if err != nil {
		t.Fatalf("rollgate's metrics were not scraped twice: %v", err)
	}
	for _, q := range dashboardQueries(t) {
		v, warnings, err := api.Query(ctx, grafanaVars(q), time.Now())
		if err != nil {
			t.Errorf("query %s: %v", grafanaVars(q), err)
			continue
		}
		if vec, ok := v.(model.Vector); ok && len(vec) == 0 {
			t.Logf("no data (fine for this test): %s", grafanaVars(q))
		}
		if len(warnings) > 0 {
			t.Logf("warnings for %s: %v", q, warnings)
		}
	}
}
