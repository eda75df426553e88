package rollout

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/reconciler/gitsource"
)

// TestJudgeUpstream: a fleet gate opens only for the upstream release of
// the same images, completed (Healthy) or, with step, past that step's
// pods and traffic; a failed upstream release, another version, another
// cluster's file or no file keeps it closed, with a message naming the
// cluster and what it runs.
func TestJudgeUpstream(t *testing.T) {
	ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web"}}
	v1, v2 := []string{"web=web:1"}, []string{"web=web:2"}
	healthy := func(images []string) gitsync.RolloutState {
		return gitsync.RolloutState{Namespace: "demo", Name: "web", Phase: "Healthy", Stable: gitsync.VersionState{Images: images}}
	}
	at := func(step int, state v1alpha1.StepState, phase string) gitsync.RolloutState {
		return gitsync.RolloutState{Namespace: "demo", Name: "web", Phase: phase,
			Step:   gitsync.StepState{Current: step, Total: 3, State: string(state)},
			Stable: gitsync.VersionState{}, Canary: gitsync.VersionState{Images: v2}, Message: "analysis failed: error-rate = 0.3"}
	}
	finishing := func(images []string) gitsync.RolloutState {
		st := healthy(images)
		st.Phase, st.Step = "Progressing", gitsync.StepState{Current: 3, Total: 3, State: string(v1alpha1.StepCompleted)}
		return st
	}
	done := v1alpha1.FleetWait{Cluster: "staging"}
	step2 := v1alpha1.FleetWait{Cluster: "staging", Step: ptr.To[int32](2)}
	for _, tc := range []struct {
		name  string
		wait  v1alpha1.FleetWait
		state gitsync.RolloutState
		key   string
		open  bool
		why   string
	}{
		{"completed", done, healthy(v2), "", true, ""},
		{"completed with another version", done, healthy(v1), "", false, "cluster staging: demo/web runs web=web:1 (Healthy), not web=web:2"},
		{"every pod at the version, routes coming back", done, finishing(v2), "", false, "is finishing the release of web=web:2; waiting for it to complete"},
		{"at step 1 of the same version", done, at(1, v1alpha1.StepPaused, "Progressing"), "", false, "is at step 1/3 (StepPaused) of web=web:2, waiting for it to complete"},
		{"failed there", done, at(2, v1alpha1.StepRollingBack, "Failed"), "", false, "the release of web=web:2 failed there: analysis failed: error-rate = 0.3"},
		{"failed there, waiting for a step", step2, at(3, v1alpha1.StepRollingBack, "Failed"), "", false, "failed there"},
		{"step 2 reached (waiting at its gate)", step2, at(2, v1alpha1.StepPaused, "Progressing"), "", true, ""},
		{"step 2 still coming up", step2, at(2, v1alpha1.StepUpgrade, "Progressing"), "", false, "waiting for it to reach step 2"},
		{"past step 2", step2, at(3, v1alpha1.StepUpgrade, "Progressing"), "", true, ""},
		{"step 2 of the same version, completed", step2, healthy(v2), "", true, ""},
		{"another cluster's file", done, healthy(v2), "prod/demo/web", false, "has no status in Git"},
		{"another Rollout named", v1alpha1.FleetWait{Cluster: "staging", Rollout: "other/api"}, healthy(v2), "", false, "cluster staging: other/api has no status"},
		{"the Rollout named", v1alpha1.FleetWait{Cluster: "staging", Rollout: "other/api"}, healthy(v2), "staging/other/api", true, ""},
		{"completed, but the file is not believed", done, healthy(v2), "", false, "cluster staging: demo/web: its status file staging/demo/web.yaml is not believed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := tc.key
			if key == "" {
				key = "staging/demo/web"
			}
			f := gitsource.FleetStatus{RolloutState: tc.state}
			if strings.HasSuffix(tc.name, "not believed") {
				f.Distrust = "its status file staging/demo/web.yaml is not believed: the status file carries no signature"
			}
			open, why, _ := upstream{wait: tc.wait, ro: ro, states: map[string]gitsource.FleetStatus{key: f}, images: v2}.judge()
			if open != tc.open || !strings.Contains(why, tc.why) {
				t.Fatalf("open=%v why=%q, want open=%v with %q", open, why, tc.open, tc.why)
			}
		})
	}
}

// TestBakeTime: a wait with bakeTime opens only once the upstream release
// has been complete for that long, as its status file dates the
// completion; until then it says until when, and the planner looks again
// then.
func TestBakeTime(t *testing.T) {
	ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web"}}
	v2 := []string{"web=web:2"}
	released := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	st := gitsync.RolloutState{Namespace: "demo", Name: "web", Phase: "Healthy", Stable: gitsync.VersionState{Images: v2}, LastTransitionTime: released}
	w := v1alpha1.FleetWait{Cluster: "staging", BakeTime: &metav1.Duration{Duration: 2 * time.Hour}}
	u := upstream{wait: w, ro: ro, states: map[string]gitsource.FleetStatus{"staging/demo/web": {RolloutState: st}}, images: v2}

	u.now = released.Add(90 * time.Minute)
	open, why, until := u.judge()
	if open || until != released.Add(2*time.Hour) ||
		why != "cluster staging: demo/web released web=web:2 at 2026-11-29T08:00:00Z; baking for 2h0m0s, until 2026-11-29T10:00:00Z" {
		t.Fatalf("half an hour before the end: open=%v until=%s why=%q", open, until, why)
	}
	u.now = released.Add(2 * time.Hour)
	if open, why, _ := u.judge(); !open {
		t.Fatalf("at the end of the bake time: closed, %q", why)
	}
	st.LastTransitionTime = time.Time{}
	u.states["staging/demo/web"] = gitsource.FleetStatus{RolloutState: st}
	if open, why, _ := u.judge(); open || !strings.Contains(why, "wrote no completion time") {
		t.Fatalf("no completion time: open=%v %q", open, why)
	}
}

// TestFleetCycle: prod waits for staging, whose status file says it waits
// for canary, which waits for prod: a cycle no wave can leave. The gate
// says so, naming the path and the fix, instead of waiting forever in
// silence.
func TestFleetCycle(t *testing.T) {
	ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web"}}
	v1, v2 := []string{"web=web:1"}, []string{"web=web:2"}
	waiting := func(waits ...string) gitsource.FleetStatus {
		return gitsource.FleetStatus{RolloutState: gitsync.RolloutState{Namespace: "demo", Name: "web", Phase: "Paused",
			Stable: gitsync.VersionState{Images: v1}, WaitsFor: waits}}
	}
	states := map[string]gitsource.FleetStatus{
		"staging/demo/web": waiting("canary/demo/web"),
		"canary/demo/web":  waiting("prod/demo/web"),
		"other/demo/web":   waiting(),
	}
	u := upstream{wait: v1alpha1.FleetWait{Cluster: "staging"}, ro: ro, states: states, images: v2, self: "prod/demo/web"}
	open, why, _ := u.judge()
	want := "cluster staging: demo/web waits for this Rollout in turn (prod/demo/web waits for staging/demo/web waits for canary/demo/web waits for prod/demo/web): the waves form a cycle and none can start; remove one of these spec.fleet.waitFor entries"
	if open || why != want {
		t.Fatalf("open=%v why=%q\nwant %q", open, why, want)
	}
	u.wait = v1alpha1.FleetWait{Cluster: "other"}
	if _, why, _ := u.judge(); strings.Contains(why, "cycle") {
		t.Fatalf("no cycle through other: %q", why)
	}
}
