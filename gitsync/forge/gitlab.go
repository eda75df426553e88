package forge

import (
	"cmp"
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// gitlab is the backend for the GitLab REST API v4, where pull requests
// are merge requests.
type gitlab struct {
	api *api
	mrs string // escaped "/projects/{url-encoded path}/merge_requests"
}

func newGitLab(a *api, project string) *gitlab {
	// PathEscape also escapes "/", as GitLab wants for a project path.
	return &gitlab{api: a, mrs: "/projects/" + url.PathEscape(project) + "/merge_requests"}
}

// glMR is the part of a GitLab merge request rollgate reads.
type glMR struct {
	IID             int64    `json:"iid"`
	WebURL          string   `json:"web_url"`
	Title           string   `json:"title"`
	Description     string   `json:"description"`
	State           string   `json:"state"`
	SourceBranch    string   `json:"source_branch"`
	TargetBranch    string   `json:"target_branch"`
	SourceProjectID int64    `json:"source_project_id"`
	TargetProjectID int64    `json:"target_project_id"`
	Labels          []string `json:"labels"`
	SHA             string   `json:"sha"`
	MergeCommitSHA  string   `json:"merge_commit_sha"`
	SquashCommitSHA string   `json:"squash_commit_sha"`
	Author          *struct {
		Username string `json:"username"`
	} `json:"author"`
}

func (g *gitlab) pull(m glMR) pull {
	out := pull{
		id: strconv.FormatInt(m.IID, 10), url: m.WebURL, title: m.Title, body: m.Description,
		head: m.SourceBranch, base: m.TargetBranch, labels: m.Labels, merged: m.State == "merged",
		own:    m.SourceProjectID != 0 && m.SourceProjectID == m.TargetProjectID,
		number: m.IID, state: StateOpen, headSHA: m.SHA,
	}
	if m.State == "closed" || m.State == "locked" {
		out.state = StateClosed
	}
	if m.Author != nil {
		out.author = m.Author.Username
	}
	if out.merged {
		out.mergeSHA = cmp.Or(m.MergeCommitSHA, m.SquashCommitSHA)
	}
	return out
}

// list pages through GET /projects/{id}/merge_requests, narrowed with
// source_branch and target_branch; pages follow X-Next-Page.
func (g *gitlab) list(ctx context.Context, q query, visit func(pull) bool) error {
	v := url.Values{"state": {"opened"}, "per_page": {"100"}}
	if q.merged {
		v.Set("state", "merged")
	}
	if q.all {
		v.Set("state", "all")
	}
	if q.head != "" {
		v.Set("source_branch", q.head)
	}
	if q.base != "" {
		v.Set("target_branch", q.base)
	}
	next := func(cur *url.URL, h http.Header, _ int) string {
		n, err := strconv.Atoi(strings.TrimSpace(h.Get("X-Next-Page")))
		if err != nil || n <= pageNumber(cur) {
			return ""
		}
		return withPage(cur, n)
	}
	return each(ctx, g.api, g.api.url(g.mrs, v), next, func(m glMR) bool {
		return visit(g.pull(m))
	})
}

// create opens pr with POST /projects/{id}/merge_requests, labels
// included (GitLab creates missing labels).
func (g *gitlab) create(ctx context.Context, pr PullRequest) (pull, error) {
	in := struct {
		SourceBranch string `json:"source_branch"`
		TargetBranch string `json:"target_branch"`
		Title        string `json:"title"`
		Description  string `json:"description"`
		Labels       string `json:"labels,omitempty"`
	}{pr.Head, pr.Base, pr.Title, pr.Body, strings.Join(missingLabels(pr.Labels, nil), ",")}
	var out glMR
	if _, err := g.api.call(ctx, http.MethodPost, g.api.url(g.mrs, nil), in, &out); err != nil {
		return pull{}, err
	}
	return g.pull(out), nil
}

// update sets title and description with PUT /projects/{id}/merge_requests/{iid}.
func (g *gitlab) update(ctx context.Context, p pull, pr PullRequest) error {
	in := struct {
		Title       string `json:"title"`
		Description string `json:"description"`
	}{pr.Title, pr.Body}
	_, err := g.api.call(ctx, http.MethodPut, g.api.url(g.mrs+"/"+p.id, nil), in, nil)
	return err
}

// addLabels adds labels with add_labels, keeping the others.
func (g *gitlab) addLabels(ctx context.Context, p pull, labels []string) error {
	in := struct {
		AddLabels string `json:"add_labels"`
	}{strings.Join(labels, ",")}
	_, err := g.api.call(ctx, http.MethodPut, g.api.url(g.mrs+"/"+p.id, nil), in, nil)
	return err
}

// close sends state_event=close.
func (g *gitlab) close(ctx context.Context, p pull) error {
	in := struct {
		StateEvent string `json:"state_event"`
	}{"close"}
	_, err := g.api.call(ctx, http.MethodPut, g.api.url(g.mrs+"/"+p.id, nil), in, nil)
	return err
}

// comment adds a note to the merge request.
func (g *gitlab) comment(ctx context.Context, p pull, body string) error {
	in := struct {
		Body string `json:"body"`
	}{body}
	_, err := g.api.call(ctx, http.MethodPost, g.api.url(g.mrs+"/"+p.id+"/notes", nil), in, nil)
	return err
}

// reviews reads GET /projects/{id}/merge_requests/{iid}/approvals: GitLab
// records who approved, not on which commit (CommitSHA is ""), and drops
// approvals on a push only when the project's "Remove all approvals when
// commits are added" setting is on.
func (g *gitlab) reviews(ctx context.Context, p pull) ([]Review, error) {
	var out struct {
		ApprovedBy []struct {
			User struct {
				Username string `json:"username"`
			} `json:"user"`
		} `json:"approved_by"`
	}
	if _, err := g.api.call(ctx, http.MethodGet, g.api.url(g.mrs+"/"+p.id+"/approvals", nil), nil, &out); err != nil {
		return nil, err
	}
	var rs []Review
	for _, a := range out.ApprovedBy {
		rs = append(rs, Review{Login: a.User.Username, State: ReviewApproved})
	}
	return rs, nil
}
