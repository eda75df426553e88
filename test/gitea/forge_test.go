package gitea_test

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/gitsync/forge"
	"github.com/rollgate/rollgate/test/gitea"
)

// The Rollouts the tests' repositories declare, in one manifest.
const (
	manifestPath = "deploy/rollout.yaml"
	ns           = "demo"
	steps        = 3
	manifest     = `apiVersion: rollgate.dev/v1alpha1
kind: Rollout
metadata:
  name: echoserver
  namespace: demo
spec:
  workloadRef:
    apiVersion: apps/v1
    kind: Deployment
    name: echoserver
  steps:
  - replicas: 1
  - pause: {}
  - replicas: 50%
  - pause: {}
  - replicas: 100%
  - pause: {}
---
apiVersion: rollgate.dev/v1alpha1
kind: Rollout
metadata:
  name: other
  namespace: demo
spec:
  workloadRef:
    apiVersion: apps/v1
    kind: Deployment
    name: other
  steps:
  - replicas: 1
  - pause: {}
`
)

// fixture is one test's repository on the shared Gitea, reached the way
// rollgate reaches it: Git over HTTPS with a token and the CA in ca.crt
// (gitsync) and the forge client, both with a token scoped as
// gitsync/forge/README.md says.
type fixture struct {
	repo  gitea.Repo
	git   *gitsync.Repository
	forge forge.Client
	calls *callLog
	creds *gitsync.Credentials
}

// newFixture creates repository name with the manifest on main and the
// label rollgate.
func newFixture(t *testing.T, name string) *fixture {
	t.Helper()
	ctx := context.Background()
	s := forgeServer
	r, err := s.CreateRepo(ctx, name)
	if err != nil {
		t.Fatalf("create repository: %v", err)
	}
	if err := s.CreateLabel(ctx, r, "rollgate"); err != nil {
		t.Fatalf("create label: %v", err)
	}
	if err := s.CreateFile(ctx, r, "main", manifestPath, []byte(manifest)); err != nil {
		t.Fatalf("commit the manifest: %v", err)
	}
	token, err := s.CreateToken(ctx, s.Admin, "rollgate-"+name, "write:repository", "write:issue")
	if err != nil {
		t.Fatalf("create rollgate's token: %v", err)
	}
	creds, err := gitsync.CredentialsFromSecret(map[string][]byte{
		"username": []byte(s.Admin.Name), "token": []byte(token), "ca.crt": s.CA,
	})
	if err != nil {
		t.Fatal(err)
	}
	g, err := gitsync.Open(gitsync.Options{URL: r.CloneURL, Credentials: creds})
	if err != nil {
		t.Fatalf("open %s: %v", r.CloneURL, err)
	}
	calls := &callLog{next: s.HTTPClient().Transport}
	fc, err := forge.New(forge.Gitea, s.URL, r.Project(), token, &http.Client{Timeout: 30 * time.Second, Transport: calls})
	if err != nil {
		t.Fatalf("forge.New: %v", err)
	}
	return &fixture{repo: r, git: g, forge: fc, calls: calls, creds: creds}
}

// propose pushes the approval branch of step of revision for Rollout name,
// as rollgate does at a gate, and returns it.
func (f *fixture) propose(t *testing.T, name, revision string, step int) gitsync.Proposal {
	t.Helper()
	a := gitsync.Approval{Revision: revision, Step: step}
	p, err := gitsync.ProposeApproval(context.Background(), f.git, "main", manifestPath, ns, name, a, "rollgate test")
	if err != nil {
		t.Fatalf("propose approval of %s step %d: %v", revision, step, err)
	}
	if !p.Pushed || p.Commit == "" {
		t.Fatalf("approval branch %s not pushed: %+v", p.Branch, p)
	}
	return p
}

// approvalRequest is the pull request rollgate asks for at the gate of
// step (reconciler/rollout/forge.go builds it the same way).
func approvalRequest(p gitsync.Proposal, name, revision string, step int) forge.PullRequest {
	facts := map[string]string{
		forge.FactReplicas:       "4",
		forge.FactStableReplicas: "3 (3 ready)",
		forge.FactCanaryReplicas: "1 (1 ready)",
		forge.FactTraffic:        "25% to the canary",
	}
	return forge.PullRequest{
		Head: p.Branch, Base: "main",
		Title:  forge.ApprovalTitle(ns, name, revision, 1, step, steps),
		Body:   forge.ApprovalBody(ns, name, revision, 1, step, steps, facts),
		Labels: []string{"rollgate"},
	}
}

