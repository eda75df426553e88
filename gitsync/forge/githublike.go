package forge

import (
	"context"
	"net/http"
	"net/url"
	"strings"
)

// githubLike is the pull request API GitHub and Gitea share (Gitea follows
// GitHub's): pull requests under /repos/{owner}/{name}/pulls, decoded as P,
// and their comments and labels under /repos/{owner}/{name}/issues/{n}, a
// pull request being an issue there. The backends embed it and add what
// differs: listing filters and paging, labels, reviews and errors.
type githubLike[P any] struct {
	api   *api
	owner string
	repo  string // escaped "/repos/{owner}/{name}"
	// view turns the forge's pull request into the provider-neutral one.
	view func(P) pull
}

func newGitHubLike[P any](a *api, project string, view func(P) pull) githubLike[P] {
	owner, name, _ := strings.Cut(project, "/")
	return githubLike[P]{api: a, owner: owner, repo: "/repos/" + url.PathEscape(owner) + "/" + url.PathEscape(name), view: view}
}

// url returns the absolute URL of path (escaped, below the repository)
// with query v.
func (g *githubLike[P]) url(path string, v url.Values) string {
	return g.api.url(g.repo+path, v)
}

// listPulls pages through GET /repos/{owner}/{repo}/pulls with query v and
// the state q selects: open ones, closed ones (merged ones among them) for
// merged queries, or all.
func (g *githubLike[P]) listPulls(ctx context.Context, q query, v url.Values, next nextPage, visit func(pull) bool) error {
	v.Set("state", "open")
	if q.merged {
		v.Set("state", "closed")
	}
	if q.all {
		v.Set("state", "all")
	}
	return each(ctx, g.api, g.url("/pulls", v), next, func(p P) bool {
		return visit(g.view(p))
	})
}

// create opens pr with POST /repos/{owner}/{repo}/pulls.
func (g *githubLike[P]) create(ctx context.Context, pr PullRequest) (pull, error) {
	in := struct {
		Head  string `json:"head"`
		Base  string `json:"base"`
		Title string `json:"title"`
		Body  string `json:"body"`
	}{pr.Head, pr.Base, pr.Title, pr.Body}
	var out P
	if _, err := g.api.call(ctx, http.MethodPost, g.url("/pulls", nil), in, &out); err != nil {
		return pull{}, err
	}
	return g.view(out), nil
}

// update sets title and body with PATCH /repos/{owner}/{repo}/pulls/{n}.
func (g *githubLike[P]) update(ctx context.Context, p pull, pr PullRequest) error {
	in := struct {
		Title string `json:"title"`
		Body  string `json:"body"`
	}{pr.Title, pr.Body}
	_, err := g.api.call(ctx, http.MethodPatch, g.url("/pulls/"+p.id, nil), in, nil)
	return err
}

// close sets state=closed with PATCH /repos/{owner}/{repo}/pulls/{n}.
func (g *githubLike[P]) close(ctx context.Context, p pull) error {
	in := struct {
		State string `json:"state"`
	}{"closed"}
	_, err := g.api.call(ctx, http.MethodPatch, g.url("/pulls/"+p.id, nil), in, nil)
	return err
}

// comment posts to the pull request's conversation (the issues API).
func (g *githubLike[P]) comment(ctx context.Context, p pull, body string) error {
	in := struct {
		Body string `json:"body"`
	}{body}
	_, err := g.api.call(ctx, http.MethodPost, g.url("/issues/"+p.id+"/comments", nil), in, nil)
	return err
}

// addLabelsAs adds labels to the pull request with POST
// /repos/{owner}/{repo}/issues/{n}/labels; labels is what the forge wants
// there (names on GitHub, IDs on Gitea).
func (g *githubLike[P]) addLabelsAs(ctx context.Context, p pull, labels any) error {
	in := struct {
		Labels any `json:"labels"`
	}{labels}
	_, err := g.api.call(ctx, http.MethodPost, g.url("/issues/"+p.id+"/labels", nil), in, nil)
	return err
}
