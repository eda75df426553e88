package e2e

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/rig"
)

// The soak: a year of releases of one Rollout with two gates, through Git,
// as its users live it. `make test` runs 12 releases; `make bench` runs
// 365 (ROLLGATE_SOAK_RELEASES). Figures and what they mean are in
// docs/day-two.md ("A year of releases").

// soakRollout has two manual gates: one pod and 20% of the traffic, then
// half the pods and half the traffic, each waiting for its approval
// branch to be merged.
var soakRollout = rig.Rollout{Name: "echoserver", Namespace: "demo", GitPath: soakRolloutPath, Steps: []string{
	`{traffic: "20%", replicas: 1, pause: {}}`,     // gate 1: merge the approval branch
	`{traffic: "50%", replicas: "50%", pause: {}}`, // gate 2
	`{traffic: "100%", replicas: "100%"}`,
}}.YAML()

const (
	soakRolloutPath    = "apps/echoserver/rollout.yaml"
	soakDeploymentPath = "apps/echoserver/deployment.yaml"
	// soakGates is the number of gates of a release; soakGatePods the new
	// pods each holds (replicas 1, then 50% of 5 rounded up).
	soakGates = 2
	// soakFailEvery: every 6th release fails on purpose, at a gate picked
	// at random: it is aborted from Git and its revert merged.
	soakFailEvery = 6
	// soakRestartChance is the chance of a controller restart at each of
	// the points a release passes (after the bump, at each gate, after each
	// merge, after an abort): about one restart every two releases.
	soakRestartChance = 0.1
)

var soakGatePods = [soakGates + 1]int{0, 1, 3}

// TestSoakReleasesThroughGit releases one Rollout with two gates N times
// (ROLLGATE_SOAK_RELEASES, 12 by default) as a user would: an image bump
// committed to Git and applied as Flux applies it; at each gate the
// approval branch rollgate pushed merged and the merged Rollout manifest
// applied from Git; every 6th release aborted from Git at a gate and its
// revert merged and applied; the controller restarted at random points
// (ROLLGATE_SOAK_SEED repeats a run's points). After every release: the
// Rollout is Healthy (Completed, or RolledBack after an abort) on the
// expected image with 5 of 5 pods ready; the API server refused no applied
// manifest; spec.approvals in Git holds no more than the gates of the live
// and stable revisions; obsolete approval branches are gone; a merged
// revert's branch is gone, and none is left at the end. It prints the
// figures of docs/day-two.md and fails on any invariant break.
func TestSoakReleasesThroughGit(t *testing.T) {
	t.Parallel()
	n := soakEnv(t, "ROLLGATE_SOAK_RELEASES", 12)
	seed := int64(soakEnv(t, "ROLLGATE_SOAK_SEED", int(time.Now().UnixNano()%1e9)))
	t.Logf("soak: %d releases, seed %d (ROLLGATE_SOAK_SEED=%d repeats the restart points)", n, seed, seed)
	w := newWorld(t)
	s := &soak{world: w, rng: rand.New(rand.NewSource(seed)), seed: seed, planned: n, stable: "echo:1.0"}
	s.given()
	defer s.report()
	for i := 1; i <= n; i++ {
		s.release(i, i%soakFailEvery == 0)
		s.check(i)
		s.sampleMemory(i, n)
		s.progress(i)
	}
	// Every revert was merged, so none is left: revert branches are
	// bounded by the reverts not merged (docs/day-two.md).
	if left := s.branches("rollgate/revert/"); len(left) > 0 {
		t.Errorf("%d revert branches on the Git server at the end, want 0 (all were merged): %v", len(left), left)
	}
	if len(s.refusals) > 0 {
		t.Errorf("the API server refused %d applies of manifests from Git, want 0:\n  %s", len(s.refusals), strings.Join(s.refusals, "\n  "))
	}
	if len(s.breaks) > 0 {
		t.Errorf("%d invariant breaks:\n  %s", len(s.breaks), strings.Join(s.breaks, "\n  "))
	}
}

// soak is the state of the soak story: the world, the random restart
// points and what it measured.
type soak struct {
	*world
	rng     *rand.Rand
	seed    int64
	planned int
	// current is the release under way; stable the image released last.
	current int
	stable  string

	started    time.Time
	completed  int // releases that ended as planned (released or rolled back)
	aborted    int
	restarts   int
	refusals   []string
	breaks     []string
	figures    soakFigures
	mem        []memSample
	perRelease []time.Duration
}

