package realtraffic

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/analysis"
)

// checkJobs fails the story unless the Jobs labelled as the Rollout's
// checks number 1 to analysis.JobHistory and each is owned by the Rollout
// (and, with check set, labelled as that check). what names them in the
// failure: "checks", "hooks".
func (w *world) checkJobs(ctx context.Context, what, check string) {
	w.T.Helper()
	var jobs batchv1.JobList
	if err := w.C.List(ctx, &jobs, client.InNamespace(w.NS), client.MatchingLabels{analysis.LabelCheckRollout: "echoserver"}); err != nil {
		w.T.Fatal(err)
	}
	if len(jobs.Items) == 0 || len(jobs.Items) > analysis.JobHistory {
		w.T.Errorf("%d Jobs of the Rollout's %s, want 1..%d", len(jobs.Items), what, analysis.JobHistory)
	}
	want := "the Rollout"
	if check != "" {
		want += " and " + check
	}
	for _, j := range jobs.Items {
		owned := len(j.OwnerReferences) == 1 && j.OwnerReferences[0].Kind == "Rollout" && j.OwnerReferences[0].Name == "echoserver"
		if !owned || check != "" && j.Labels[analysis.LabelCheck] != check {
			w.T.Errorf("Job %s: owners %+v, labels %v; want %s", j.Name, j.OwnerReferences, j.Labels, want)
		}
	}
}

// hookRollout holds step 2 (all pods and traffic) behind a before hook
// that is a Job: the sample app's -check mode, from image, sends 10
// requests to the canary Service (by the environment variables of the
// namespace's Services: the node has no cluster DNS) and fails unless
// version want answers every one. One no fails the release (retries: 0).
func hookRollout(want, image string) string {
	return rollout(fmt.Sprintf(`
      - {traffic: "25%%", replicas: 1}
      - traffic: "100%%"
        replicas: "100%%"
        hooks:
          before:
          - name: smoke
            retries: 0
            job:
              spec:
                template:
                  spec:
                    containers:
                    - name: smoke
                      image: %q
                      imagePullPolicy: Never
                      command: [/verserver, -check, "http://$(ECHOSERVER_CANARY_SERVICE_HOST):$(ECHOSERVER_CANARY_SERVICE_PORT)/", -requests, "10", -want, %s]
                      env: [{name: ROLLGATE_STEP, value: "{{rollout.step}}"}, {name: ROLLGATE_REVISION, value: "{{rollout.canaryRevision}}"}]
                      resources:
                        requests: {cpu: 10m, memory: 16Mi}
                        limits: {memory: 64Mi}`, image, want))
}

