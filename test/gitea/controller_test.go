package gitea_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync/forge"
	"github.com/rollgate/rollgate/reconciler"
	"github.com/rollgate/rollgate/test/browser"
	"github.com/rollgate/rollgate/test/gitea"
	"github.com/rollgate/rollgate/test/inproc"
	"github.com/rollgate/rollgate/test/kwok"
	"github.com/rollgate/rollgate/test/repo"
	"github.com/rollgate/rollgate/test/rig"
	"github.com/rollgate/rollgate/test/testlog"
)

// cluster is a kwok cluster with rollgate's CRDs and the controller
// running in-process, for the stories that run the controller against
// the package's Gitea.
type cluster struct {
	// World's namespace is demo, where the stories' applications live.
	rig.World
	// kubeconfig is the cluster's, for the processes a story runs.
	kubeconfig string
	// pushURL is the controller's push-webhook endpoint, to which a
	// Repository's name is appended as <namespace>/<name>.
	pushURL string
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	kc := kwok.Start(t, kwok.Options{Nodes: 3, Scheme: rig.NewScheme(t)})
	rig.ApplyFiles(t, kc.Client, filepath.Join(repo.Root(), "charts", "rollgate", "crds"), "gitea")
	rig.EnsureNamespace(t, kc.Client, "rollgate-system")
	log := &testlog.Buffer{}
	opts := inproc.Options("rollgate-system", "rollgate")
	pushPort := rig.FreePort(t)
	opts.GitWebhookAddr = fmt.Sprintf("127.0.0.1:%d", pushPort)
	stop := inproc.Start(t, kc.RESTConfig, kc.Client, reconciler.ManagerOptions{}, opts, log)
	t.Cleanup(func() {
		stop()
		log.Report(t, "controller of cluster "+kc.Name)
	})
	return &cluster{World: rig.World{T: t, C: kc.Client, NS: "demo"}, kubeconfig: kc.Kubeconfig, pushURL: fmt.Sprintf("http://127.0.0.1:%d/hook/", pushPort)}
}

