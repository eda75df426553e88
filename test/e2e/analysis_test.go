package e2e

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/prom"
	"github.com/rollgate/rollgate/test/rig"
)

// The analysis of step 2 asks a real Prometheus for the canary's error
// rate; the canary is played by a metrics endpoint the test serves.
const (
	// errorRateQuery is the share of 5xx answers over the last 10 s.
	errorRateQuery = `sum(rate(http_requests_total{code="500"}[10s])) / sum(rate(http_requests_total[10s]))`
	// analysisInterval and analysisFailureLimit are the template's, for
	// the bound on the time from a failed measurement to the rollback.
	analysisInterval     = 2 * time.Second
	analysisFailureLimit = 0
	// analysedStep is the step that runs the analysis.
	analysedStep = 2
)

// analysedRollout has no manual gate: step 1 pauses for a second, step 2
// waits for its analysis, step 3 completes the release.
var analysedRollout = rig.Rollout{Name: "echoserver", Namespace: "demo", Steps: []string{
	`{traffic: "20%", replicas: 1, pause: {duration: 1}}`,
	`{traffic: "60%", replicas: "60%", analysis: {templates: [error-rate]}}`,
	`{traffic: "100%", replicas: "100%"}`,
}}.YAML()

// errorRateTemplate is the AnalysisTemplate of step 2, measuring with the
// Prometheus at promURL.
func errorRateTemplate(promURL string, count, consecutiveErrorLimit int) string {
	return fmt.Sprintf(`
apiVersion: rollgate.dev/v1alpha1
kind: AnalysisTemplate
metadata: {name: error-rate, namespace: demo}
spec:
  metrics:
  - name: error-rate
    interval: %s
    initialDelay: 2s
    count: %d
    failureLimit: %d
    consecutiveErrorLimit: %d
    successCondition: "result[0] < 0.05"
    provider:
      prometheus:
        address: %q
        query: %q
        timeout: 5s
`, analysisInterval, count, analysisFailureLimit, consecutiveErrorLimit, promURL, errorRateQuery)
}

// waitQueryable waits until Prometheus answers query with one number: a
// new target's first samples take about 5 s to become queryable, and
// rate() needs two of them.
func waitQueryable(w *world, promURL, query string) {
	w.T.Helper()
	c, err := promapi.NewClient(promapi.Config{Address: promURL})
	if err != nil {
		w.T.Fatal(err)
	}
	api := promv1.NewAPI(c)
	start := time.Now()
	w.Eventually(45*time.Second, "Prometheus answers "+query, func(ctx context.Context) (bool, error) {
		v, _, err := api.Query(ctx, query, time.Now())
		vec, ok := v.(model.Vector)
		return err == nil && ok && len(vec) == 1 && !math.IsNaN(float64(vec[0].Value)), nil
	})
	w.T.Logf("Prometheus answers the analysis query %v after it started", time.Since(start).Round(100*time.Millisecond))
}

// analysisStory is a workload running v1 under an analysed Rollout, with
// its error source and Prometheus.
type analysisStory struct {
	*world
	src  *prom.ErrorSource
	prom *prom.Server
	// v1 is the stable revision before the release.
	v1 string
}

// givenAnalysedWorkload starts the world, the error source (0% errors) and
// Prometheus, and applies v1, the template and the Rollout as Flux would.
func givenAnalysedWorkload(t *testing.T, count, consecutiveErrorLimit int) *analysisStory {
	t.Helper()
	w := newWorld(t)
	s := &analysisStory{world: w, src: prom.StartErrorSource(t)}
	s.prom = prom.Start(t, prom.Options{Targets: []string{s.src.Addr}, ScrapeInterval: time.Second})
	w.ApplyYAML(echoApp("echo:1.0"))
	w.ApplyYAML(errorRateTemplate(s.prom.URL, count, consecutiveErrorLimit))
	w.ApplyYAML(analysedRollout)
	w.Eventually(60*time.Second, "v1 running and the Rollout healthy", func(ctx context.Context) (bool, error) {
		ro := w.Rollout(w.NS, "echoserver")
		return w.Pods(w.NS, "echoserver")["echo:1.0"] == [2]int{5, 5} && conditions.IsReady(ro) &&
			ro.Status.StableRevision != "", nil
	})
	s.v1 = w.Rollout(w.NS, "echoserver").Status.StableRevision
	waitQueryable(w, s.prom.URL, errorRateQuery)
	return s
}