// TestApprovalPullRequestOnGitea: rollgate pushes an approval branch and
// opens its pull request (asking twice opens one); main requires an
// approving review, so the pull request cannot be merged before the
// reviewer approves; the reviewer approves and merges through the API;
// rollgate then sees the merge, in Git and on the forge, also after the
// approval branch is deleted.
func TestApprovalPullRequestOnGitea(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := forgeServer
	f := newFixture(t, "approve")
	if err := s.RequireApprovals(ctx, f.repo, "main", 1); err != nil {
		t.Fatalf("protect main: %v", err)
	}

	// Given an approval branch for step 2 of revision 7b1e2a9f,
	p := f.propose(t, "echoserver", "7b1e2a9f", 2)
	want := approvalRequest(p, "echoserver", "7b1e2a9f", 2)

	// when rollgate opens its pull request,
	url, err := f.forge.EnsurePullRequest(ctx, want)
	if err != nil {
		t.Fatalf("EnsurePullRequest: %v", err)
	}
	// then Gitea holds one open pull request with rollgate's title, body
	// and label, from the approval branch into main, opened by rollgate's
	// token.
	pr := onlyOpen(t, f.repo)
	switch {
	case pr.HTMLURL != url:
		t.Errorf("EnsurePullRequest returned %q; the pull request is %q", url, pr.HTMLURL)
	case pr.Head.Ref != p.Branch || pr.Base.Ref != "main" || pr.Head.SHA != p.Commit:
		t.Errorf("pull request goes from %s (%s) into %s; want %s (%s) into main", pr.Head.Ref, pr.Head.SHA, pr.Base.Ref, p.Branch, p.Commit)
	case pr.Title != want.Title:
		t.Errorf("title %q, want %q", pr.Title, want.Title)
	case strings.TrimSpace(pr.Body) != strings.TrimSpace(want.Body):
		t.Errorf("body:\n%s\nwant:\n%s", pr.Body, want.Body)
	case len(pr.Labels) != 1 || pr.Labels[0].Name != "rollgate":
		t.Errorf("labels %+v, want rollgate", pr.Labels)
	case pr.User.Login != s.Admin.Name:
		t.Errorf("opened by %s, want %s (rollgate's token)", pr.User.Login, s.Admin.Name)
	}

	// rollgate reports the gate as a pending commit status on the pull
	// request's head, shown on the pull request beside the checks.
	status := func(state forge.StatusState, desc string) {
		t.Helper()
		sha, err := f.forge.ReportStatus(ctx, p.Branch, forge.CommitStatus{State: state, Context: forge.StatusContext(ns, "echoserver"),
			Description: desc, TargetURL: "https://rollgate.example/status"})
		if err != nil || sha != p.Commit {
			t.Fatalf("ReportStatus(%s) = %q, %v; want the approval branch's commit %s", state, sha, err, p.Commit)
		}
		combined, list, err := s.CombinedStatus(ctx, f.repo, p.Commit)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 || combined != string(state) || list[0].State != string(state) || list[0].Context != forge.StatusContext(ns, "echoserver") ||
			list[0].Description != desc || list[0].TargetURL != "https://rollgate.example/status" {
			t.Fatalf("Gitea shows %s with statuses %+v; want one %s status %q of context %s", combined, list, state, desc, forge.StatusContext(ns, "echoserver"))
		}
	}
	status(forge.StatusPending, "Step 2 of 3 waits for this pull request to be merged")

	// When rollgate asks again (the next reconcile), it only reads: the
	// pull request is found, its title, body and labels are current.
	f.calls.reset()
	again, err := f.forge.EnsurePullRequest(ctx, want)
	if err != nil || again != url {
		t.Fatalf("second EnsurePullRequest = %q, %v; want %q", again, err, url)
	}
	if writes := f.calls.writes(); len(writes) > 0 {
		t.Errorf("second EnsurePullRequest wrote to Gitea: %v", writes)
	}
	onlyOpen(t, f.repo)

	// The gate holds on the forge too: main requires an approving review.
	if _, err := s.WaitMergeable(ctx, f.repo, pr.Number, time.Minute); err != nil {
		t.Fatal(err)
	}
	err = s.Merge(ctx, s.Reviewer, f.repo, pr.Number)
	var apiErr *gitea.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusMethodNotAllowed || !strings.Contains(apiErr.Body, "approvals") {
		t.Fatalf("merge before any review: %v; want 405 for missing approvals", err)
	}
	if merged, _, err := f.forge.MergedPullRequest(ctx, p.Branch); err != nil || merged {
		t.Fatalf("MergedPullRequest before the merge = %v, %v", merged, err)
	}

	// When the reviewer approves and merges, as a person does in the UI,
	if err := s.Review(ctx, s.Reviewer, f.repo, pr.Number, "APPROVED", "Numbers look right."); err != nil {
		t.Fatalf("approve: %v", err)
	}
	if err := s.Merge(ctx, s.Reviewer, f.repo, pr.Number); err != nil {
		t.Fatalf("merge after approval: %v", err)
	}

	// then the forge client reports the pull request merged,
	merged, mergedURL, err := f.forge.MergedPullRequest(ctx, p.Branch)
	if err != nil || !merged || mergedURL != url {
		t.Fatalf("MergedPullRequest = %v, %q, %v; want merged %q", merged, mergedURL, err, url)
	}
	// its merge commit is main's head, and main declares the approval,
	// which is how rollgate opens the gate.
	pr, err = s.PullRequest(ctx, f.repo, pr.Number)
	if err != nil {
		t.Fatal(err)
	}
	head, err := s.BranchHead(ctx, f.repo, "main")
	if err != nil {
		t.Fatal(err)
	}
	if !pr.Merged || pr.MergeCommitSHA == nil || *pr.MergeCommitSHA != head {
		t.Errorf("pull request merged %v with merge commit %v; main is at %s", pr.Merged, pr.MergeCommitSHA, head)
	}
	approvals, err := gitsync.ApprovalsOnBranch(ctx, f.git, "main", manifestPath, ns, "echoserver")
	if err != nil || !gitsync.HasApproval(approvals, gitsync.Approval{Revision: "7b1e2a9f", Step: 2}) {
		t.Errorf("main declares approvals %+v (%v); want revision 7b1e2a9f step 2", approvals, err)
	}

	// When rollgate deletes the approval branch it no longer needs,
	if err := f.git.DeleteBranches(ctx, p.Branch); err != nil {
		t.Fatalf("delete %s: %v", p.Branch, err)
	}
	// Gitea lists the pull request under its own ref (refs/pull/<n>/head)
	// and keeps the branch name only as its label,
	closed, err := s.PullRequests(ctx, f.repo, "closed")
	if err == nil && len(closed) == 1 {
		t.Logf("Gitea lists the merged pull request with head.ref %q once its branch is deleted", closed[0].Head.Ref)
	}
	// and the merge is still found by its branch.
	merged, mergedURL, err = f.forge.MergedPullRequest(ctx, p.Branch)
	if err != nil || !merged || mergedURL != url {
		t.Errorf("MergedPullRequest after the branch was deleted = %v, %q, %v; want merged %q", merged, mergedURL, err, url)
	}
	// The release's outcome replaces the gate's status on the merged pull
	// request, also once its branch is gone.
	status(forge.StatusSuccess, "Step 2 of 3 released")
}