// soakEnv reads a positive integer from the environment, def when unset.
func soakEnv(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// given starts the story: Git holds the Rollout and the app (Deployment,
// Service, HTTPRoute) at echo:1.0, both applied, v1 Healthy.
func (s *soak) given() {
	s.T.Helper()
	s.givenAppFromGit(soakRollout, "")
	if _, err := s.git.Commit("app", "main", "Add the echoserver app", map[string]string{soakDeploymentPath: s.InNS(echoApp(s.stable))}); err != nil {
		s.T.Fatal(err)
	}
	s.sync("the app added to Git")
	s.figures.baseMain, s.figures.baseStatus = s.commits("main"), s.commits("rollgate/status")
	s.started = time.Now()
}

// release is release i: the image bump, its gates, and either the
// approvals (the new image released) or, when fail, an abort at a gate
// picked at random and the revert (the stable image back).
func (s *soak) release(i int, fail bool) {
	s.T.Helper()
	s.current = i
	start := time.Now()
	image := fmt.Sprintf("echo:1.%d", i)
	manifest := s.readGit(soakRolloutPath)
	// The user drops a past abort from the Rollout with the next bump.
	s.commit(fmt.Sprintf("Bump echoserver to %s", image), map[string]string{
		soakDeploymentPath: s.InNS(echoApp(image)),
		soakRolloutPath:    withoutAbort(manifest),
	})
	s.maybeRestart("after the image bump")
	failAt := 0
	if fail {
		failAt = 1 + s.rng.Intn(soakGates)
	}
	for step := 1; step <= soakGates; step++ {
		ro := s.gate(step, image)
		s.maybeRestart(fmt.Sprintf("at gate %d", step))
		if step == failAt {
			s.abort(ro)
			s.released(s.stable, true)
			s.checkRevertBranches()
			s.perRelease = append(s.perRelease, time.Since(start))
			return
		}
		if _, err := s.git.Merge("app", "main", ro.Status.AwaitingApproval.Branch, fmt.Sprintf("Merge approval of echoserver %s step %d", image, step)); err != nil {
			s.T.Fatalf("release %d: merging the approval of step %d: %v", i, step, err)
		}
		s.sync(fmt.Sprintf("approval of step %d merged", step))
		s.maybeRestart(fmt.Sprintf("after the merge of gate %d", step))
	}
	s.released(image, false)
	s.stable = image
	s.perRelease = append(s.perRelease, time.Since(start))
}

// gate waits for the gate of step of the release of image, its approval
// branch pushed, and checks the pods it holds: soakGatePods[step] of the
// new image, the others of the stable one.
func (s *soak) gate(step int, image string) *v1alpha1.Rollout {
	s.T.Helper()
	var ro *v1alpha1.Rollout
	s.Eventually(120*time.Second, fmt.Sprintf("release %d: gate %d waiting on its approval branch", s.current, step), func(ctx context.Context) (bool, error) {
		ro = s.Rollout(s.NS, "echoserver")
		a := ro.Status.AwaitingApproval
		return a != nil && int(a.Step) == step && a.Branch != "" && a.Revision == ro.Status.CanaryRevision, nil
	})
	if head, err := s.git.Head("app", ro.Status.AwaitingApproval.Branch); err != nil || head == "" {
		s.T.Fatalf("release %d: approval branch %s of gate %d not on the Git server (%v)", s.current, ro.Status.AwaitingApproval.Branch, step, err)
	}
	s.checkApproveBranches(ro.Status.AwaitingApproval.Branch)
	want := soakGatePods[step]
	if !s.settles(10*time.Second, func() bool {
		p := s.Pods(s.NS, "echoserver")
		return p[image][1] == want && p[s.stable][1] == 5-want && len(p) == 2
	}) {
		s.broke("gate %d runs pods %v, want %d of %s and %d of %s", step, s.Pods(s.NS, "echoserver"), want, image, 5-want, s.stable)
	}
	return ro
}

// abort fails the release waiting at ro's gate the way a user does from
// Git (spec.abort naming the canary revision), waits for the revert
// branch rollgate pushes, merges it and applies it.
func (s *soak) abort(ro *v1alpha1.Rollout) {
	s.T.Helper()
	canary := ro.Status.CanaryRevision
	manifest := withoutAbort(s.readGit(soakRolloutPath)) +
		fmt.Sprintf("  abort: {revision: %s, reason: release %d fails on purpose}\n", canary, s.current)
	s.commit(fmt.Sprintf("Abort echoserver revision %s", canary), map[string]string{soakRolloutPath: manifest})
	s.maybeRestart("after the abort")
	var branch string
	s.Eventually(90*time.Second, fmt.Sprintf("release %d: rolled back, the revert branch in Git", s.current), func(ctx context.Context) (bool, error) {
		ro := s.Rollout(s.NS, "echoserver")
		if ro.Status.Phase != v1alpha1.PhaseFailed || ro.Status.Git == nil || ro.Status.Git.RevertBranch == "" {
			return false, nil
		}
		branch = ro.Status.Git.RevertBranch
		head, err := s.git.Head("app", branch)
		return head != "", err
	})
	if _, err := s.git.Merge("app", "main", branch, "Merge revert of echoserver revision "+canary); err != nil {
		s.T.Fatalf("release %d: merging the revert: %v", s.current, err)
	}
	s.sync("revert merged")
	s.aborted++
}

// checkRevertBranches checks, after a release whose revert was merged
// and applied (RolledBack), that its revert branch leaves the Git server:
// the controller deletes a revert branch once the tracked branch holds
// its change, in the background after the release ended, so this waits
// for it (a bounded wait, not a timing assert). No revert branch of the
// story is ever left unmerged, so none may remain.
func (s *soak) checkRevertBranches() {
	s.T.Helper()
	var left []string
	if !s.settles(60*time.Second, func() bool {
		left = s.branches("rollgate/revert/")
		return len(left) == 0
	}) {
		s.broke("after the merged revert was applied, revert branches on the Git server: %v, want none", left)
	}
}

// released waits for the release to end: Healthy and Ready, Completed on
// image or RolledBack to it, every pod of it ready, the Deployment given
// back, and the status file in Git at the status the cluster shows.
func (s *soak) released(image string, rolledBack bool) {
	s.T.Helper()
	what := fmt.Sprintf("release %d: Healthy on %s with 5 of 5 pods", s.current, image)
	if rolledBack {
		what = fmt.Sprintf("release %d: rolled back to %s, Healthy with 5 of 5 pods", s.current, image)
	}
	s.Eventually(180*time.Second, what, func(ctx context.Context) (bool, error) {
		ro := s.Rollout(s.NS, "echoserver")
		st := ro.Status
		ended := st.StableRevision == st.CanaryRevision && st.CurrentStepState == v1alpha1.StepCompleted
		if rolledBack {
			ended = st.CurrentStepState == v1alpha1.StepRolledBack
		}
		pods := s.Pods(s.NS, "echoserver")
		return ended && st.Phase == v1alpha1.PhaseHealthy && conditions.IsReady(ro) && st.AwaitingApproval == nil &&
			pods[image] == [2]int{5, 5} && len(pods) == 1 && !s.Deployment(s.NS, "echoserver").Spec.Paused, nil
	})
	s.Eventually(30*time.Second, fmt.Sprintf("release %d: GitSynced, naming the head of the status branch", s.current), func(ctx context.Context) (bool, error) {
		ro := s.Rollout(s.NS, "echoserver")
		head, err := s.git.Head("app", "rollgate/status")
		return err == nil && conditions.IsTrue(ro, v1alpha1.GitSyncedCondition) && ro.Status.Git != nil && ro.Status.Git.StatusCommit == head, err
	})
	s.completed++
}

// commit commits files to main, as the user does, and applies what main
// then holds, as Flux does.
func (s *soak) commit(msg string, files map[string]string) {
	s.T.Helper()
	if _, err := s.git.Commit("app", "main", msg, files); err != nil {
		s.T.Fatalf("release %d: commit %q: %v", s.current, msg, err)
	}
	s.sync(msg)
}

// sync applies the Rollout and the app as main holds them, the way Flux's
// kustomize-controller does (server-side apply, its field manager); a
// refusal is counted, not fatal. It also measures spec.approvals in Git.
func (s *soak) sync(what string) {
	s.T.Helper()
	for _, path := range []string{soakRolloutPath, soakDeploymentPath} {
		for _, obj := range rig.Decode(s.T, s.readGit(path)) {
			if err := rig.TryApply(context.Background(), s.C, obj, fluxManager); err != nil {
				s.refusals = append(s.refusals, fmt.Sprintf("release %d, %s: %v", s.current, what, err))
			}
		}
	}
	s.observeApprovals(what)
}

// readGit reads path at the head of main.
func (s *soak) readGit(path string) string {
	s.T.Helper()
	data, err := s.git.ReadFile("app", "main", path)
	if err != nil {
		s.T.Fatal(err)
	}
	return data
}

// maybeRestart restarts the controller with soakRestartChance, after a
// random delay of up to a second so that the restart lands at a random
// instant of what the release is doing.
func (s *soak) maybeRestart(where string) {
	s.T.Helper()
	if s.rng.Float64() >= soakRestartChance {
		return
	}
	// A random instant, not a wait for something: no condition to poll.
	time.Sleep(time.Duration(s.rng.Intn(1000)) * time.Millisecond)
	ro := s.Rollout(s.NS, "echoserver")
	s.stopController()
	s.startController()
	s.restarts++
	s.T.Logf("release %d: controller restarted %s (%s)", s.current, where, releasePosition(&ro.Status))
}

// settles polls cond for up to d and reports whether it held.
func (s *soak) settles(d time.Duration, cond func() bool) bool {
	_, err := rig.Wait(context.Background(), d, "settled", func(context.Context) (bool, string, error) { return cond(), "", nil })
	return err == nil
}

// broke records an invariant break of the release under way.
func (s *soak) broke(format string, args ...any) {
	msg := fmt.Sprintf("release %d: ", s.current) + fmt.Sprintf(format, args...)
	s.T.Log("INVARIANT BREAK " + msg)
	s.breaks = append(s.breaks, msg)
}

// withoutAbort is manifest without its spec.abort line.
func withoutAbort(manifest string) string {
	lines := strings.SplitAfter(manifest, "\n")
	out := lines[:0]
	for _, l := range lines {
		if !strings.HasPrefix(l, "  abort:") {
			out = append(out, l)
		}
	}
	m := strings.Join(out, "")
	if !strings.HasSuffix(m, "\n") {
		m += "\n"
	}
	return m
}