// TestApprovalPullRequestOnARealForge: the controller meets a real forge,
// and Flux applies from it. Gitea serves the repository over HTTPS with a
// private CA and protects main with one required approving review; Flux's
// source-controller clones it with a read-only token and Gitea's CA, and kustomize-controller applies its deploy folder every
// 2 s: the Rollout and the Deployment reach the cluster only through Flux.
// A new image is merged into main through a reviewed pull request; at the
// gate, rollgate pushes the approval branch, opens its pull request and
// sets a pending commit status on it; the pull request cannot be merged
// before a review. A second user approves and merges through the API, as a
// person does in the UI, while Flux is suspended. The Repository fetches
// every 10 minutes: only Gitea's push webhook can make rollgate see the
// merge within the story. Signed with the wrong secret, its delivery is
// refused and the gate holds; once a webhook with the Repository's secret
// replaces it, Gitea's delivery wakes rollgate, which reads the merge from
// Git, releases the step, and the pull request's status turns to success;
// resumed, Flux applies the merge. Through it all Flux keeps applying
// main's head, Ready, and never moves a pod back. The next release,
// aborted in Git at its gate, fails its gate's status and opens the
// revert's pull request.
func TestApprovalPullRequestOnARealForge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	began, lap := time.Now(), time.Now()
	phase := func(name string) {
		t.Logf("phase %s took %v (story at %v)", name, time.Since(lap).Round(100*time.Millisecond), time.Since(began).Round(100*time.Millisecond))
		lap = time.Now()
	}
	s := forgeServer
	repo, err := s.CreateRepo(ctx, "controller")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateLabel(ctx, repo, "rollgate"); err != nil {
		t.Fatal(err)
	}
	rollout := rig.Rollout{Name: "web", Namespace: "demo", WithoutTraffic: true, GitRepository: "shop", GitPath: "deploy/rollout.yaml",
		Steps: []string{"{replicas: 1, pause: {}}", `{replicas: "100%"}`}}.YAML()
	for _, f := range []struct{ path, content string }{
		{"deploy/app.yaml", rig.Deployment("demo", "web", "web:1", 3)},
		{"deploy/rollout.yaml", rollout},
	} {
		if err := s.CreateFile(ctx, repo, "main", f.path, []byte(f.content)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.RequireApprovals(ctx, repo, "main", 1); err != nil {
		t.Fatal(err)
	}
	token, err := s.CreateToken(ctx, s.Admin, "rollgate-controller", "write:repository", "write:issue")
	if err != nil {
		t.Fatal(err)
	}

	w := startCluster(t)
	rig.EnsureNamespace(t, w.C, "demo")
	w.CreateSecret("demo", "shop-git", map[string][]byte{"username": []byte(s.Admin.Name), "token": []byte(token), "ca.crt": s.CA})
	// The push webhook, set up in Gitea with a secret that is not the
	// Repository's.
	pushSecret := "push-secret-of-the-shop"
	w.CreateSecret("demo", "shop-push", map[string][]byte{"token": []byte(pushSecret)})
	hook, err := s.CreateHook(ctx, repo, w.pushURL+"demo/shop", "a-wrong-secret")
	if err != nil {
		t.Fatal(err)
	}
	// The platform team's objects: rollgate's Repository, and Flux's
	// GitRepository and Kustomization of the deploy folder.
	w.ApplyYAML(fmt.Sprintf(`
apiVersion: rollgate.dev/v1alpha1
kind: Repository
metadata: {name: shop, namespace: demo}
spec:
  url: %q
  branch: main
  interval: 10m
  secretRef: {name: shop-git}
  status: {window: 1s}
  forge: {provider: gitea, url: %q, project: %q, secretRef: {name: shop-git}}
  webhook: {secretRef: {name: shop-push}}
`, repo.CloneURL, s.URL, repo.Project()))
	fl := w.startFlux(s, repo, "shop", "./deploy")
	head := mainHead(t, s, repo)
	fl.waitApplied(head, "web:1 and the Rollout")
	w.Eventually(90*time.Second, "web:1 running and the Rollout healthy", func(ctx context.Context) (bool, error) {
		return w.Pods("demo", "web")["web:1"] == [2]int{3, 3} && conditions.IsReady(w.Rollout("demo", "web")), nil
	})
	phase("setup (Gitea repository, kwok, controller, Flux applying web:1)")

	// When web:2 is merged into main through a reviewed pull request and
	// Flux applies it,
	release2 := fl.watchNoFight("demo", "web", "web:1", "web:2", head)
	head = mergeReviewed(t, s, repo, "release-web-2", "deploy/app.yaml", rig.Deployment("demo", "web", "web:2", 3), "Release web:2")
	release2.merged(head)
	fl.waitApplied(head, "web:2")
	// then the gate's pull request is open on Gitea, from the approval
	// branch into main, with a pending status on its head.
	var branch, prURL, canary string
	w.Eventually(90*time.Second, "the gate's pull request opened", func(ctx context.Context) (bool, error) {
		ro := w.Rollout("demo", "web")
		a := ro.Status.AwaitingApproval
		if a == nil || a.PullRequestURL == "" {
			return false, nil
		}
		branch, prURL, canary = a.Branch, a.PullRequestURL, ro.Status.CanaryRevision
		return true, nil
	})
	open, err := s.PullRequests(ctx, repo, "open")
	if err != nil || len(open) != 1 || open[0].HTMLURL != prURL || open[0].Head.Ref != branch || open[0].Base.Ref != "main" {
		t.Fatalf("open pull requests on Gitea: %+v (%v); want one from %s into main at %s", open, err, branch, prURL)
	}
	pr := open[0]
	// The dashboard, as a browser draws it, links the gate's pull request.
	dom := browser.Render(t, browser.Dashboard(t, w.kubeconfig, "demo"), filepath.Join(browser.Screenshots(t), "gate-with-pull-request.png"))
	if !strings.Contains(dom, `href="`+prURL+`"`) || !strings.Contains(browser.Text(dom), "merge the pull request "+prURL) {
		t.Errorf("the dashboard does not link the gate's pull request %s:\n%s", prURL, browser.Text(dom))
	}
	if !strings.Contains(pr.Body, "waiting for approval of step 1 of 2") {
		t.Errorf("pull request body does not give the step:\n%s", pr.Body)
	}
	// The body holds the release's plan, the step to approve marked, and
	// a link to the status file that Gitea serves.
	if !strings.Contains(pr.Body, "| **→ 1** | 1 | 2 |") || !strings.Contains(pr.Body, "| 2 | 3 | 0 |") {
		t.Errorf("pull request body has no plan with step 1 marked:\n%s", pr.Body)
	}
	link := regexp.MustCompile(`\[its status file\]\(([^)]+)\)`).FindStringSubmatch(pr.Body)
	if link == nil {
		t.Fatalf("pull request body links no status file:\n%s", pr.Body)
	}
	w.Eventually(30*time.Second, "the status file the pull request links served by Gitea", func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, link[1], nil)
		if err != nil {
			return false, err
		}
		req.SetBasicAuth(s.Admin.Name, s.Admin.Password)
		resp, err := s.HTTPClient().Do(req)
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		page, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK && strings.Contains(string(page), "awaitingApproval"), nil
	})
	statusIs := func(sha string, want forge.StatusState) {
		t.Helper()
		w.Eventually(60*time.Second, "the pull request's status "+string(want), func(ctx context.Context) (bool, error) {
			combined, list, err := s.CombinedStatus(ctx, repo, sha)
			return err == nil && combined == string(want) && len(list) == 1 && list[0].Context == "rollgate/demo/web", nil
		})
	}
	statusIs(pr.Head.SHA, forge.StatusPending)

	// The forge holds the gate too: no merge without an approving review.
	if _, err := s.WaitMergeable(ctx, repo, pr.Number, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Merge(ctx, s.Reviewer, repo, pr.Number); err == nil {
		t.Fatal("Gitea merged the pull request without an approving review")
	}
	atTheGate := func(why string) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			if got := w.Pods("demo", "web")["web:2"]; got[0] > 1 {
				return fmt.Errorf("web:2 has %d pods, want 1 (the gate's step): %s", got[0], why)
			}
			return nil
		}
	}
	w.Holds(2*time.Second, "the gate holds until the merge", atTheGate("released before the merge"))
	phase("web:2 merged, applied by Flux, its gate's pull request open")

	// When the reviewer approves and merges while Flux is suspended (as
	// `flux suspend kustomization` does: applied, the approval would open
	// the gate from the cluster), and Gitea's push webhook is signed with
	// the wrong secret, the delivery is refused and the gate holds: the
	// Repository fetches every 10 minutes;
	fl.suspend(true)
	if err := s.Review(ctx, s.Reviewer, repo, pr.Number, "APPROVED", "Canary looks right."); err != nil {
		t.Fatal(err)
	}
	if err := s.Merge(ctx, s.Reviewer, repo, pr.Number); err != nil {
		t.Fatalf("merge after approval: %v", err)
	}
	head = mainHead(t, s, repo)
	release2.merged(head)
	w.Holds(10*time.Second, "the gate holds while the push webhook's signature is wrong", atTheGate("a push signed with the wrong secret opened the gate"))
	// once a webhook signs with the Repository's secret, Gitea's
	// delivery wakes rollgate, which releases the step from the merge in
	// Git,
	if err := s.DeleteHook(ctx, hook); err != nil {
		t.Fatal(err)
	}
	if hook, err = s.CreateHook(ctx, repo, w.pushURL+"demo/shop", pushSecret); err != nil {
		t.Fatal(err)
	}
	delivered := time.Now()
	if err := s.TestHook(ctx, hook); err != nil {
		t.Fatal(err)
	}
	w.Eventually(90*time.Second, "web:2 released", func(ctx context.Context) (bool, error) {
		return conditions.IsReady(w.Rollout("demo", "web")) && w.Pods("demo", "web")["web:2"] == [2]int{3, 3}, nil
	})
	t.Logf("Gitea's signed push delivery → web:2 released in %v", time.Since(delivered).Round(100*time.Millisecond))
	// and the pull request's status says so. Resumed, Flux applies the
	// merged approval, stays Ready and moves nothing.
	statusIs(pr.Head.SHA, forge.StatusSuccess)
	fl.suspend(false)
	fl.waitApplied(head, "the merged approval, after the release")
	if got := w.Rollout("demo", "web").Spec.Approvals; !slices.Contains(got, v1alpha1.Approval{Revision: canary, Step: 1}) {
		t.Fatalf("the Rollout in the cluster has approvals %+v after Flux applied the merge; want {revision: %s, step: 1}", got, canary)
	}
	w.Holds(6*time.Second, "web:2 on every pod while Flux keeps applying", func(ctx context.Context) error {
		if got := w.Pods("demo", "web"); got["web:2"] != [2]int{3, 3} || len(got) != 1 {
			return fmt.Errorf("pods %v, want web:2 only, 3 of 3 ready", got)
		}
		return nil
	})
	release2.check("web:1 → web:2, from the bump to 6 s after the release", 3)
	phase("web:2 approved, released and applied")

	// When web:3 is merged into main through a reviewed pull request and
	// Flux applies it, and its gate's pull request opens,
	release3 := fl.watchNoFight("demo", "web", "web:2", "web:3", head)
	head = mergeReviewed(t, s, repo, "release-web-3", "deploy/app.yaml", rig.Deployment("demo", "web", "web:3", 3), "Release web:3")
	release3.merged(head)
	fl.waitApplied(head, "web:3")
	w.Eventually(90*time.Second, "the gate of web:3 opened its pull request", func(ctx context.Context) (bool, error) {
		ro := w.Rollout("demo", "web")
		a := ro.Status.AwaitingApproval
		if a == nil || a.PullRequestURL == "" || a.Branch == branch {
			return false, nil
		}
		branch, prURL, canary = a.Branch, a.PullRequestURL, ro.Status.CanaryRevision
		return true, nil
	})
	gate3 := onlyOpenFrom(t, s, repo, branch)
	statusIs(gate3.Head.SHA, forge.StatusPending)
	release3.check("web:2 → web:3, up to its gate", 1)
	phase("web:3 merged, applied by Flux, its gate's pull request open")

	// and web:3 is aborted at its gate through a reviewed pull request,
	file, err := s.FileAt(ctx, repo, "main", "deploy/rollout.yaml")
	if err != nil {
		t.Fatal(err)
	}
	file = strings.TrimRight(file, "\n") + fmt.Sprintf("\n  abort: {revision: %s, reason: bad latency}\n", canary)
	head = mergeReviewed(t, s, repo, "abort-web-3", "deploy/rollout.yaml", file, "Abort web:3: bad latency")
	fl.waitApplied(head, "the abort")
	// then the gate's pull request fails, and the revert is proposed as a
	// pull request that sets web:2 back.
	statusIs(gate3.Head.SHA, forge.StatusFailure)
	var revert string
	w.Eventually(90*time.Second, "the revert's pull request opened", func(ctx context.Context) (bool, error) {
		g := w.Rollout("demo", "web").Status.Git
		if g == nil || g.RevertPullRequestURL == "" {
			return false, nil
		}
		revert = g.RevertBranch
		return true, nil
	})
	rv := onlyOpenFrom(t, s, repo, revert)
	if !strings.Contains(rv.Title, "Revert") && !strings.Contains(rv.Title, "revert") {
		t.Errorf("revert pull request title %q", rv.Title)
	}
	app, err := s.FileAt(ctx, repo, revert, "deploy/app.yaml")
	if err != nil || !strings.Contains(app, "image: web:2") {
		t.Fatalf("deploy/app.yaml on %s: %v\n%s\nwant image web:2", revert, err, app)
	}
	// Until the revert is merged, main still declares web:3: Flux keeps
	// applying it, Ready, and web:2 stays on every pod.
	w.Eventually(90*time.Second, "web:2 back on every pod", func(ctx context.Context) (bool, error) {
		got := w.Pods("demo", "web")
		return got["web:2"] == [2]int{3, 3} && len(got) == 1, nil
	})
	fl.waitApplied(head, "main's head after the abort")
	aborted := fl.watchNoFight("demo", "web", "web:3", "web:2", head)
	w.Holds(6*time.Second, "web:2 on every pod while Flux applies web:3 from main", func(ctx context.Context) error {
		if got := w.Pods("demo", "web"); got["web:2"] != [2]int{3, 3} || len(got) != 1 {
			return fmt.Errorf("pods %v, want web:2 only, 3 of 3 ready", got)
		}
		return nil
	})
	aborted.check("after the abort, main declaring web:3", 2)
	phase("web:3 aborted in Git, its revert proposed")
	t.Logf("the whole story took %v", time.Since(began).Round(100*time.Millisecond))
}

