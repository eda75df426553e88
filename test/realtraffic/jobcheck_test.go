package realtraffic

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// smokeTemplate is an AnalysisTemplate whose one metric is a Job check: a
// real container (the sample app's -check mode) sends 20 requests to the
// canary Service and fails unless every one is answered by version
// {{args.want}}. The node has no cluster DNS, so the Job reaches the
// Service by the environment variables Kubernetes gives every pod for the
// Services of its namespace (in a cluster with DNS:
// http://{{rollout.canaryService}}.{{rollout.namespace}}.svc/).
const smokeTemplate = `
apiVersion: rollgate.dev/v1alpha1
kind: AnalysisTemplate
metadata: {name: smoke, namespace: demo}
spec:
  args: [{name: want}, {name: image}]
  metrics:
  - name: smoke
    count: 1
    successCondition: "result[0] == 1"
    provider:
      job:
        spec:
          template:
            spec:
              containers:
              - name: smoke
                image: "{{args.image}}"
                imagePullPolicy: Never
                command: [/verserver, -check, "http://$(ECHOSERVER_CANARY_SERVICE_HOST):$(ECHOSERVER_CANARY_SERVICE_PORT)/", -requests, "20", -want, "{{args.want}}"]
                resources:
                  requests: {cpu: 10m, memory: 16Mi}
                  limits: {memory: 64Mi}
`

// smokeRollout checks step 1 with the smoke template, expecting version
// want from a Job running image.
func smokeRollout(want, image string) string {
	return rollout(fmt.Sprintf(`
      - traffic: "25%%"
        replicas: 2
        analysis:
          templates: [smoke]
          args: [{name: want, value: %s}, {name: image, value: %q}]
      - {traffic: "100%%", replicas: "100%%"}`, want, image))
}

// TestJobCheckOnTheRealNode: a step's analysis is a Job check, run as a
// real container on the real node while 150 requests/s go through
// Traefik. v2, checked for v2, passes (the Job sent 20 requests to the
// canary Service, all answered by v2) and the release completes. v3,
// checked for v2, fails: the Job fails, its log's last lines reach the
// Rollout's message, and the release rolls back. v4, whose check image is
// missing, fails at once with the reason the pod cannot start, not after
// the Job's deadline. No request fails; the Jobs carry the Rollout as
// owner and are kept within the history bound.
func TestJobCheckOnTheRealNode(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	w := newWorldOf(t, ctx, worldOptions{
		extra:     func(*world) string { return smokeTemplate },
		rolloutOf: func(*world) string { return smokeRollout("v2", "localhost/verserver:v1") },
	})
	l := startLoad(w.url, rate, nil)
	defer l.stop()

	// v2, checked for v2: the Job succeeds, the release completes.
	stable := w.rollout(ctx).Status.StableRevision
	w.ApplyYAML(app("localhost/verserver:v2", w.port()))
	var v2 string
	w.Until(ctx, 3*time.Minute, "v2 released after its Job check passed", func() (bool, string) {
		ro := w.rollout(ctx)
		if ro.Status.Phase == v1alpha1.PhaseFailed {
			t.Fatalf("v2 failed: %s", describe(ro))
		}
		v2 = ro.Status.CanaryRevision
		return ro.Status.Phase == v1alpha1.PhaseHealthy && ro.Status.StableRevision != stable, describe(ro)
	})
	m := smokeMeasurement(t, w.rollout(ctx))
	t.Logf("v2's check: %s %s: %s", m.Phase, m.Value, m.Message)
	if m.Phase != "Successful" || !strings.Contains(m.Message, "succeeded") || !strings.Contains(m.Message, "0 of 20 requests") {
		t.Errorf("v2's check measurement: %+v, want Successful with the Job's log (0 of 20 requests failed)", m)
	}

	// v3, checked for v2: the Job fails, the release rolls back.
	w.ApplyYAML(app("localhost/verserver:v3", w.port()))
	v3 := w.waitFailedCheck(ctx, v2, "v3", v2)
	m = smokeMeasurement(t, w.rollout(ctx))
	t.Logf("v3's check: %s %s: %s", m.Phase, m.Value, m.Message)
	for _, want := range []string{"failed", `answered by version "v3", want "v2"`, "20 of 20 requests"} {
		if !strings.Contains(m.Message, want) {
			t.Errorf("v3's check measurement says %q, want it to contain %q", m.Message, want)
		}
	}

	// v4, whose check image is missing: fails with the reason at once.
	w.ApplyYAML(smokeRollout("v4", "localhost/verserver:missing"))
	started := time.Now()
	w.ApplyYAML(app("localhost/verserver:v4", w.port()))
	w.waitFailedCheck(ctx, v2, "v4", v3)
	m = smokeMeasurement(t, w.rollout(ctx))
	t.Logf("v4's check, %v after the release began: %s %s: %s", time.Since(started).Round(time.Second), m.Phase, m.Value, m.Message)
	if !strings.Contains(m.Message, "cannot start") || !strings.Contains(m.Message, "ErrImageNeverPull") {
		t.Errorf("v4's check measurement says %q, want the pod's reason (cannot start ... ErrImageNeverPull)", m.Message)
	}

	// The Jobs: owned by the Rollout, labelled, within the bound.
	w.checkJobs(ctx, "checks", "")

	l.stop()
	wholeStory(t, "whole story", l)
}

// waitFailedCheck waits until the release of version (a canary revision
// other than before, the one released or failed before it) failed its
// Job check or Job hook and rolled back to stable revision stable, and
// returns its revision. Without the revision, the previous release's
// failure would pass for this one's.
func (w *world) waitFailedCheck(ctx context.Context, stable, version, before string) string {
	w.T.Helper()
	var canary string
	w.Until(ctx, 3*time.Minute, version+" rolled back after its Job (a check or a hook) failed", func() (bool, string) {
		ro := w.rollout(ctx)
		st := ro.Status
		if st.Phase == v1alpha1.PhaseHealthy && st.StableRevision != stable {
			w.T.Fatalf("%s was released despite its check: %s", version, describe(ro))
		}
		canary = st.CanaryRevision
		return st.Phase == v1alpha1.PhaseFailed && canary != before && canary != stable && st.StableRevision == stable &&
			st.CanaryWeight == 0 && st.CanaryReplicas == 0, describe(ro)
	})
	return canary
}

// smokeMeasurement is the last measurement of the smoke check of step 1.
func smokeMeasurement(t *testing.T, ro *v1alpha1.Rollout) v1alpha1.Measurement {
	t.Helper()
	for _, r := range ro.Status.Analysis {
		if r.Template == "smoke" && r.Step == 1 && len(r.Measurements) > 0 {
			return r.Measurements[len(r.Measurements)-1]
		}
	}
	t.Fatalf("no measurement of the smoke check in status.analysis: %+v", ro.Status.Analysis)
	return v1alpha1.Measurement{}
}
