package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"

	"github.com/rollgate/rollgate/gitsync/forge"
	"github.com/rollgate/rollgate/test/gitea"
	"github.com/rollgate/rollgate/test/rig"
)

// startGitea runs a Gitea of the story's own on loopback (HTTPS with a
// self-signed CA), stopped when the story ends.
func startGitea(t *testing.T) *gitea.Server {
	t.Helper()
	dir, err := os.MkdirTemp("", "rollgate-e2e-gitea-")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := gitea.Start(ctx, gitea.Options{Dir: dir})
	if err != nil {
		_ = os.RemoveAll(dir)
		t.Fatalf("start Gitea: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stop Gitea: %v", err)
		}
		if t.Failed() {
			t.Logf("Gitea's log %s, last lines:\n%s", s.Log(), tailLines(s.Log(), 30))
			return
		}
		_ = os.RemoveAll(dir)
	})
	return s
}

func tailLines(file string, n int) string {
	b, _ := os.ReadFile(file)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestApprovalPullRequestOnARealForge: the controller meets a real forge.
// Gitea serves the repository over HTTPS with a private CA and protects
// main with one required approving review. At the gate, rollgate pushes
// the approval branch, opens its pull request and sets a pending commit
// status on it; the pull request cannot be merged before a review. A
// second user approves and merges through the API, as a person does in
// the UI; rollgate reads the merge from Git, releases the step, and the
// pull request's status turns to success.
func TestApprovalPullRequestOnARealForge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := startGitea(t)
	repo, err := s.CreateRepo(ctx, "shop")
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
	token, err := s.CreateToken(ctx, s.Admin, "rollgate", "write:repository", "write:issue")
	if err != nil {
		t.Fatal(err)
	}

	w := newWorldWith(t, nil)
	w.ensureNamespace("demo")
	w.createSecret("demo", "shop-git", map[string][]byte{"username": []byte(s.Admin.Name), "token": []byte(token), "ca.crt": s.CA})
	w.applyYAML(fmt.Sprintf(`
apiVersion: rollgate.dev/v1alpha1
kind: Repository
metadata: {name: shop, namespace: demo}
spec:
  url: %q
  branch: main
  interval: 1s
  secretRef: {name: shop-git}
  status: {window: 1s}
  forge: {provider: gitea, url: %q, project: %q, secretRef: {name: shop-git}}
`, repo.CloneURL, s.URL, repo.Project()))
	w.applyYAML(rig.Deployment("demo", "web", "web:1", 3))
	w.applyYAML(rollout)
	w.eventually(90*time.Second, "web:1 running and the Rollout healthy", func(ctx context.Context) (bool, error) {
		return w.pods("demo", "web")["web:1"] == [2]int{3, 3} && conditions.IsReady(w.rollout("demo", "web")), nil
	})

	// When the GitOps tool applies web:2 from main,
	w.applyYAML(rig.Deployment("demo", "web", "web:2", 3))
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
	if !strings.Contains(pr.Body, "waiting for approval of step 1 of 2") {
		t.Errorf("pull request body does not give the step:\n%s", pr.Body)
	}
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

	// When the reviewer approves and merges,
	if err := s.Review(ctx, s.Reviewer, repo, pr.Number, "APPROVED", "Canary looks right."); err != nil {
		t.Fatal(err)
	}
	merged := time.Now()
	if err := s.Merge(ctx, s.Reviewer, repo, pr.Number); err != nil {
		t.Fatalf("merge after approval: %v", err)
	}
	// then rollgate releases the step from the merge in Git,
	w.eventually(90*time.Second, "web:2 released", func(ctx context.Context) (bool, error) {
		return conditions.IsReady(w.rollout("demo", "web")) && w.pods("demo", "web")["web:2"] == [2]int{3, 3}, nil
	})
	t.Logf("merge on Gitea → web:2 released in %v", time.Since(merged).Round(100*time.Millisecond))
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
	w.applyYAML(rig.Deployment("demo", "web", "web:3", 3))
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
	w.applyYAML(rollout + fmt.Sprintf("  abort: {revision: %s, reason: bad latency}\n", canary))
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
