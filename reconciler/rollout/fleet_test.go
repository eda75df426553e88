package rollout

import (
	"maps"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
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

// graphState is a status file of demo/web in a graph story: its phase,
// the images it runs (stable) and releases (canary), what it waits for.
func graphState(phase string, stable, canary []string, waits ...string) gitsource.FleetStatus {
	return gitsource.FleetStatus{RolloutState: gitsync.RolloutState{Namespace: "demo", Name: "web", Phase: phase,
		Stable: gitsync.VersionState{Images: stable}, Canary: gitsync.VersionState{Images: canary}, WaitsFor: waits,
		Message: "aborted: bad latency", Reason: "WaitingForFleet"}}
}

// TestFleetGraphNamesTheFailedCluster: canary → prod-eu and prod-us →
// prod-rest. When canary's release of web:2 failed, prod-eu and prod-us
// hold before it; prod-rest, which waits on them, names canary (the
// release that failed, found through the waits the status files record)
// and the path to it, not just "prod-eu runs web:1".
func TestFleetGraphNamesTheFailedCluster(t *testing.T) {
	ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web"}}
	v1, v2 := []string{"web=web:1"}, []string{"web=web:2"}
	states := map[string]gitsource.FleetStatus{
		"canary/demo/web":    graphState("Failed", v1, v2),
		"prod-eu/demo/web":   graphState("Paused", v1, v1, "canary/demo/web"),
		"prod-us/demo/web":   graphState("Paused", v1, v1, "canary/demo/web"),
		"prod-rest/demo/web": graphState("Paused", v1, v1, "prod-eu/demo/web", "prod-us/demo/web"),
	}
	u := upstream{wait: v1alpha1.FleetWait{Cluster: "prod-eu"}, ro: ro, states: states, images: v2, self: "prod-rest/demo/web"}
	open, why, _ := u.judge()
	want := "cluster prod-eu: demo/web is held by a failed release upstream of it: cluster canary: demo/web: the release of web=web:2 failed there: aborted: bad latency (prod-eu/demo/web waits for canary/demo/web)"
	if open || why != want {
		t.Fatalf("open=%v why=%q\nwant %q", open, why, want)
	}
	// Two levels up: the path shows every hop.
	states["prod-last/demo/web"] = graphState("Paused", v1, v1, "prod-rest/demo/web")
	u.wait, u.self = v1alpha1.FleetWait{Cluster: "prod-rest"}, "prod-last/demo/web"
	if _, why, _ := u.judge(); !strings.Contains(why, "failed there: aborted: bad latency (prod-rest/demo/web waits for prod-eu/demo/web waits for canary/demo/web)") {
		t.Fatalf("two levels below the failure: %q", why)
	}
	// canary released web:2 again (a retry): the waves downstream go on
	// and say so, no failure named any more.
	states["canary/demo/web"] = graphState("Healthy", v2, v2)
	u.wait, u.self = v1alpha1.FleetWait{Cluster: "prod-eu"}, "prod-rest/demo/web"
	if _, why, _ := u.judge(); strings.Contains(why, "failed") || !strings.Contains(why, "cluster prod-eu: demo/web runs web=web:1 (Paused), not web=web:2") {
		t.Fatalf("canary released: %q", why)
	}
}

// TestFleetWaitNamesAMissingCluster: a wait on a cluster that never wrote
// a status file says so and lists the clusters that did; a cluster that
// wrote the status of other Rollouts only says which.
func TestFleetWaitNamesAMissingCluster(t *testing.T) {
	ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web"}}
	v1 := []string{"web=web:1"}
	states := map[string]gitsource.FleetStatus{
		"canary/demo/web":  graphState("Healthy", v1, v1),
		"prod-eu/demo/api": graphState("Healthy", v1, v1),
	}
	for _, tc := range []struct{ cluster, want string }{
		{"prod-ue", "cluster prod-ue: demo/web has no status in Git: no cluster named prod-ue wrote a status file on the status branch (the clusters there are canary, prod-eu); check the name, and that its Repository's spec.status.cluster is prod-ue, on the same status branch"},
		{"prod-eu", "cluster prod-eu: demo/web has no status in Git: cluster prod-eu wrote the status of demo/api only; check spec.fleet.waitFor[].rollout"},
	} {
		open, why, _ := upstream{wait: v1alpha1.FleetWait{Cluster: tc.cluster}, ro: ro, states: states, images: v1}.judge()
		if open || why != tc.want {
			t.Errorf("open=%v why=%q\nwant %q", open, why, tc.want)
		}
	}
	_, why, _ := upstream{wait: v1alpha1.FleetWait{Cluster: "prod"}, ro: ro, states: nil, images: v1}.judge()
	if !strings.Contains(why, "(no cluster wrote one yet)") {
		t.Errorf("an empty status branch: %q", why)
	}
}

// TestFleetShare: a wait on a share of a set of clusters opens when at
// least atLeast of them released (a count, a percentage rounded up, or
// all by default), each judged as a wait on one cluster; never on an
// empty set; never while a release of the same images failed in the set.
func TestFleetShare(t *testing.T) {
	ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web"}}
	v1, v2 := []string{"web=web:1"}, []string{"web=web:2"}
	done, old, failed := graphState("Healthy", v2, v2), graphState("Healthy", v1, v1), graphState("Failed", v1, v2)
	pct := func(s string) *intstr.IntOrString { v := intstr.FromString(s); return &v }
	n := func(i int) *intstr.IntOrString { v := intstr.FromInt32(int32(i)); return &v }
	fleet := func(files map[string]gitsource.FleetStatus) map[string]gitsource.FleetStatus {
		states := map[string]gitsource.FleetStatus{"prod-rest/demo/web": old, "canary/demo/web": done, "prod-eu-1/demo/api": done}
		maps.Copy(states, files)
		return states
	}
	for _, tc := range []struct {
		name     string
		clusters []string
		atLeast  *intstr.IntOrString
		states   map[string]gitsource.FleetStatus
		open     bool
		why      string
	}{
		{"10% of 4, one released", []string{"prod-eu-*"}, pct("10%"),
			fleet(map[string]gitsource.FleetStatus{"prod-eu-1/demo/web": done, "prod-eu-2/demo/web": old, "prod-eu-3/demo/web": old, "prod-eu-4/demo/web": old}), true, ""},
		{"50% of 4, one released", []string{"prod-eu-*"}, pct("50%"),
			fleet(map[string]gitsource.FleetStatus{"prod-eu-1/demo/web": done, "prod-eu-2/demo/web": old, "prod-eu-3/demo/web": old, "prod-eu-4/demo/web": old}), false,
			"clusters prod-eu-*: demo/web: 1 of 4 clusters released web=web:2, at least 2 needed (atLeast 50%): cluster prod-eu-2: demo/web runs web=web:1 (Healthy), not web=web:2; cluster prod-eu-3"},
		{"2 of names and a pattern", []string{"prod-us", "prod-eu-*"}, n(2),
			fleet(map[string]gitsource.FleetStatus{"prod-eu-1/demo/web": done, "prod-us/demo/web": done, "prod-eu-2/demo/web": old}), true, ""},
		{"all by default", []string{"prod-us", "prod-eu-1"}, nil,
			fleet(map[string]gitsource.FleetStatus{"prod-eu-1/demo/web": done, "prod-us/demo/web": old}), false, "1 of 2 clusters released web=web:2, at least 2 needed (atLeast all)"},
		{"a named cluster without a file is in the set", []string{"prod-us", "prod-eu-1"}, n(2),
			fleet(map[string]gitsource.FleetStatus{"prod-eu-1/demo/web": done}), false, "cluster prod-us: demo/web has no status in Git: no cluster named prod-us"},
		{"a pattern matching nothing", []string{"edge-*"}, n(1), fleet(nil), false,
			"clusters edge-*: demo/web: no cluster of the set has a status file of it on the status branch (the clusters there are canary, prod-eu-1, prod-rest); the wait holds until one has"},
		{"a pattern matching only other Rollouts and this cluster", []string{"prod-*"}, pct("10%"), fleet(nil), false, "no cluster of the set has a status file of it"},
		{"more than the set", []string{"prod-eu-*"}, n(3),
			fleet(map[string]gitsource.FleetStatus{"prod-eu-1/demo/web": done, "prod-eu-2/demo/web": done}), false,
			"at least 3 clusters must release it, but the set has only 2 (prod-eu-1, prod-eu-2); lower atLeast or add clusters"},
		{"a failure in the set holds it", []string{"prod-eu-*"}, n(1),
			fleet(map[string]gitsource.FleetStatus{"prod-eu-1/demo/web": done, "prod-eu-2/demo/web": failed}), false,
			"clusters prod-eu-*: a release in the set failed: cluster prod-eu-2: demo/web: the release of web=web:2 failed there: aborted: bad latency"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := v1alpha1.FleetWait{Clusters: tc.clusters, AtLeast: tc.atLeast}
			open, why, _ := upstream{wait: w, ro: ro, states: tc.states, images: v2, self: "prod-rest/demo/web"}.judge()
			if open != tc.open || !strings.Contains(why, tc.why) {
				t.Fatalf("open=%v why=%q\nwant open=%v with %q", open, why, tc.open, tc.why)
			}
		})
	}
}