// follow polls the Rollout until check says done; an error from check
// fails the test with that error (something happened that must not). On a
// timeout it shows where the release stood.
func (s *analysisStory) follow(timeout time.Duration, what string, check func(ro *v1alpha1.Rollout) (bool, error)) *v1alpha1.Rollout {
	s.T.Helper()
	var ro *v1alpha1.Rollout
	var broken error
	_, err := rig.Wait(context.Background(), timeout, what, func(ctx context.Context) (bool, string, error) {
		ro = s.Rollout(s.NS, "echoserver")
		done, err := check(ro)
		if err != nil {
			broken = err
			return true, "", nil
		}
		return done, "", nil
	})
	switch {
	case broken != nil:
		s.T.Fatalf("while waiting for %s: %v", what, broken)
	case err != nil:
		st := ro.Status
		s.T.Fatalf("%s: not within %v; the release is at phase %s, step %d, state %s since %v: %q; analysis %+v",
			what, timeout, st.Phase, st.CurrentStepIndex, st.CurrentStepState, st.StepStartedAt, st.Message, st.Analysis)
	}
	return ro
}

// stepResult is the step's analysis result in status.analysis.
func stepResult(ro *v1alpha1.Rollout, step int32) *v1alpha1.MetricResult {
	for i := range ro.Status.Analysis {
		if r := &ro.Status.Analysis[i]; r.Step == step && r.Template == "error-rate" && r.Metric == "error-rate" {
			return r
		}
	}
	return nil
}

// firstWithPhase is the time of the oldest kept measurement with phase p.
func firstWithPhase(r *v1alpha1.MetricResult, p string) (time.Time, bool) {
	for _, m := range r.Measurements {
		if m.Phase == p {
			return m.At.Time, true
		}
	}
	return time.Time{}, false
}

// TestAnalysisPassesAndReleaseCompletes: with no errors the analysis of
// step 2 succeeds after its three measurements and the release completes.
func TestAnalysisPassesAndReleaseCompletes(t *testing.T) {
	s := givenAnalysedWorkload(t, 3, 2)

	// When the image changes in Git and Flux applies it.
	s.ApplyYAML(echoApp("echo:2.0"))

	// Then step 2 waits for its analysis, which measures every 2 s, with
	// 60% of traffic on the canary.
	s.follow(90*time.Second, "step 2 analysing", func(ro *v1alpha1.Rollout) (bool, error) {
		return ro.Status.CurrentStepIndex == analysedStep && ro.Status.CurrentStepState == v1alpha1.StepMetricsAnalysis, nil
	})
	assertWeights(t, s.world, 40, 60)
	ro := s.follow(60*time.Second, "the release completes", func(ro *v1alpha1.Rollout) (bool, error) {
		if ro.Status.Phase == v1alpha1.PhaseFailed {
			return false, fmt.Errorf("the release failed: %s", ro.Status.Message)
		}
		return ro.Status.Phase == v1alpha1.PhaseHealthy && ro.Status.StableRevision != s.v1 && conditions.IsReady(ro), nil
	})

	// And status.analysis keeps the three successful measurements.
	res := stepResult(ro, analysedStep)
	if res == nil {
		t.Fatalf("no result for step %d in status.analysis: %+v", analysedStep, ro.Status.Analysis)
	}
	if res.Phase != "Successful" || res.Successful != 3 || res.Failed != 0 || res.Errors != 0 || len(res.Measurements) != 3 {
		t.Fatalf("step %d analysis: want Successful with 3 successful measurements, got %+v", analysedStep, res)
	}
	for i, m := range res.Measurements {
		if m.Phase != "Successful" || m.Value != "0" {
			t.Fatalf("measurement %d: want Successful with value 0, got %+v", i, m)
		}
		if i > 0 {
			if gap := m.At.Sub(res.Measurements[i-1].At.Time); gap < analysisInterval-time.Second || gap > analysisInterval+2*time.Second {
				t.Fatalf("measurements %d and %d are %v apart, want about the interval %v", i-1, i, gap, analysisInterval)
			}
		}
	}
	if c := conditions.Get(ro, v1alpha1.AnalysisCondition); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("Analysis condition: want True, got %+v", c)
	}
	s.Eventually(60*time.Second, "all pods on v2", func(ctx context.Context) (bool, error) {
		return s.Pods(s.NS, "echoserver")["echo:2.0"] == [2]int{5, 5}, nil
	})
	assertDeclaredRoute(t, s.world)
}

// assertDeclaredRoute checks that the HTTPRoute is back to what Git
// declares: one backend, the stable Service.
func assertDeclaredRoute(t *testing.T, w *world) {
	t.Helper()
	w.Eventually(30*time.Second, "the HTTPRoute as declared", func(ctx context.Context) (bool, error) {
		var route gatewayv1.HTTPRoute
		if err := w.C.Get(ctx, client.ObjectKey{Namespace: w.NS, Name: "echoserver"}, &route); err != nil {
			return false, err
		}
		refs := route.Spec.Rules[0].BackendRefs
		return len(refs) == 1 && refs[0].Name == "echoserver", nil
	})
}

