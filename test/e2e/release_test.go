package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/test/gitserver"
	"github.com/rollgate/rollgate/test/rig"
)

// echoRollout releases echoserver (echoApp) in three steps, the first a
// manual gate: merge the approval branch.
var echoRollout = rig.Rollout{Name: "echoserver", Namespace: "demo", GitPath: "apps/echoserver/rollout.yaml", Steps: []string{
	`{traffic: "20%", replicas: 1, pause: {}}`,
	`{traffic: "40%", replicas: "40%", pause: {duration: 2}}`,
	`{traffic: "100%", replicas: "100%"}`,
}}.YAML()

// echoApp is the echoserver app in namespace demo: five pods of image, its
// Service and its HTTPRoute.
func echoApp(image string) string { return rig.App("demo", "echoserver", image, 5) }

// TestReleaseWithApprovalMergedInGit is the story rollgate exists for.
func TestReleaseWithApprovalMergedInGit(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	repoURL, err := w.git.CreateRepo("app", map[string]string{"apps/echoserver/rollout.yaml": w.InNS(echoRollout)})
	if err != nil {
		t.Fatal(err)
	}
	// The controller reaches the Git server through a proxy the story can
	// stop.
	proxy := newGitProxy(t, w.git.URL)
	repoURL = strings.Replace(repoURL, w.git.URL, proxy.URL(), 1)
	w.ApplyYAML(appRepository(repoURL, ""))

	// Given a running workload and its Rollout, applied from Git.
	w.ApplyYAML(echoApp("echo:1.0"))
	w.ApplyYAML(echoRollout)
	w.Eventually(60*time.Second, "v1 running and the Rollout healthy", func(ctx context.Context) (bool, error) {
		ro := w.Rollout(w.NS, "echoserver")
		return w.Pods(w.NS, "echoserver")["echo:1.0"] == [2]int{5, 5} && conditions.IsReady(ro) &&
			w.Deployment(w.NS, "echoserver").Labels[v1alpha1.LabelControlled] != "", nil
	})
	// And the Repository says rollgate reads it, at the commit Git has.
	w.repositoryAt("app-repo", "app", "")

	// When the image changes in Git and Flux applies it.
	log := w.watchRollout(w.NS, "echoserver")
	w.ApplyYAML(echoApp("echo:2.0"))

	// Then batch 1 has exactly one new pod and 20% of traffic, and the
	// release waits for approval on an approval branch in Git.
	var ro *v1alpha1.Rollout
	w.Eventually(90*time.Second, "step 1 waiting for approval", func(ctx context.Context) (bool, error) {
		ro = w.Rollout(w.NS, "echoserver")
		return ro.Status.AwaitingApproval != nil && ro.Status.AwaitingApproval.Branch != "", nil
	})
	if got := w.Pods(w.NS, "echoserver"); got["echo:2.0"] != [2]int{1, 1} || got["echo:1.0"] != [2]int{4, 4} {
		t.Fatalf("step 1: want 1 new and 4 old ready pods, got %v", got)
	}
	if d := w.Deployment(w.NS, "echoserver"); !d.Spec.Paused {
		t.Fatalf("the Deployment must be held paused during the release: %+v", d.Spec)
	}
	assertWeights(t, w, 80, 20)
	if conditions.IsStalled(ro) || conditions.IsReady(ro) || !conditions.IsTrue(ro, v1alpha1.AwaitingApprovalCondition) {
		t.Fatalf("waiting for approval must be AwaitingApproval=True, Ready=False, not Stalled: %+v", ro.Status.Conditions)
	}
	assertKstatus(t, ro)
	branch := ro.Status.AwaitingApproval.Branch
	if want := gitsync.ApprovalBranch(w.NS, "echoserver", gitsync.Approval{Revision: ro.Status.CanaryRevision, Step: 1}); branch != want {
		t.Fatalf("approval branch %q, want %q", branch, want)
	}

	// And GitSynced says when Git holds the gate: False (GitPending) as it
	// opens, True within the status window (1s), naming the head of the
	// status branch, whose file shows the gate.
	atGate := func(st v1alpha1.RolloutStatus) bool {
		return st.AwaitingApproval != nil && st.AwaitingApproval.Branch == branch
	}
	pending, synced := w.gitSyncedAfter(log, "the gate of step 1", atGate)
	latency := synced.at.Sub(pending.at)
	t.Logf("gate of step 1: GitSynced True %v after the gate showed with GitSynced=False (status window 1s)", latency)
	statusHead, _ := w.git.Head("app", "rollgate/status")
	file, _ := w.git.ReadFile("app", "rollgate/status", w.NS+"/echoserver.yaml")
	if synced.status.Git.StatusCommit != statusHead || !strings.Contains(file, "branch: "+branch) || !strings.Contains(file, "current: 1") {
		t.Fatalf("GitSynced=True names %s; status branch at %s with:\n%s", synced.status.Git.StatusCommit, statusHead, file)
	}
	assertKstatusIgnoresGitSynced(t, log.snapshot())
	repo := w.repositoryAt("app-repo", "app", statusHead)

	// A controller restart while waiting skips no gate, and rewrites no
	// Repository status: the gate's fetches every second find the same
	// commits.
	w.stopController()
	w.startController()
	// Several fetch intervals: nothing may move without the merge.
	w.Holds(3*time.Second, "the gate across a restart", func(ctx context.Context) error {
		if ro = w.Rollout(w.NS, "echoserver"); ro.Status.CurrentStepIndex != 1 || ro.Status.AwaitingApproval == nil {
			return fmt.Errorf("after a restart the gate must still hold: step %d, awaiting %v", ro.Status.CurrentStepIndex, ro.Status.AwaitingApproval)
		}
		if again := w.repository(w.NS, "app-repo"); again.ResourceVersion != repo.ResourceVersion {
			return fmt.Errorf("Repository status rewritten with nothing changed:\nbefore %s\nafter  %s", describeRepository(repo), describeRepository(again))
		}
		return nil
	})

	// When the Git server stops, the Repository says so and names the
	// error; the gate holds. Started again, the Repository is Ready again.
	proxy.stop()
	w.Eventually(30*time.Second, "Repository Ready=False naming the refused connection", func(ctx context.Context) (bool, error) {
		c := conditions.Get(w.repository(w.NS, "app-repo"), v1alpha1.ReadyCondition)
		return c != nil && c.Status == "False" && c.Reason == v1alpha1.ReasonGitError && strings.Contains(c.Message, "connection refused"), nil
	})
	t.Logf("Git stopped: %s", describeRepository(w.repository(w.NS, "app-repo")))
	if ro = w.Rollout(w.NS, "echoserver"); ro.Status.CurrentStepIndex != 1 || ro.Status.AwaitingApproval == nil {
		t.Fatalf("with Git stopped the gate must hold: step %d, awaiting %v", ro.Status.CurrentStepIndex, ro.Status.AwaitingApproval)
	}
	proxy.start()
	w.repositoryAt("app-repo", "app", statusHead)

	// When a user merges the approval branch.
	if _, err := w.git.Merge("app", "main", branch, "Merge approval of echoserver step 1"); err != nil {
		t.Fatal(err)
	}

	// Then the release goes on, to completion, before Flux even applies the
	// Rollout manifest the merge changed.
	w.Eventually(120*time.Second, "the release completes", func(ctx context.Context) (bool, error) {
		ro = w.Rollout(w.NS, "echoserver")
		return ro.Status.Phase == v1alpha1.PhaseHealthy && conditions.IsReady(ro) && ro.Status.StableRevision == ro.Status.CanaryRevision, nil
	})
	w.Eventually(60*time.Second, "all pods on v2 and the Deployment given back", func(ctx context.Context) (bool, error) {
		d := w.Deployment(w.NS, "echoserver")
		return w.Pods(w.NS, "echoserver")["echo:2.0"] == [2]int{5, 5} && !d.Spec.Paused && d.Spec.Strategy.Type != "Recreate", nil
	})
	assertKstatus(t, w.Rollout(w.NS, "echoserver"))
	var route gatewayv1.HTTPRoute
	if err := w.C.Get(ctx, client.ObjectKey{Namespace: w.NS, Name: "echoserver"}, &route); err != nil {
		t.Fatal(err)
	}
	if refs := route.Spec.Rules[0].BackendRefs; len(refs) != 1 || refs[0].Name != "echoserver" {
		t.Fatalf("the HTTPRoute must be back to what Git declares, got %+v", refs)
	}

	// And Git tells the story without the cluster: GitSynced=True names
	// the head of the status branch, whose file says Healthy.
	w.Eventually(30*time.Second, "GitSynced=True naming the status commit that says Healthy", func(ctx context.Context) (bool, error) {
		ro := w.Rollout(w.NS, "echoserver")
		head, _ := w.git.Head("app", "rollgate/status")
		s, err := w.git.ReadFile("app", "rollgate/status", w.NS+"/echoserver.yaml")
		return conditions.IsTrue(ro, v1alpha1.GitSyncedCondition) && ro.Status.Git.StatusCommit == head &&
			err == nil && strings.Contains(s, "phase: Healthy"), nil
	})
	assertKstatusIgnoresGitSynced(t, log.snapshot())
	// The Repository followed: main at the merge, the last status commit.
	statusHead, _ = w.git.Head("app", "rollgate/status")
	w.repositoryAt("app-repo", "app", statusHead)

	// A Repository whose Secret holds a wrong password is not Ready; its
	// status names the error, never the password.
	const wrongPassword = "wr0ng-Pa55word-e2e"
	private := gitserver.Start(t, gitserver.Options{Username: "bot", Password: "right-Pa55word-e2e"})
	privateURL, err := private.CreateRepo("private", map[string]string{"README.md": "private\n"})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.C.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.NS, Name: "private-credentials"},
		StringData: map[string]string{"username": "bot", "password": wrongPassword},
	}); err != nil {
		t.Fatal(err)
	}
	w.ApplyYAML(fmt.Sprintf(`
apiVersion: rollgate.dev/v1alpha1
kind: Repository
metadata: {name: private-repo, namespace: demo}
spec: {url: %q, branch: main, secretRef: {name: private-credentials}}
`, privateURL))
	w.Eventually(30*time.Second, "Repository with a wrong password Ready=False", func(ctx context.Context) (bool, error) {
		c := conditions.Get(w.repository(w.NS, "private-repo"), v1alpha1.ReadyCondition)
		return c != nil && c.Status == "False" && c.Reason == v1alpha1.ReasonGitError && strings.Contains(c.Message, "authentication"), nil
	})
	private0 := w.repository(w.NS, "private-repo")
	t.Logf("wrong password: %s", describeRepository(private0))
	if status, _ := json.Marshal(private0.Status); strings.Contains(string(status), wrongPassword) {
		t.Fatalf("the password is in the Repository's status: %s", status)
	}
}