// TestFleetShareBakes: with bakeTime, a cluster of the set counts once
// its release baked; the wait opens by itself when enough bakes ended,
// and says so.
func TestFleetShareBakes(t *testing.T) {
	ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web"}}
	v2 := []string{"web=web:2"}
	t0 := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	released := func(at time.Duration) gitsource.FleetStatus {
		f := graphState("Healthy", v2, v2)
		f.LastTransitionTime = t0.Add(at)
		return f
	}
	states := map[string]gitsource.FleetStatus{
		"edge-1/demo/web": released(0), "edge-2/demo/web": released(20 * time.Minute), "edge-3/demo/web": released(10 * time.Minute),
	}
	two := intstr.FromInt32(2)
	u := upstream{wait: v1alpha1.FleetWait{Clusters: []string{"edge-*"}, AtLeast: &two, BakeTime: &metav1.Duration{Duration: time.Hour}},
		ro: ro, states: states, images: v2, now: t0.Add(30 * time.Minute)}
	open, why, until := u.judge()
	if open || until != t0.Add(70*time.Minute) || !strings.Contains(why, "0 of 3 clusters released web=web:2, at least 2 needed (atLeast 2): cluster edge-1: demo/web released web=web:2 at 2026-11-29T08:00:00Z; baking for 1h0m0s") {
		t.Fatalf("open=%v until=%s why=%q, want closed until the second bake ends (09:10)", open, until, why)
	}
	u.now = t0.Add(70 * time.Minute)
	if open, why, _ := u.judge(); !open {
		t.Fatalf("two bakes ended: closed, %q", why)
	}
}

// TestFleetCycleThroughAShare: a share's pattern, recorded as written in
// the status file, is matched against the branch: prod waits for canary,
// which waits for any "prod*" cluster: a cycle.
func TestFleetCycleThroughAShare(t *testing.T) {
	ro := &v1alpha1.Rollout{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web"}}
	v1, v2 := []string{"web=web:1"}, []string{"web=web:2"}
	states := map[string]gitsource.FleetStatus{
		"canary/demo/web": graphState("Paused", v1, v1, "prod*/demo/web"),
	}
	u := upstream{wait: v1alpha1.FleetWait{Cluster: "canary"}, ro: ro, states: states, images: v2, self: "prod/demo/web"}
	if _, why, _ := u.judge(); !strings.Contains(why, "(prod/demo/web waits for canary/demo/web waits for prod/demo/web): the waves form a cycle") {
		t.Fatalf("cycle through a pattern: %q", why)
	}
}