// TestJobHooksOnTheRealNode: step 2's before hook is a Job, run as a real
// container on the real node against the canary Service once step 1's
// pod serves it. v2, checked for v2: the Job's 10 requests are answered by
// v2, the hook says yes, and the release completes. v3, checked for v2:
// the Job fails, the release fails with HookFailed and rolls back, and the
// Rollout's message carries the last lines of the Job's log. v4, whose
// hook image is missing: the hook says no at once with the reason the pod
// cannot start, not after the Job's deadline. The hooks' Jobs are owned by
// the Rollout, labelled as the hook's, within the history bound, and their
// placeholders hold the step and revision.
func TestJobHooksOnTheRealNode(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	w := newWorldOf(t, ctx, worldOptions{rolloutOf: func(*world) string { return hookRollout("v2", "localhost/verserver:v1") }})
	start := time.Now()

	// v2, checked for v2: the hook says yes, the release completes.
	stable := w.rollout(ctx).Status.StableRevision
	w.ApplyYAML(app("localhost/verserver:v2", w.port()))
	var v2 string
	var running, yes time.Time // when the hook was first seen with its Job under way, and answered yes
	w.Until(ctx, 2*time.Minute, "v2 released after its Job hook said yes", func() (bool, string) {
		ro := w.rollout(ctx)
		if ro.Status.Phase == v1alpha1.PhaseFailed {
			t.Fatalf("v2 failed: %s", describe(ro))
		}
		if st := smokeHook(ro); st != nil && st.Job != "" && running.IsZero() {
			running = time.Now()
		} else if st != nil && st.Phase == "Successful" && yes.IsZero() {
			yes = time.Now()
		}
		v2 = ro.Status.CanaryRevision
		return ro.Status.Phase == v1alpha1.PhaseHealthy && ro.Status.StableRevision != stable, describe(ro)
	})
	t.Logf("v2 released %s after it was applied", time.Since(start).Round(time.Second))
	st := smokeHook(w.rollout(ctx))
	if st == nil || st.Phase != "Successful" || st.Calls != 1 || !strings.Contains(st.Message, "succeeded") || !strings.Contains(st.Message, "0 of 10 requests") {
		t.Fatalf("v2's hook: %+v, want Successful after one Job, with its log (0 of 10 requests failed)", st)
	}
	if running.IsZero() {
		t.Errorf("v2's hook was never seen with its Job under way (status.hooks[].job)")
	}
	t.Logf("v2's hook: Job under way %s after v2 was applied, yes %s later: %s", running.Sub(start).Round(time.Second), yes.Sub(running).Round(time.Second), st.Message)
	var j batchv1.Job
	if err := w.C.Get(ctx, client.ObjectKey{Namespace: w.NS, Name: strings.Fields(st.Message)[1]}, &j); err != nil {
		t.Fatalf("v2's hook Job: %v", err)
	}
	if env := j.Spec.Template.Spec.Containers[0].Env; len(env) != 2 || env[0].Value != "2" || env[1].Value != v2 {
		t.Errorf("v2's hook Job env %+v, want step 2 and revision %s", env, v2)
	}

	// v3, checked for v2: the hook says no, the release rolls back, and
	// the Rollout's message says why with the Job's log.
	w.ApplyYAML(app("localhost/verserver:v3", w.port()))
	v3 := w.waitFailedCheck(ctx, v2, "v3", v2)
	ro := w.rollout(ctx)
	t.Logf("v3 failed: %s", ro.Status.Message)
	for _, want := range []string{`hook "smoke" (before the step) answered no`, "failed: BackoffLimitExceeded", `answered by version "v3", want "v2"`, "10 of 10 requests"} {
		if !strings.Contains(ro.Status.Message, want) {
			t.Errorf("v3's Rollout message %q, want it to contain %q", ro.Status.Message, want)
		}
	}
	if reason := conditions.GetReason(ro, v1alpha1.StalledCondition); reason != v1alpha1.ReasonHookFailed {
		t.Errorf("v3's Stalled reason %q, want %s", reason, v1alpha1.ReasonHookFailed)
	}

	// v4, whose hook image is missing: no at once, with the reason.
	w.ApplyYAML(hookRollout("v4", "localhost/verserver:missing"))
	began := time.Now()
	w.ApplyYAML(app("localhost/verserver:v4", w.port()))
	w.waitFailedCheck(ctx, v2, "v4", v3)
	st = smokeHook(w.rollout(ctx))
	t.Logf("v4's hook, %v after the release began: %+v", time.Since(began).Round(time.Second), st)
	if st == nil || st.Phase != "Failed" || !strings.Contains(st.Message, "cannot start") || !strings.Contains(st.Message, "ErrImageNeverPull") {
		t.Errorf("v4's hook: %+v, want Failed with the pod's reason (cannot start ... ErrImageNeverPull)", st)
	}

	// The Jobs: owned by the Rollout, labelled as the hook's, within the
	// bound.
	w.checkJobs(ctx, "hooks", "hook.before.smoke")
	t.Logf("the three releases took %s", time.Since(start).Round(time.Second))
}

// smokeHook is the status of the smoke hook of step 2, or nil.
func smokeHook(ro *v1alpha1.Rollout) *v1alpha1.HookStatus {
	for i, h := range ro.Status.Hooks {
		if h.Name == "smoke" && h.Step == 2 && h.Revision == ro.Status.CanaryRevision {
			return &ro.Status.Hooks[i]
		}
	}
	return nil
}
