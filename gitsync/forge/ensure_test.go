package forge

import (
	"context"
	"net/http/httptest"
	"testing"
)

// ensureForge is a forge as the Ensure tests see it: its fake, the
// project, and the calls the client makes for approvePR.
type ensureForge struct {
	provider, project string
	fake              func(*testing.T) (*fakeForge, *httptest.Server)
	// url is the address of pull request 1.
	url string
	// list asks for the open pull request of approvePR's head and base;
	// create opens it; label labels it, on a forge whose create cannot.
	list, create string
	label        []string
	// again is the body of the second Ensure: the same text (on GitHub
	// with a trailing newline, which is no change either).
	again string
	// noun is what the forge calls a pull request, in plural.
	noun string
}

var ensureForges = []ensureForge{
	{provider: GitHub, project: "acme/app", fake: newFakeGitHub, url: "https://github.example/acme/app/pull/1",
		list:   ghListApprove2,
		create: `POST /repos/acme/app/pulls {"base":"main","body":"Body","head":"rollgate/approve/demo/echo/r2-step-2","title":"Approve step 2"}`,
		label:  []string{`POST /repos/acme/app/issues/1/labels {"labels":["rollgate"]}`},
		again:  "Body\n", noun: "pull requests"},
	{provider: GitLab, project: "group/sub/app", fake: newFakeGitLab, url: "https://gitlab.example/group/sub/app/-/merge_requests/1",
		list:   glListApprove2,
		create: "POST " + glMRs + ` {"description":"Body","labels":"rollgate","source_branch":"rollgate/approve/demo/echo/r2-step-2","target_branch":"main","title":"Approve step 2"}`,
		again:  "Body", noun: "merge requests"},
}

// TestEnsureCreatesOnce: the first Ensure lists, creates (and labels); the
// second finds the pull request and changes nothing.
func TestEnsureCreatesOnce(t *testing.T) {
	for _, fg := range ensureForges {
		t.Run(fg.provider, func(t *testing.T) {
			f, srv := fg.fake(t)
			c := newClient(t, fg.provider, srv.URL, fg.project, testToken)
			ctx := context.Background()

			url, err := c.EnsurePullRequest(ctx, approvePR("Approve step 2", "Body"))
			if err != nil || url != fg.url {
				t.Fatalf("first EnsurePullRequest = %q, %v", url, err)
			}
			sameCalls(t, f.takeCalls(), append([]string{fg.list, fg.create}, fg.label...))

			again, err := c.EnsurePullRequest(ctx, approvePR("Approve step 2", fg.again))
			if err != nil || again != url {
				t.Fatalf("second EnsurePullRequest = %q, %v; want %q", again, err, url)
			}
			sameCalls(t, f.takeCalls(), []string{fg.list})
			if n := f.count(); n != 1 {
				t.Errorf("the forge holds %d %s, want 1", n, fg.noun)
			}
		})
	}
}

// TestEnsureReusesAPullRequestOpenedMeanwhile: a pull request the list
// did not show (opened meanwhile) makes the create fail; the client lists
// again and takes it rather than opening another.
func TestEnsureReusesAPullRequestOpenedMeanwhile(t *testing.T) {
	for _, fg := range ensureForges {
		t.Run(fg.provider, func(t *testing.T) {
			f, srv := fg.fake(t)
			f.add(fakePR{Head: "rollgate/approve/demo/echo/r2-step-2", Base: "main", Title: "Approve step 2", Body: "Body", Labels: []string{"rollgate"}})
			f.hideOpen = 1
			c := newClient(t, fg.provider, srv.URL, fg.project, testToken)

			url, err := c.EnsurePullRequest(context.Background(), approvePR("Approve step 2", "Body"))
			if err != nil || url != fg.url {
				t.Fatalf("EnsurePullRequest = %q, %v", url, err)
			}
			sameCalls(t, f.takeCalls(), []string{fg.list, fg.create, fg.list})
			if n := f.count(); n != 1 {
				t.Errorf("the forge holds %d %s, want 1", n, fg.noun)
			}
		})
	}
}