// TestAnalysisFailureRollsBack: the error rate rises to 30% after batch 1;
// the first measurement over the limit rolls the release back at once.
func TestAnalysisFailureRollsBack(t *testing.T) {
	s := givenAnalysedWorkload(t, 3, 2)
	s.ApplyYAML(echoApp("echo:2.0"))

	// When the error rate rises to 30% once batch 1 is done.
	s.follow(90*time.Second, "batch 1 done", func(ro *v1alpha1.Rollout) (bool, error) {
		return ro.Status.CanaryRevision != s.v1 && (ro.Status.CurrentStepIndex > 1 || ro.Status.CurrentStepState == v1alpha1.StepPaused), nil
	})
	s.src.SetErrorPercent(30)
	raised := time.Now()

	// Then the release fails with the metric, its value and the condition.
	ro := s.follow(60*time.Second, "the release failed", func(ro *v1alpha1.Rollout) (bool, error) {
		if ro.Status.Phase == v1alpha1.PhaseHealthy && ro.Status.StableRevision != s.v1 {
			return false, fmt.Errorf("the release completed with 30%% errors")
		}
		return ro.Status.Phase == v1alpha1.PhaseFailed, nil
	})
	failedAt := time.Now()
	stalled := assertAnalysisFailed(t, ro, `value `, `failed condition "result[0] < 0.05"`, "1 failed, failureLimit 0")
	assertFailedValue(t, stalled.Message, 0.05)

	// And the decision came with the first failed measurement.
	res := stepResult(ro, analysedStep)
	firstFailed, ok := firstWithPhase(res, "Failed")
	if !ok {
		t.Fatalf("no Failed measurement in status.analysis: %+v", res)
	}
	decision := stalled.LastTransitionTime.Sub(firstFailed)
	bound := analysisInterval*time.Duration(analysisFailureLimit+1) + 2*time.Second
	t.Logf("error rate raised -> first failed measurement: ~%v; first failed measurement -> release Failed: %v (bound %v); measurements %+v",
		firstFailed.Sub(raised).Round(time.Second), decision, bound, res.Measurements)
	if decision < 0 || decision > bound {
		t.Fatalf("release failed %v after the first failed measurement, want within interval x (failureLimit+1) + 2s = %v", decision, bound)
	}

	// And traffic and pods are back on stable.
	assertRolledBack(t, s, failedAt)
}

// assertAnalysisFailed checks Phase Failed, Stalled=True with reason
// AnalysisFailed naming the metric and the given details, and the Analysis
// condition; it returns the Stalled condition.
func assertAnalysisFailed(t *testing.T, ro *v1alpha1.Rollout, details ...string) *metav1.Condition {
	t.Helper()
	stalled := meta.FindStatusCondition(ro.Status.Conditions, v1alpha1.StalledCondition)
	if stalled == nil || stalled.Status != metav1.ConditionTrue || stalled.Reason != v1alpha1.ReasonAnalysisFailed {
		t.Fatalf("want Stalled=True with reason %s, got %+v", v1alpha1.ReasonAnalysisFailed, stalled)
	}
	for _, want := range append([]string{`metric "error-rate"`, `template "error-rate"`}, details...) {
		if !strings.Contains(stalled.Message, want) {
			t.Fatalf("the Stalled message must contain %q: %s", want, stalled.Message)
		}
	}
	if c := conditions.Get(ro, v1alpha1.AnalysisCondition); c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonAnalysisFailed {
		t.Fatalf("Analysis condition: want False with reason %s, got %+v", v1alpha1.ReasonAnalysisFailed, c)
	}
	if conditions.IsReady(ro) {
		t.Fatalf("a failed release must not be Ready: %+v", ro.Status.Conditions)
	}
	t.Logf("Stalled: %s", stalled.Message)
	return stalled
}

var valueInMessage = regexp.MustCompile(`metric "error-rate" value ([0-9.eE+-]+)`)