// mainHead is the commit at the head of repo's main.
func mainHead(t *testing.T, s *gitea.Server, repo gitea.Repo) string {
	t.Helper()
	head, err := s.BranchHead(context.Background(), repo, "main")
	if err != nil {
		t.Fatal(err)
	}
	return head
}

// mergeReviewed changes path on main as a team does when main is
// protected: commits content on a new branch, opens its pull request as
// the administrator, and has the reviewer approve and merge it. It returns
// main's new head.
func mergeReviewed(t *testing.T, s *gitea.Server, repo gitea.Repo, branch, path, content, title string) string {
	t.Helper()
	ctx := context.Background()
	if err := s.UpdateFile(ctx, repo, "main", branch, path, []byte(content)); err != nil {
		t.Fatal(err)
	}
	pr, err := s.OpenPullRequest(ctx, s.Admin, repo, branch, "main", title)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WaitMergeable(ctx, repo, pr.Number, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Review(ctx, s.Reviewer, repo, pr.Number, "APPROVED", "Ship it."); err != nil {
		t.Fatal(err)
	}
	if err := s.Merge(ctx, s.Reviewer, repo, pr.Number); err != nil {
		t.Fatal(err)
	}
	return mainHead(t, s, repo)
}

// onlyOpenFrom returns the one open pull request from head.
func onlyOpenFrom(t *testing.T, s *gitea.Server, repo gitea.Repo, head string) gitea.PullRequest {
	t.Helper()
	open, err := s.PullRequests(context.Background(), repo, "open")
	if err != nil {
		t.Fatal(err)
	}
	var found []gitea.PullRequest
	for _, pr := range open {
		if pr.Head.Ref == head {
			found = append(found, pr)
		}
	}
	if len(found) != 1 || found[0].Base.Ref != "main" {
		t.Fatalf("open pull requests from %s into main: %+v (all open: %d)", head, found, len(open))
	}
	return found[0]
}