// TestStaleApprovalPullRequestsAreClosedOnGitea: when a newer step
// supersedes a gate, rollgate closes the older approval pull requests of
// that Rollout with a comment, and only those.
func TestStaleApprovalPullRequestsAreClosedOnGitea(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := forgeServer
	f := newFixture(t, "stale")

	// Given open pull requests for steps 1 and 2 of echoserver and step 1
	// of another Rollout,
	urls := map[string]string{}
	var branches []string
	for _, x := range []struct {
		name string
		step int
	}{{"echoserver", 1}, {"echoserver", 2}, {"other", 1}} {
		p := f.propose(t, x.name, "5d41402a", x.step)
		url, err := f.forge.EnsurePullRequest(ctx, approvalRequest(p, x.name, "5d41402a", x.step))
		if err != nil {
			t.Fatalf("EnsurePullRequest %s: %v", p.Branch, err)
		}
		urls[p.Branch] = url
		branches = append(branches, p.Branch)
	}
	step1, step2, other := branches[0], branches[1], branches[2]

	// when rollgate waits at step 2 of echoserver and closes the rest,
	keep := func(head string) bool { return head == step2 }
	closed, err := f.forge.ClosePullRequests(ctx, gitsync.ApprovalBranchesOf(ns, "echoserver"), keep)
	if err != nil || !slices.Equal(closed, []string{step1}) {
		t.Fatalf("ClosePullRequests = %v, %v; want [%s]", closed, err, step1)
	}

	// then step 1's pull request is closed unmerged with rollgate's
	// comment, and the other two stay open.
	open, err := s.PullRequests(ctx, f.repo, "open")
	if err != nil {
		t.Fatal(err)
	}
	var openHeads []string
	for _, pr := range open {
		openHeads = append(openHeads, pr.Head.Ref)
	}
	slices.Sort(openHeads)
	if wantOpen := []string{step2, other}; !slices.Equal(openHeads, wantOpen) {
		t.Errorf("open pull requests %v, want %v", openHeads, wantOpen)
	}
	n := number(t, urls[step1])
	pr, err := s.PullRequest(ctx, f.repo, n)
	if err != nil || pr.State != "closed" || pr.Merged {
		t.Errorf("step 1's pull request: state %q, merged %v (%v); want closed unmerged", pr.State, pr.Merged, err)
	}
	comments, err := s.Comments(ctx, f.repo, n)
	if err != nil || len(comments) != 1 || !strings.Contains(comments[0], "`"+step1+"` is stale") {
		t.Errorf("comments on step 1's pull request: %q (%v); want rollgate's one", comments, err)
	}

	// Closing again finds nothing to close.
	if closed, err := f.forge.ClosePullRequests(ctx, gitsync.ApprovalBranchesOf(ns, "echoserver"), keep); err != nil || len(closed) != 0 {
		t.Errorf("second ClosePullRequests = %v, %v; want none", closed, err)
	}
	// A closed pull request is not reopened: asking for step 1 again
	// opens a new one.
	p := gitsync.Proposal{Branch: step1} // the branch is still there
	reopened, err := f.forge.EnsurePullRequest(ctx, approvalRequest(p, "echoserver", "5d41402a", 1))
	if err != nil || reopened == urls[step1] {
		t.Errorf("EnsurePullRequest for the closed step 1 = %q, %v; want a new pull request", reopened, err)
	}
}

