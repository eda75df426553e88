package shards

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/test/rig"
)

// The instances of the story: the main one takes every Rollout without
// the sharding label, each shard those labelled with its name.
var selectors = map[string]string{
	"main":   "!" + shardKey,
	"shard1": shardKey + " in (shard1)",
	"shard2": shardKey + " in (shard2)",
}

// apps are the story's applications, by the instance their Rollout's
// label sends them to.
var apps = map[string]string{"web": "main", "cart": "shard1", "shop": "shard1", "pay": "shard2"}

// rolloutYAML is the Rollout of app, in the shard labelled shard ("" for
// none): a manual gate at one pod and 20% of traffic, then 40% for two
// seconds, then everything; its manifest is at apps/<app>/rollout.yaml in
// Git and its status goes to the shared status branch.
func rolloutYAML(app, shard string) string {
	labels := ""
	if shard != "" {
		labels = fmt.Sprintf("{%s: %s}", shardKey, shard)
	}
	return rig.Rollout{Name: app, Namespace: ns, Labels: labels, GitPath: "apps/" + app + "/rollout.yaml", Steps: []string{
		`{traffic: "20%", replicas: 1, pause: {}}`,
		`{traffic: "40%", replicas: "40%", pause: {duration: 2}}`,
		`{traffic: "100%", replicas: "100%"}`,
	}}.YAML()
}

// appYAML is app's Deployment (4 pods of image), Service and HTTPRoute.
func appYAML(app, image string) string { return rig.App(ns, app, image, 4) }

func shardOf(instance string) string {
	if instance == "main" {
		return ""
	}
	return instance
}

