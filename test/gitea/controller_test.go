package gitea_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync/forge"
	"github.com/rollgate/rollgate/reconciler"
	"github.com/rollgate/rollgate/test/browser"
	"github.com/rollgate/rollgate/test/gitea"
	"github.com/rollgate/rollgate/test/inproc"
	"github.com/rollgate/rollgate/test/kube"
	"github.com/rollgate/rollgate/test/kwok"
	"github.com/rollgate/rollgate/test/repo"
	"github.com/rollgate/rollgate/test/rig"
	"github.com/rollgate/rollgate/test/testlog"
)

// cluster is a kwok cluster with rollgate's CRDs and the controller
// running in-process, for the stories that run the controller against
// the package's Gitea.
type cluster struct {
	t *testing.T
	c client.Client
	// kubeconfig is the cluster's, for the processes a story runs.
	kubeconfig string
	// pushURL is the controller's push-webhook endpoint, to which a
	// Repository's name is appended as <namespace>/<name>.
	pushURL string
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	kc := kwok.Start(t, kwok.Options{Nodes: 3, Scheme: rig.NewScheme(t)})
	kube.ApplyFiles(t, kc.Client, filepath.Join(repo.Root(), "charts", "rollgate", "crds"), "gitea")
	kube.EnsureNamespace(t, kc.Client, "rollgate-system")
	log := &testlog.Buffer{}
	opts := inproc.Options("rollgate-system", "rollgate")
	pushPort := rig.FreePort(t)
	opts.GitWebhookAddr = fmt.Sprintf("127.0.0.1:%d", pushPort)
	stop := inproc.Start(t, kc.RESTConfig, kc.Client, reconciler.ManagerOptions{}, opts, log)
	t.Cleanup(func() {
		stop()
		log.Report(t, "controller of cluster "+kc.Name)
	})
	return &cluster{t: t, c: kc.Client, kubeconfig: kc.Kubeconfig, pushURL: fmt.Sprintf("http://127.0.0.1:%d/hook/", pushPort)}
}

func (k *cluster) apply(docs string) {
	k.t.Helper()
	kube.ApplyYAML(k.t, k.c, docs, "kustomize-controller")
}

func (k *cluster) eventually(timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	k.t.Helper()
	kube.Eventually(k.t, timeout, what, cond)
}

func (k *cluster) holds(d time.Duration, what string, check func(ctx context.Context) error) {
	k.t.Helper()
	kube.Holds(k.t, d, what, check)
}

func (k *cluster) rollout(ns, name string) *v1alpha1.Rollout {
	k.t.Helper()
	ro := &v1alpha1.Rollout{}
	if err := k.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, ro); err != nil {
		k.t.Fatal(err)
	}
	return ro
}

// pods counts the pods labelled app=app by image: [ready, total].
func (k *cluster) pods(ns, app string) map[string][2]int {
	k.t.Helper()
	out, err := kube.PodsByImage(context.Background(), k.c, ns, app)
	if err != nil {
		k.t.Fatal(err)
	}
	return out
}

func (k *cluster) createSecret(ns, name string, data map[string][]byte) {
	k.t.Helper()
	if err := k.c.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}); err != nil {
		k.t.Fatal(err)
	}
}