// TestTokenWithoutIssueScopeOnGitea: with write:repository alone, as
// gitsync/forge/README.md warns, the pull request is opened but labelling
// it fails, and the error says so with the pull request's URL.
func TestTokenWithoutIssueScopeOnGitea(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := forgeServer
	f := newFixture(t, "scopes")
	token, err := s.CreateToken(ctx, s.Admin, "repository-only", "write:repository")
	if err != nil {
		t.Fatal(err)
	}
	fc, err := forge.New(forge.Gitea, s.URL, f.repo.Project(), token, s.HTTPClient())
	if err != nil {
		t.Fatal(err)
	}
	p := f.propose(t, "echoserver", "aa11bb22", 1)
	url, err := fc.EnsurePullRequest(ctx, approvalRequest(p, "echoserver", "aa11bb22", 1))
	if !errors.Is(err, forge.ErrAuth) || url == "" || !strings.Contains(err.Error(), "/labels: 403") {
		t.Fatalf("EnsurePullRequest without write:issue = %q, %v; want the URL and a 403 on labels", url, err)
	}
	if pr := onlyOpen(t, f.repo); pr.HTMLURL != url || len(pr.Labels) != 0 {
		t.Errorf("pull request %s with labels %+v; want %s unlabelled", pr.HTMLURL, pr.Labels, url)
	}
}

// onlyOpen returns the one open pull request of r, failing the test when
// there is not exactly one.
func onlyOpen(t *testing.T, r gitea.Repo) gitea.PullRequest {
	t.Helper()
	open, err := forgeServer.PullRequests(context.Background(), r, "open")
	if err != nil {
		t.Fatal(err)
	}
	if len(open) != 1 {
		t.Fatalf("%d open pull requests in %s, want 1: %+v", len(open), r.Project(), open)
	}
	return open[0]
}

var pullNumber = regexp.MustCompile(`/pulls/([0-9]+)$`)

// number returns the pull request number at the end of its URL.
func number(t *testing.T, url string) int64 {
	t.Helper()
	m := pullNumber.FindStringSubmatch(url)
	if m == nil {
		t.Fatalf("no pull request number in %q", url)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// callLog records the requests the forge client sends.
type callLog struct {
	next http.RoundTripper
	mu   sync.Mutex
	log  []string
}

func (c *callLog) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.log = append(c.log, r.Method+" "+r.URL.Path)
	c.mu.Unlock()
	return c.next.RoundTrip(r)
}

func (c *callLog) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.log = nil
}

// writes returns the recorded requests other than GET.
func (c *callLog) writes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, l := range c.log {
		if !strings.HasPrefix(l, http.MethodGet+" ") {
			out = append(out, l)
		}
	}
	return out
}

// TestUnpushedHeadOnGitea: asking for the pull request of a branch that
// is not pushed (yet) opens nothing and fails with ErrRejected, as the
// Client contract says, not ErrNotFound, which would mean the repository
// is missing.
func TestUnpushedHeadOnGitea(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, "unpushed")
	p := gitsync.Proposal{Branch: gitsync.ApprovalBranch(ns, "echoserver", gitsync.Approval{Revision: "cc33dd44", Step: 1})}
	url, err := f.forge.EnsurePullRequest(ctx, approvalRequest(p, "echoserver", "cc33dd44", 1))
	if !errors.Is(err, forge.ErrRejected) || url != "" {
		t.Errorf("EnsurePullRequest for an unpushed branch = %q, %v; want ErrRejected", url, err)
	}
	if open, err := forgeServer.PullRequests(ctx, f.repo, "open"); err != nil || len(open) != 0 {
		t.Errorf("open pull requests %+v (%v); want none", open, err)
	}
}
