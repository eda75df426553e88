package argocd_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/rig"
)

// TestActionsThroughArgoCD runs every rollgate action through argocd-server
// (`argocd app actions run`, as a user would from the CLI or the UI) on a
// Rollout that real Argo CD syncs with selfHeal, and checks each one's
// effect and what Argo CD shows after it:
//
//   - abort at a gate: the release rolls back, the Rollout is Degraded;
//   - retry: attempt 2 starts and waits at the gate again (Suspended);
//   - approve: the gate opens;
//   - pause during the timed pause of step 2: the Rollout is Suspended and
//     stays paused at step 2 across a sync (Git does not declare
//     spec.strategy.paused, so selfHeal has nothing to undo);
//   - resume: the release finishes, Healthy;
//   - promote, in a second release: the remaining steps are skipped.
//
// The Application stays Synced after every action: the actions write
// fields of spec that Git does not declare.
func TestActionsThroughArgoCD(t *testing.T) {
	t.Parallel()
	// Step 2 pauses for 30 s here, time enough to run pause and promote
	// in it.
	files := appFiles("echo:1.0", "")
	files["app/rollout.yaml"] = strings.Replace(files["app/rollout.yaml"], "duration: 6s", "duration: 30s", 1)
	a := newAppWith(t, "actions", false, "\n  annotations: {"+compareOptions+"}", files)
	atStep2 := func(what string) {
		t.Helper()
		rig.Until(t, context.Background(), time.Minute, what, func() (bool, string) {
			ro := a.rollout()
			return ro.Status.CurrentStepIndex == 2 && strings.Contains(ro.Status.Message, "pausing"), "the Rollout says " + ro.Status.Message
		})
	}
	gate := func(what string) {
		a.eventually(time.Minute, what, func(st appState) bool { return st.res["Rollout"].health == suspended })
	}
	synced := func(after string) {
		t.Helper()
		a.refresh()
		time.Sleep(time.Second)
		st := a.eventually(30*time.Second, "Synced after "+after, func(st appState) bool { return st.sync == "Synced" && st.operation != "Running" })
		t.Logf("after %s: %v", after, st)
	}

	a.commit("echo 1.1", map[string]string{"app/deployment.yaml": strings.Replace(files["app/deployment.yaml"], "echo:1.0", "echo:1.1", 1)})
	gate("the gate of step 1")

	a.action("abort")
	st := a.eventually(time.Minute, "aborted: Degraded and every pod back on 1.0", func(st appState) bool {
		return st.res["Rollout"].health == degraded && a.readyPods("echo:1.0") == 4 && a.readyPods("echo:1.1") == 0
	})
	if ro := a.rollout(); ro.Spec.Abort == nil || ro.Status.Phase != v1alpha1.PhaseFailed {
		t.Errorf("after abort: spec.abort %v, phase %s", ro.Spec.Abort, ro.Status.Phase)
	}
	t.Logf("after abort: %v", st)
	synced("abort")

	a.action("retry")
	gate("attempt 2 at the gate of step 1")
	if ro := a.rollout(); ro.Status.Attempt != 2 || ro.Spec.Abort != nil {
		t.Errorf("after retry: attempt %d, spec.abort %v; want attempt 2 and no abort", ro.Status.Attempt, ro.Spec.Abort)
	}
	synced("retry")

	a.action("approve")
	atStep2("step 2 pausing")
	a.action("pause")
	a.eventually(30*time.Second, "paused: Suspended", func(st appState) bool { return st.res["Rollout"].health == suspended })
	// Through a sync: Git does not declare spec.strategy.paused.
	a.sync()
	ro := a.rollout()
	if !ro.Spec.Strategy.Paused || ro.Status.CurrentStepIndex != 2 || ro.Status.Phase != v1alpha1.PhasePaused {
		t.Errorf("paused: spec.strategy.paused %v, step %d, phase %s; want paused at step 2", ro.Spec.Strategy.Paused, ro.Status.CurrentStepIndex, ro.Status.Phase)
	}
	synced("pause")

	a.action("resume")
	a.eventually(2*time.Minute, "resumed: Healthy with every pod on 1.1", func(st appState) bool {
		return st.res["Rollout"].health == healthy && a.readyPods("echo:1.1") == 4
	})
	synced("resume")

	a.commit("echo 1.2", map[string]string{"app/deployment.yaml": strings.Replace(files["app/deployment.yaml"], "echo:1.0", "echo:1.2", 1)})
	gate("the gate of step 1 of 1.2")
	a.action("approve")
	atStep2("step 2 of 1.2 pausing")
	a.action("promote")
	a.eventually(2*time.Minute, "promoted: Healthy with every pod on 1.2", func(st appState) bool {
		return st.res["Rollout"].health == healthy && a.readyPods("echo:1.2") == 4
	})
	if ro := a.rollout(); ro.Spec.Promote == nil {
		t.Errorf("after promote: spec.promote is empty")
	}
	synced("promote")
}

// TestFailedAnalysisIsDegraded releases with an analysis that fails (a
// web metric the test serves answers an error rate of 0.5): real Argo CD
// shows the Rollout Degraded, with the failure in its message, and the
// Application Synced.
func TestFailedAnalysisIsDegraded(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `{"rate": 0.5}`)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })

	files := appFiles("echo:1.0", ", analysis: {templates: [error-rate]}")
	files["app/analysis.yaml"] = fmt.Sprintf(`apiVersion: rollgate.dev/v1alpha1
kind: AnalysisTemplate
metadata:
  name: error-rate
spec:
  metrics:
  - name: error-rate
    interval: 1s
    count: 2
    successCondition: "result < 0.05"
    provider:
      web: {url: "http://%s/error-rate", jsonPath: "{.rate}"}
`, ln.Addr())
	a := newAppWith(t, "analysis", true, "\n  annotations: {"+compareOptions+"}", files)
	s := a.sample()
	a.commit("echo 1.1", map[string]string{"app/deployment.yaml": strings.Replace(files["app/deployment.yaml"], "echo:1.0", "echo:1.1", 1)})
	a.eventually(time.Minute, "the gate of step 1", func(st appState) bool { return st.res["Rollout"].health == suspended })
	a.action("approve")
	s.phase("rolling back")
	st := a.eventually(time.Minute, "the analysis failed: Degraded", func(st appState) bool { return st.res["Rollout"].health == degraded })
	// Degraded comes with the failure, before the rollback's writes: the
	// route back to what Git declares, then the canary pods deleted. Until
	// the last of them is in Argo CD's cache the Application may show
	// OutOfSync for a moment (see transientOutOfSync); the failed state
	// docs/argocd.md promises is the one after them.
	a.eventually(time.Minute, "the rollback done: no canary backend, no new pod", func(appState) bool {
		return !a.routeHasCanary() && a.readyPods("echo:1.1") == 0
	})
	a.eventually(30*time.Second, "Synced after the rollback", func(st appState) bool { return st.sync == "Synced" })
	s.phase("failed")
	time.Sleep(3 * time.Second)
	samples := s.finish()
	if !strings.Contains(st.res["Rollout"].message, "analysis") {
		t.Errorf("the Degraded message does not name the analysis: %q", st.res["Rollout"].message)
	}
	transientOutOfSync(t, a.name, "rolling back", samples["rolling back"])
	check(t, a.name, "failed", samples["failed"], func(st appState) bool {
		return st.sync == "Synced" && st.res["Rollout"].health == degraded
	})
}
