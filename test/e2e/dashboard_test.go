package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/browser"
)

// TestDashboardInABrowser: `rollgate dashboard` (the binary make build
// builds) against a kwok cluster mid-release, the page drawn by headless
// Chromium at a gate (step 1 of 3, 80/20), during a batch (step 2, 50/50,
// its pause running) and after an abort (rolled back, all traffic on
// stable). What Chromium rendered is checked, and the screenshots are
// kept in bin/dashboard for the docs.
func TestDashboardInABrowser(t *testing.T) {
	t.Parallel()
	steps := `
      steps:
      - {traffic: "20%", replicas: 1, pause: {}}
      - {traffic: "50%", replicas: "50%", pause: {duration: 600s}}
      - {traffic: "100%", replicas: "100%"}`
	s := givenRoutedApp(t, routedRollout(steps, noGrace+gatewayRouting), httpRoute, httpRouteGVK)
	w := s.w

	url := browser.Dashboard(t, w.cluster.Kubeconfig, w.NS)
	shots := browser.Screenshots(t)
	expect := func(state, text string, want ...string) {
		t.Helper()
		for _, wnt := range want {
			if !strings.Contains(text, wnt) {
				t.Errorf("%s: the page Chromium drew lacks %q:\n%s", state, wnt, text)
			}
		}
	}

	// At the gate of step 1.
	ro := s.atGate()
	v2 := ro.Status.CanaryRevision
	dom := browser.Render(t, url, filepath.Join(shots, "at-a-gate.png"))
	text := browser.Text(dom)
	expect("at the gate", text, "step 1/3", "canary "+v2+" 20% traffic", "80% traffic", "Waiting at the gate of step 1")
	if !strings.Contains(dom, `style="width: 20%"`) || !strings.Contains(dom, `style="width: 80%"`) {
		t.Errorf("at the gate: the traffic bar is not drawn 80/20:\n%s", dom)
	}

	// During step 2's batch: its pause runs, no gate.
	w.Update(ro, func() {
		ro.Spec.Approvals = append(ro.Spec.Approvals, v1alpha1.Approval{Revision: v2, Step: 1})
	})
	w.Eventually(60*time.Second, "step 2 in its pause", func(context.Context) (bool, error) {
		st := w.Rollout(w.NS, "echoserver").Status
		return st.CurrentStepIndex == 2 && st.CanaryWeight == 50 && st.CurrentStepState == v1alpha1.StepPaused, nil
	})
	text = browser.Text(browser.Render(t, url, filepath.Join(shots, "during-a-batch.png")))
	expect("during a batch", text, "step 2/3", "canary "+v2+" 50% traffic")
	if strings.Contains(text, "Waiting at the gate") {
		t.Errorf("during a batch: the page shows a gate:\n%s", text)
	}

	// Aborted: rolled back.
	ro = w.Rollout(w.NS, "echoserver")
	w.Update(ro, func() { ro.Spec.Abort = &v1alpha1.RevisionRequest{Revision: v2, Reason: "latency"} })
	w.Eventually(60*time.Second, "rolled back", func(context.Context) (bool, error) {
		st := w.Rollout(w.NS, "echoserver").Status
		return st.Phase == v1alpha1.PhaseFailed && st.CanaryReplicas == 0 && st.CanaryWeight == 0, nil
	})
	text = browser.Text(browser.Render(t, url, filepath.Join(shots, "rolled-back.png")))
	expect("rolled back", text, "Failed", "100% traffic", "Aborted", "latency")
	t.Logf("screenshots in %s", shots)
}
