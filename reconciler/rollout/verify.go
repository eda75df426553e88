package rollout

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/strategy"
)

// VerificationTemplate is the name under which a step's traffic
// verification shows in status.analysis.
const VerificationTemplate = "traffic-verification"

// Defaults of spec.strategy.*.trafficRoutings[].verify, as the CRD sets them
// (for objects that did not go through the API server's defaulting).
const (
	defaultVerifyTolerance    = 5
	defaultVerifyInitialDelay = 30 * time.Second
	defaultVerifyInterval     = 10 * time.Second
	defaultVerifyCount        = 3
	defaultVerifyFailureLimit = 1
)

// verification is the traffic verification of step idx as an in-memory
// AnalysisTemplate, one metric per traffic routing that sets verify, each
// passing when the measured share is within the tolerance of the step's
// declared weight; nil when the step verifies nothing. It runs with the
// step's own analysis, so that the planner holds the step until it passes
// and fails the release as after a failed analysis.
func verification(ro *v1alpha1.Rollout, idx int32) *v1alpha1.AnalysisTemplate {
	// Traffic does not depend on the replica count: any count resolves it.
	steps, err := strategy.ResolveSteps(&ro.Spec, 1)
	if err != nil || idx < 1 || int(idx) > len(steps) || !steps[idx-1].Verify {
		return nil
	}
	weight := steps[idx-1].Traffic.Weight
	t := &v1alpha1.AnalysisTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ro.Namespace, Name: VerificationTemplate}}
	for _, r := range ro.Spec.Strategy.TrafficRoutings() {
		v := r.Verify
		if v == nil {
			continue
		}
		tol := ptr.Deref(v.Tolerance, defaultVerifyTolerance)
		t.Spec.Metrics = append(t.Spec.Metrics, v1alpha1.Metric{
			Name:             fmt.Sprintf("traffic share of %s (declared %d%%, tolerance %d)", r.Service, weight, tol),
			InitialDelay:     durationOr(v.InitialDelay, defaultVerifyInitialDelay),
			Interval:         durationOr(v.Interval, defaultVerifyInterval),
			Count:            ptr.To(ptr.Deref(v.Count, defaultVerifyCount)),
			FailureLimit:     ptr.Deref(v.FailureLimit, defaultVerifyFailureLimit),
			SuccessCondition: fmt.Sprintf("result[0] >= %d && result[0] <= %d", weight-tol, weight+tol),
			Provider:         v1alpha1.MetricProvider{Prometheus: v.Prometheus.DeepCopy()},
		})
	}
	return t
}

func durationOr(d *metav1.Duration, def time.Duration) *metav1.Duration {
	if d != nil {
		return d
	}
	return &metav1.Duration{Duration: def}
}
