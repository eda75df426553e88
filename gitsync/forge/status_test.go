package forge

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestReportStatus: on each forge, a status goes to the head commit of the
// pull request from the branch (the merged one when there are several),
// in the forge's own spelling (GitLab: "failed", "name"); a branch with no
// pull request is ErrNotFound; a description is cut to one line of 140
// characters.
func TestReportStatus(t *testing.T) {
	for _, tc := range []struct {
		provider, project string
		start             func(t *testing.T) (*fakeForge, *httptest.Server)
		contextKey        string
		failure           string
	}{
		{GitHub, "acme/app", newFakeGitHub, "context", "failure"},
		{Gitea, "acme/app", func(t *testing.T) (*fakeForge, *httptest.Server) { return newFakeGitea(t, false) }, "context", "failure"},
		{GitLab, "group/sub/app", newFakeGitLab, "name", "failed"},
	} {
		t.Run(tc.provider, func(t *testing.T) {
			f, srv := tc.start(t)
			head := "rollgate/approve/demo/web/7b1e2a9f-step-2"
			f.add(fakePR{Head: head, Base: "main", Title: "old", State: "closed", HeadSHA: "0ld0ld"})
			f.add(fakePR{Head: head, Base: "main", Title: "gate", State: "merged", HeadSHA: "abc123", MergeSHA: "def456"})
			c := newClient(t, tc.provider, srv.URL, tc.project, testToken)
			ctx := context.Background()
			long := strings.Repeat("step 2 of 3 ", 20) + "\nsecond line"
			for _, st := range []StatusState{StatusPending, StatusFailure} {
				sha, err := c.ReportStatus(ctx, head, CommitStatus{State: st, Context: StatusContext("demo", "web"), Description: long, TargetURL: "https://rollgate.example/demo/web"})
				if err != nil || sha != "abc123" {
					t.Fatalf("ReportStatus(%s) = %q, %v; want the merged pull request's head abc123", st, sha, err)
				}
			}
			got := f.statuses["abc123"]
			if len(got) != 2 || len(f.statuses) != 1 {
				t.Fatalf("statuses posted = %v, want two on abc123", f.statuses)
			}
			last := got[1]
			desc, _ := last["description"].(string)
			switch {
			case got[0]["state"] != "pending" || last["state"] != tc.failure:
				t.Errorf("states %v then %v, want pending then %s", got[0]["state"], last["state"], tc.failure)
			case last[tc.contextKey] != "rollgate/demo/web":
				t.Errorf("%s = %v, want rollgate/demo/web", tc.contextKey, last[tc.contextKey])
			case last["target_url"] != "https://rollgate.example/demo/web":
				t.Errorf("target_url = %v", last["target_url"])
			case len([]rune(desc)) != 140 || strings.Contains(desc, "\n") || !strings.HasSuffix(desc, "…"):
				t.Errorf("description %q (%d characters), want one line of 140 ending in …", desc, len([]rune(desc)))
			}
			if _, err := c.ReportStatus(ctx, "rollgate/approve/demo/web/none-step-1", CommitStatus{State: StatusSuccess, Context: "rollgate/demo/web"}); !errors.Is(err, ErrNotFound) {
				t.Errorf("ReportStatus without a pull request: %v, want ErrNotFound", err)
			}
			if _, err := c.ReportStatus(ctx, head, CommitStatus{State: "done", Context: "rollgate/demo/web"}); !errors.Is(err, ErrInvalidRequest) {
				t.Errorf("ReportStatus with state done: %v, want ErrInvalidRequest", err)
			}
		})
	}
}
