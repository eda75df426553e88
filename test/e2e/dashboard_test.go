package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/proc"
	"github.com/rollgate/rollgate/test/repo"
	"github.com/rollgate/rollgate/test/rig"
)

// chromium is Debian's Chromium, which `make tools` installs
// (tools-chromium).
const chromium = "/usr/bin/chromium"

// browser renders url in headless Chromium: the DOM after rendering, and
// a screenshot saved as png.
func browser(t *testing.T, url, png string) string {
	t.Helper()
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("%v: run `make tools` (it installs Debian's chromium)", err)
	}
	profile := t.TempDir()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--user-data-dir=" + profile,
		"--window-size=1200,1000", "--virtual-time-budget=2000"}
	run := func(extra ...string) []byte {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		var out, errb bytes.Buffer
		cmd := exec.CommandContext(ctx, chromium, append(append(args, extra...), url)...)
		cmd.Stdout, cmd.Stderr = &out, &errb
		start := time.Now()
		if err := cmd.Run(); err != nil {
			t.Fatalf("chromium %v: %v\n%s", extra, err, errb.String())
		}
		t.Logf("chromium %s took %v", extra[0], time.Since(start).Round(10*time.Millisecond))
		return out.Bytes()
	}
	dom := run("--dump-dom")
	run("--screenshot=" + png)
	if fi, err := os.Stat(png); err != nil || fi.Size() < 5000 {
		t.Fatalf("screenshot %s: %v (a page drawn should be more than a few KB)", png, err)
	}
	return string(dom)
}

// textOf is the visible text of a DOM: tags dropped, spaces collapsed.
func textOf(dom string) string {
	s := regexp.MustCompile(`(?s)<style.*?</style>|<[^>]+>`).ReplaceAllString(dom, " ")
	return strings.Join(strings.Fields(s), " ")
}

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

	bin := filepath.Join(repo.Root(), "bin", "rollgate")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%v: run `make build`", err)
	}
	port := rig.FreePort(t)
	dash, err := proc.Start(t.TempDir(), "dashboard", bin, []string{"dashboard",
		"--kubeconfig", w.cluster.Kubeconfig, "-n", w.ns, "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--refresh", "0"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := dash.Stop(5 * time.Second); err != nil {
			t.Logf("stopping the dashboard: %v", err)
		}
		if t.Failed() {
			t.Logf("dashboard log:\n%s", proc.Tail(dash.Log, 30))
		}
	})
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	w.eventually(30*time.Second, "the dashboard listening", func(context.Context) (bool, error) {
		return proc.Listening(fmt.Sprintf("127.0.0.1:%d", port)), nil
	})
	shots := filepath.Join(repo.Root(), "bin", "dashboard")
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
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
	dom := browser(t, url, filepath.Join(shots, "at-a-gate.png"))
	text := textOf(dom)
	expect("at the gate", text, "step 1/3", "canary "+v2+" 20% traffic", "80% traffic", "Waiting at the gate of step 1")
	if !strings.Contains(dom, `style="width: 20%"`) || !strings.Contains(dom, `style="width: 80%"`) {
		t.Errorf("at the gate: the traffic bar is not drawn 80/20:\n%s", dom)
	}

	// During step 2's batch: its pause runs, no gate.
	w.update(ro, func() {
		ro.Spec.Approvals = append(ro.Spec.Approvals, v1alpha1.Approval{Revision: v2, Step: 1})
	})
	w.eventually(60*time.Second, "step 2 in its pause", func(context.Context) (bool, error) {
		st := w.rollout(w.ns, "echoserver").Status
		return st.CurrentStepIndex == 2 && st.CanaryWeight == 50 && st.CurrentStepState == v1alpha1.StepPaused, nil
	})
	text = textOf(browser(t, url, filepath.Join(shots, "during-a-batch.png")))
	expect("during a batch", text, "step 2/3", "canary "+v2+" 50% traffic")
	if strings.Contains(text, "Waiting at the gate") {
		t.Errorf("during a batch: the page shows a gate:\n%s", text)
	}

	// Aborted: rolled back.
	ro = w.rollout(w.ns, "echoserver")
	w.update(ro, func() { ro.Spec.Abort = &v1alpha1.RevisionRequest{Revision: v2, Reason: "latency"} })
	w.eventually(60*time.Second, "rolled back", func(context.Context) (bool, error) {
		st := w.rollout(w.ns, "echoserver").Status
		return st.Phase == v1alpha1.PhaseFailed && st.CanaryReplicas == 0 && st.CanaryWeight == 0, nil
	})
	text = textOf(browser(t, url, filepath.Join(shots, "rolled-back.png")))
	expect("rolled back", text, "Failed", "100% traffic", "Aborted", "latency")
	t.Logf("screenshots in %s", shots)
}