// assertFailedValue checks that the value the message names breaks the
// limit.
func assertFailedValue(t *testing.T, msg string, limit float64) {
	t.Helper()
	m := valueInMessage.FindStringSubmatch(msg)
	if m == nil {
		t.Fatalf("no value in the message: %s", msg)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil || v < limit {
		t.Fatalf("the value in the message, %q, must be a number of at least %v", m[1], limit)
	}
}

// assertRolledBack checks that all traffic is on stable, no canary pod is
// left and v1 runs on every pod; it logs how long that took after since
// and the time status gives for the end of the rollback.
func assertRolledBack(t *testing.T, s *analysisStory, since time.Time) {
	t.Helper()
	assertWeights(t, s.world, 100, 0)
	s.Eventually(60*time.Second, "no canary pod and v1 on all pods", func(ctx context.Context) (bool, error) {
		p := s.Pods(s.NS, "echoserver")
		return p["echo:2.0"][1] == 0 && p["echo:1.0"] == [2]int{5, 5}, nil
	})
	ro := s.follow(30*time.Second, "the rollback settled", func(ro *v1alpha1.Rollout) (bool, error) {
		return ro.Status.Phase == v1alpha1.PhaseFailed && conditions.IsFalse(ro, v1alpha1.ReconcilingCondition), nil
	})
	if ro.Status.CanaryReplicas != 0 || ro.Status.CanaryWeight != 0 {
		t.Fatalf("status after the rollback: %d canary pods, canary weight %d", ro.Status.CanaryReplicas, ro.Status.CanaryWeight)
	}
	stalled := conditions.Get(ro, v1alpha1.StalledCondition)
	done := conditions.Get(ro, v1alpha1.ReconcilingCondition)
	t.Logf("rollback: release Failed at %s, settled (Reconciling=False) at %s: %v in status; traffic and pods back %v after the test saw Failed",
		stalled.LastTransitionTime.Format(time.TimeOnly), done.LastTransitionTime.Format(time.TimeOnly),
		done.LastTransitionTime.Sub(stalled.LastTransitionTime.Time), time.Since(since).Round(100*time.Millisecond))
}

// TestAnalysisFailsSafeWhenPrometheusStops: Prometheus stops in the middle
// of the analysis; the release holds at step 2 while the measurements
// error, then fails safe after consecutiveErrorLimit.
func TestAnalysisFailsSafeWhenPrometheusStops(t *testing.T) {
	// count 5 leaves time to stop Prometheus before the metric completes.
	s := givenAnalysedWorkload(t, 5, 2)
	s.ApplyYAML(echoApp("echo:2.0"))
	s.follow(90*time.Second, "a first successful measurement at step 2", func(ro *v1alpha1.Rollout) (bool, error) {
		res := stepResult(ro, analysedStep)
		return ro.Status.CurrentStepState == v1alpha1.StepMetricsAnalysis && res != nil && res.Successful >= 1, nil
	})

	// When Prometheus stops.
	if err := s.prom.Close(); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()

	// Then the release holds at step 2 and records errors.
	s.follow(30*time.Second, "an Error measurement while holding at step 2", func(ro *v1alpha1.Rollout) (bool, error) {
		if err := holdsAtAnalysedStep(ro); err != nil {
			return false, err
		}
		res := stepResult(ro, analysedStep)
		return res != nil && res.Errors >= 1 && res.Phase == "Running", nil
	})

	// And fails safe after the third error in a row (limit 2).
	ro := s.follow(60*time.Second, "the release failed safe", func(ro *v1alpha1.Rollout) (bool, error) {
		if ro.Status.Phase == v1alpha1.PhaseFailed {
			return true, nil
		}
		return false, holdsAtAnalysedStep(ro)
	})
	failedAt := time.Now()
	stalled := assertAnalysisFailed(t, ro, "error: ", "3 consecutive errors, consecutiveErrorLimit 2: failing safe")
	res := stepResult(ro, analysedStep)
	if res.Phase != "Error" || res.ConsecutiveErrors != 3 || res.Failed != 0 {
		t.Fatalf("step %d analysis: want Error after 3 consecutive errors and no failure, got %+v", analysedStep, res)
	}
	// Errors are retried after min(interval, 10s): the third one, two
	// retries after the first, fails the release.
	firstError, _ := firstWithPhase(res, "Error")
	decision := stalled.LastTransitionTime.Sub(firstError)
	bound := min(analysisInterval, 10*time.Second)*2 + 2*time.Second
	t.Logf("Prometheus stopped -> first error: ~%v; first error -> release Failed: %v (bound %v); measurements %+v",
		firstError.Sub(stopped).Round(time.Second), decision, bound, res.Measurements)
	if decision < 0 || decision > bound {
		t.Fatalf("release failed %v after the first error, want within 2 retries + 2s = %v", decision, bound)
	}
	assertRolledBack(t, s, failedAt)
}

// holdsAtAnalysedStep fails when a release without a usable measurement
// moved on from the analysis of step 2.
func holdsAtAnalysedStep(ro *v1alpha1.Rollout) error {
	st := ro.Status
	if st.Phase == v1alpha1.PhaseFailed {
		return nil
	}
	if st.Phase != v1alpha1.PhaseProgressing || st.CurrentStepIndex != analysedStep || st.CurrentStepState != v1alpha1.StepMetricsAnalysis {
		return fmt.Errorf("the release moved without Prometheus: phase %s, step %d, state %s: %s",
			st.Phase, st.CurrentStepIndex, st.CurrentStepState, st.Message)
	}
	return nil
}