// repositoryAt waits for the Repository name in demo to be Ready at the
// head of main of the Git server's repository gitRepo, with statusCommit
// as its last status commit ("" for any).
func (w *world) repositoryAt(name, gitRepo, statusCommit string) *v1alpha1.Repository {
	w.T.Helper()
	var r *v1alpha1.Repository
	w.Eventually(30*time.Second, "Repository "+name+" Ready at the head of main", func(ctx context.Context) (bool, error) {
		r = w.repository(w.NS, name)
		main, err := w.git.Head(gitRepo, "main")
		return err == nil && conditions.IsReady(r) && r.Status.LastFetchedCommit == main && r.Status.LastFetchTime != nil &&
			(statusCommit == "" || r.Status.LastStatusCommit == statusCommit) && r.Status.ObservedGeneration == r.Generation, nil
	})
	return r
}

// assertWeights checks the share of requests each backend of the
// HTTPRoute's first rule gets, in percent (a missing backend gets none).
func assertWeights(t *testing.T, w *world, stable, canary int32) {
	t.Helper()
	w.Eventually(30*time.Second, fmt.Sprintf("HTTPRoute split %d/%d", stable, canary), func(ctx context.Context) (bool, error) {
		var route gatewayv1.HTTPRoute
		if err := w.C.Get(ctx, client.ObjectKey{Namespace: w.NS, Name: "echoserver"}, &route); err != nil {
			return false, err
		}
		got, total := map[string]int32{}, int32(0)
		for _, ref := range route.Spec.Rules[0].BackendRefs {
			weight := int32(1)
			if ref.Weight != nil {
				weight = *ref.Weight
			}
			got[string(ref.Name)] += weight
			total += weight
		}
		if total == 0 {
			return false, nil
		}
		return got["echoserver"]*100/total == stable && got["echoserver-canary"]*100/total == canary, nil
	})
}