// TestShardsSplitRollouts: three instances (main, shard1, shard2) on one
// cluster, one application in each. Every Rollout is released by exactly
// one instance, the one its label names, as the instances' own API
// requests show; every instance elects its leader on its own Lease; the
// admission webhook holds a new revision whichever instance answers; the
// three Git writers share one status branch without losing each other's
// files; and a Rollout relabelled from shard1 to shard2 at its gate is
// finished by shard2 alone, shard1 leaving its status file to shard2.
func TestShardsSplitRollouts(t *testing.T) {
	w := newWorld(t, selectors)
	ctx := context.Background()

	// Every instance leads on a Lease of its own: with a shared one, all
	// but one would wait and their Rollouts with them.
	w.Eventually(60*time.Second, "three Leases held", func(context.Context) (bool, error) {
		return len(w.leases()) == 3, nil
	})
	t.Logf("Leases: %v", w.leases())

	// Given three applications from Git, one per instance, released at v1.
	files := map[string]string{}
	for app, in := range apps {
		files["apps/"+app+"/rollout.yaml"] = rolloutYAML(app, shardOf(in))
	}
	repoURL, err := w.git.CreateRepo("app", files)
	if err != nil {
		t.Fatal(err)
	}
	w.ApplyYAML(fmt.Sprintf(`
apiVersion: rollgate.dev/v1alpha1
kind: Repository
metadata: {name: app-repo, namespace: %s}
spec: {url: %q, branch: main, interval: 1s, status: {window: 1s}}
`, ns, repoURL))
	marks := map[string]int{}
	for name, in := range w.instances {
		marks[name] = in.writes.mark()
	}
	for app, in := range apps {
		w.ApplyYAML(appYAML(app, "app:1.0"))
		w.ApplyYAML(rolloutYAML(app, shardOf(in)))
	}
	for app := range apps {
		w.Eventually(90*time.Second, app+" healthy at v1", func(context.Context) (bool, error) {
			ro := w.Rollout(ns, app)
			return ro.Status.Phase == v1alpha1.PhaseHealthy && conditions.IsReady(ro) && w.Pods(ns, app)["app:1.0"][1] == 4, nil
		})
	}

	// When each image changes while the webhook is answered by an
	// instance that does not release that application, the new revision
	// is still held: one pod at a time, behind a gate.
	answer := map[string]string{"web": "shard1", "cart": "shard2", "shop": "main", "pay": "main"}
	for app := range apps {
		by := answer[app]
		w.lb.Pin(by)
		before := w.lb.Served(by)
		w.applyThroughPinned(appYAML(app, "app:2.0"))
		if w.lb.Served(by) == before {
			t.Fatalf("the image update of %s reached no webhook of %s", app, by)
		}
		w.Eventually(90*time.Second, app+" at the gate of step 1", func(context.Context) (bool, error) {
			ro := w.Rollout(ns, app)
			p := w.Pods(ns, app)
			return ro.Status.AwaitingApproval != nil && p["app:2.0"][1] == 1 && p["app:1.0"][1] == 3, nil
		})
	}
	w.lb.Pin("")

	// Then every Rollout and its Deployment were written by its own
	// instance and by no other.
	for app, owner := range apps {
		for name, in := range w.instances {
			ro := in.writes.of(marks[name], "rollouts", app)
			dep := in.writes.of(marks[name], "deployments", app)
			switch {
			case name == owner && (len(ro) == 0 || len(dep) == 0):
				t.Errorf("%s released %s but sent %d Rollout and %d Deployment writes", name, app, len(ro), len(dep))
			case name != owner && len(ro)+len(dep) > 0:
				t.Errorf("%s wrote %s, which %s releases: %s", name, app, owner, summarize(append(ro, dep...)))
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// When cart, waiting at its gate, is relabelled from shard1 to shard2
	// and then approved, shard2 finishes its release and shard1 sends no
	// further write about it.
	moved := map[string]int{}
	for name, in := range w.instances {
		moved[name] = in.writes.mark()
	}
	ro := w.Rollout(ns, "cart")
	patch := client.MergeFrom(ro.DeepCopy())
	ro.Labels[shardKey] = "shard2"
	if err := w.C.Patch(ctx, ro, patch); err != nil {
		t.Fatal(err)
	}
	apps["cart"] = "shard2"
	for app := range apps {
		w.approveStep1(app)
	}
	for app := range apps {
		w.Eventually(120*time.Second, app+" released to v2", func(context.Context) (bool, error) {
			ro := w.Rollout(ns, app)
			return ro.Status.Phase == v1alpha1.PhaseHealthy && ro.Status.AwaitingApproval == nil && w.Pods(ns, app)["app:2.0"][1] == 4 && w.Pods(ns, app)["app:1.0"][1] == 0, nil
		})
	}
	// shard1 may still write cart between the mark and the relabel (a
	// status write of counts it held back): only what the API server
	// applied after the relabel counts. Its later status patches carry
	// the resourceVersion they read and are refused.
	relabelled, err := strconv.ParseUint(ro.ResourceVersion, 10, 64)
	if err != nil {
		t.Fatalf("cart's resourceVersion after the relabel: %v", err)
	}
	if got := w.instances["shard1"].writes.ofAfter(moved["shard1"], relabelled, "rollouts", "cart"); len(got) > 0 {
		t.Errorf("shard1 wrote cart after it was relabelled to shard2: %s", summarize(got))
	}
	if got := w.instances["shard1"].writes.of(moved["shard1"], "deployments", "cart"); len(got) > 0 {
		t.Errorf("shard1 wrote cart's Deployment after cart was relabelled to shard2: %s", summarize(got))
	}
	if got := w.instances["shard2"].writes.of(moved["shard2"], "rollouts", "cart"); len(got) == 0 {
		t.Errorf("shard2 never wrote cart after the relabel, yet cart finished")
	}
	if got := w.instances["main"].writes.of(moved["main"], "rollouts", "cart"); len(got) > 0 {
		t.Errorf("main wrote cart: %s", summarize(got))
	}

	// And the status branch, written by three Git writers, holds every
	// Rollout's file at its last state and an overview listing them all.
	w.Eventually(60*time.Second, "every status file Healthy on rollgate/status", func(context.Context) (bool, error) {
		readme, err := w.git.ReadFile("app", "rollgate/status", "README.md")
		if err != nil {
			return false, nil
		}
		for app := range apps {
			st, ok := w.statusFile(app)
			if !ok || st.Phase != string(v1alpha1.PhaseHealthy) || !strings.Contains(readme, "["+ns+"/"+app+"]") {
				return false, nil
			}
		}
		return true, nil
	})

	// When shard1 writes the status branch again (shop's next release
	// reaches its gate), it leaves cart's file to shard2: it does not put
	// back the state cart had when it left shard1.
	w.ApplyYAML(appYAML("shop", "app:3.0"))
	w.Eventually(90*time.Second, "shop's next release at its gate on rollgate/status", func(context.Context) (bool, error) {
		st, ok := w.statusFile("shop")
		return ok && st.Phase != string(v1alpha1.PhaseHealthy) && st.Step.Current == 1, nil
	})
	if st, ok := w.statusFile("cart"); !ok || st.Phase != string(v1alpha1.PhaseHealthy) {
		t.Errorf("cart's status file after shard1's next write: phase %q, step %d; want shard2's Healthy", st.Phase, st.Step.Current)
	}
}

// statusFile reads app's status file on the status branch.
func (w *world) statusFile(app string) (gitsync.RolloutState, bool) {
	data, err := w.git.ReadFile("app", "rollgate/status", ns+"/"+app+".yaml")
	if err != nil {
		return gitsync.RolloutState{}, false
	}
	st, ok, err := gitsync.ParseStatus([]byte(data))
	return st, ok && err == nil
}

// approveStep1 writes the approval of app's step 1 into its spec, as the
// merged approval pull request would. A controller may write the Rollout
// between the read and the update (shard2 takes over a relabelled one),
// so a conflict reads it again.
func (w *world) approveStep1(app string) {
	w.T.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ro := w.Rollout(ns, app)
		ro.Spec.Approvals = append(ro.Spec.Approvals, v1alpha1.Approval{Revision: ro.Status.CanaryRevision, Step: 1})
		return w.C.Update(context.Background(), ro)
	})
	if err != nil {
		w.T.Fatalf("approve %s: %v", app, err)
	}
}

// summarize names how many writes there were and the first few.
func summarize(writes []string) string {
	if len(writes) > 3 {
		return fmt.Sprintf("%d writes: %s; …", len(writes), strings.Join(writes[:3], "; "))
	}
	return fmt.Sprintf("%d writes: %s", len(writes), strings.Join(writes, "; "))
}