// TestApprovalPullRequestOnARealForge: the controller meets a real forge.
// Gitea serves the repository over HTTPS with a private CA and protects
// main with one required approving review. At the gate, rollgate pushes
// the approval branch, opens its pull request and sets a pending commit
// status on it; the pull request cannot be merged before a review. A
// second user approves and merges through the API, as a person does in
// the UI. The Repository fetches every 10 minutes: only Gitea's push
// webhook can make rollgate see the merge within the story. Signed with
// the wrong secret, its delivery is refused and the gate holds; once a
// webhook with the Repository's secret replaces it, Gitea's delivery wakes
// rollgate,
// which reads the merge from Git, releases the step, and the pull
// request's status turns to success.
func TestApprovalPullRequestOnARealForge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
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
	for path, content := range map[string]string{"deploy/rollout.yaml": rollout, "deploy/app.yaml": rig.Deployment("demo", "web", "web:2", 3)} {
		if err := s.CreateFile(ctx, repo, "main", path, []byte(content)); err != nil {
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
	kube.EnsureNamespace(t, w.c, "demo")
	w.createSecret("demo", "shop-git", map[string][]byte{"username": []byte(s.Admin.Name), "token": []byte(token), "ca.crt": s.CA})
	// The push webhook, set up in Gitea with a secret that is not the
	// Repository's.
	pushSecret := "push-secret-of-the-shop"
	w.createSecret("demo", "shop-push", map[string][]byte{"token": []byte(pushSecret)})
	hook, err := s.CreateHook(ctx, repo, w.pushURL+"demo/shop", "a-wrong-secret")
	if err != nil {
		t.Fatal(err)
	}
	w.apply(fmt.Sprintf(`
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
	w.apply(rig.Deployment("demo", "web", "web:1", 3))
	w.apply(rollout)
	w.eventually(90*time.Second, "web:1 running and the Rollout healthy", func(ctx context.Context) (bool, error) {
		return w.pods("demo", "web")["web:1"] == [2]int{3, 3} && conditions.IsReady(w.rollout("demo", "web")), nil
	})

	// When the GitOps tool applies web:2 from main,
	w.apply(rig.Deployment("demo", "web", "web:2", 3))
	// then the gate's pull request is open on Gitea, from the approval
	// branch into main, with a pending status on its head.
	var branch, prURL string
	w.eventually(90*time.Second, "the gate's pull request opened", func(ctx context.Context) (bool, error) {
		a := w.rollout("demo", "web").Status.AwaitingApproval
		if a == nil || a.PullRequestURL == "" {
			return false, nil
		}
		branch, prURL = a.Branch, a.PullRequestURL
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
	w.eventually(30*time.Second, "the status file the pull request links served by Gitea", func(ctx context.Context) (bool, error) {
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
		w.eventually(60*time.Second, "the pull request's status "+string(want), func(ctx context.Context) (bool, error) {
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
	w.holds(2*time.Second, "the gate holds until the merge", func(ctx context.Context) error {
		if got := w.pods("demo", "web")["web:2"]; got[0] > 1 {
			return fmt.Errorf("web:2 has %d pods before the merge, want 1 (the gate's step)", got[0])
		}
		return nil
	})

	// When the reviewer approves and merges, and Gitea's push webhook is
	// signed with the wrong secret, the delivery is refused and the gate
	// holds (the Repository fetches every 10 minutes);
	if err := s.Review(ctx, s.Reviewer, repo, pr.Number, "APPROVED", "Canary looks right."); err != nil {
		t.Fatal(err)
	}
	if err := s.Merge(ctx, s.Reviewer, repo, pr.Number); err != nil {
		t.Fatalf("merge after approval: %v", err)
	}
	w.holds(10*time.Second, "the gate holds while the push webhook's signature is wrong", func(ctx context.Context) error {
		if got := w.pods("demo", "web")["web:2"]; got[0] > 1 {
			return fmt.Errorf("web:2 has %d pods, want 1: a push signed with the wrong secret woke rollgate", got[0])
		}
		return nil
	})
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
	w.eventually(90*time.Second, "web:2 released", func(ctx context.Context) (bool, error) {
		return conditions.IsReady(w.rollout("demo", "web")) && w.pods("demo", "web")["web:2"] == [2]int{3, 3}, nil
	})
	t.Logf("Gitea's signed push delivery → web:2 released in %v", time.Since(delivered).Round(100*time.Millisecond))
	// and the pull request's status says so.
	statusIs(pr.Head.SHA, forge.StatusSuccess)

	// When web:3 is merged into main through a reviewed pull request and
	// applied, and its gate's pull request opens,
	if err := s.UpdateFile(ctx, repo, "main", "release-web-3", "deploy/app.yaml", []byte(rig.Deployment("demo", "web", "web:3", 3))); err != nil {
		t.Fatal(err)
	}
	release, err := s.OpenPullRequest(ctx, s.Admin, repo, "release-web-3", "main", "Release web:3")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WaitMergeable(ctx, repo, release.Number, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Review(ctx, s.Reviewer, repo, release.Number, "APPROVED", "Ship it."); err != nil {
		t.Fatal(err)
	}
	if err := s.Merge(ctx, s.Reviewer, repo, release.Number); err != nil {
		t.Fatal(err)
	}
	w.apply(rig.Deployment("demo", "web", "web:3", 3))
	var canary string
	w.eventually(90*time.Second, "the gate of web:3 opened its pull request", func(ctx context.Context) (bool, error) {
		ro := w.rollout("demo", "web")
		a := ro.Status.AwaitingApproval
		if a == nil || a.PullRequestURL == "" || a.Branch == branch {
			return false, nil
		}
		branch, prURL, canary = a.Branch, a.PullRequestURL, ro.Status.CanaryRevision
		return true, nil
	})
	gate3 := onlyOpenFrom(t, s, repo, branch)
	statusIs(gate3.Head.SHA, forge.StatusPending)
	// and web:3 is aborted at its gate,
	w.apply(rollout + fmt.Sprintf("  abort: {revision: %s, reason: bad latency}\n", canary))
	// then the gate's pull request fails, and the revert is proposed as a
	// pull request that sets web:2 back.
	statusIs(gate3.Head.SHA, forge.StatusFailure)
	var revert string
	w.eventually(90*time.Second, "the revert's pull request opened", func(ctx context.Context) (bool, error) {
		g := w.rollout("demo", "web").Status.Git
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
