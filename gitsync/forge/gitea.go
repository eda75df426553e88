package forge

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// giteaPageSize is the page size asked of Gitea (its default maximum).
const giteaPageSize = 50

// gitea is the backend for the Gitea (and Forgejo) REST API v1.
type gitea struct {
	githubLike[gtPull]
}

func newGitea(a *api, project string) *gitea {
	g := &gitea{}
	g.githubLike = newGitHubLike(a, project, g.pull)
	return g
}

// gtPull is the part of a Gitea pull request rollgate reads.
type gtPull struct {
	Number  int64  `json:"number"`
	HTMLURL string `json:"html_url"`
	Title   string `json:"title"`
	Body    string `json:"body"`
	Merged  bool   `json:"merged"`
	State   string `json:"state"`
	User    struct {
		Login string `json:"login"`
	} `json:"user"`
	MergeCommitSHA string `json:"merge_commit_sha"`
	Head           gtRef  `json:"head"`
	Base           gtRef  `json:"base"`
	Labels         []struct {
		Name string `json:"name"`
	} `json:"labels"`
}

// gtRef is the head or base of a Gitea pull request.
type gtRef struct {
	// Ref is the branch, but for a head branch that no longer exists
	// (deleted once merged or closed) Gitea lists the pull request's own
	// ref, refs/pull/<n>/head, instead.
	Ref string `json:"ref"`
	// Label is the branch name as the pull request recorded it, whether
	// or not the branch still exists.
	Label  string `json:"label"`
	RepoID int64  `json:"repo_id"`
	SHA    string `json:"sha"`
}

// branch returns the branch r names: Ref, or Label when Ref is a ref of
// the pull request itself because the branch is gone.
func (r gtRef) branch() string {
	if strings.HasPrefix(r.Ref, "refs/") && r.Label != "" {
		return r.Label
	}
	return r.Ref
}

// gtLabel is a repository label.
type gtLabel struct {
	ID   int64  `json:"id"`
	Name string `json:"name"`
}

func (g *gitea) pull(p gtPull) pull {
	out := pull{
		id: strconv.FormatInt(p.Number, 10), url: p.HTMLURL, title: p.Title, body: p.Body,
		head: p.Head.branch(), base: p.Base.branch(), merged: p.Merged,
		own:    p.Head.RepoID != 0 && p.Head.RepoID == p.Base.RepoID,
		number: p.Number, author: p.User.Login, state: p.State, headSHA: p.Head.SHA,
	}
	if p.Merged {
		out.mergeSHA = p.MergeCommitSHA
	}
	for _, l := range p.Labels {
		out.labels = append(out.labels, l.Name)
	}
	return out
}

// giteaNext pages with the page parameter: Gitea has no head filter, so
// listings page with page and limit, stopping at X-Total-Count (or at an
// empty page when the header is missing).
func giteaNext(cur *url.URL, h http.Header, seen int) string {
	if total, err := strconv.Atoi(strings.TrimSpace(h.Get("X-Total-Count"))); err == nil && seen >= total {
		return ""
	}
	return withPage(cur, pageNumber(cur)+1)
}

// list pages through the open pull requests, or the closed ones for
// merged queries. client filters by head and base.
func (g *gitea) list(ctx context.Context, q query, visit func(pull) bool) error {
	v := url.Values{"limit": {strconv.Itoa(giteaPageSize)}, "page": {"1"}}
	return g.listPulls(ctx, q, v, giteaNext, visit)
}

// create opens pr (see missingBranch for a branch not pushed yet).
func (g *gitea) create(ctx context.Context, pr PullRequest) (pull, error) {
	p, err := g.githubLike.create(ctx, pr)
	if err != nil {
		return pull{}, g.missingBranch(ctx, err)
	}
	return p, nil
}

// missingBranch turns the 404 Gitea answers when the head or base branch
// of a new pull request does not exist into ErrRejected, as Client says
// of a head not pushed yet, once a look at the repository shows that it
// exists (otherwise the 404 stays ErrNotFound).
func (g *gitea) missingBranch(ctx context.Context, err error) error {
	var e *Error
	if !errors.As(err, &e) || e.kind != ErrNotFound {
		return err
	}
	if _, rerr := g.api.call(ctx, http.MethodGet, g.api.url(g.repo, nil), nil, nil); rerr != nil {
		return err
	}
	rejected := *e
	rejected.kind = ErrRejected
	rejected.Body = "the head or base branch does not exist (yet): " + e.Body
	return &rejected
}

// addLabels resolves label names to the repository's label IDs (names it
// does not know are skipped: Gitea does not create labels on the fly) and
// adds them with the issues API.
func (g *gitea) addLabels(ctx context.Context, p pull, labels []string) error {
	var ids []int64
	v := url.Values{"limit": {strconv.Itoa(giteaPageSize)}, "page": {"1"}}
	err := each(ctx, g.api, g.url("/labels", v), giteaNext, func(l gtLabel) bool {
		for _, want := range labels {
			if strings.EqualFold(want, l.Name) {
				ids = append(ids, l.ID)
				break
			}
		}
		return true
	})
	if err != nil || len(ids) == 0 {
		return err
	}
	return g.addLabelsAs(ctx, p, ids)
}

// gtReview is the part of a Gitea review rollgate reads.
type gtReview struct {
	User struct {
		Login string `json:"login"`
	} `json:"user"`
	State     string `json:"state"`
	CommitID  string `json:"commit_id"`
	Stale     bool   `json:"stale"`
	Dismissed bool   `json:"dismissed"`
}

// reviews pages through GET /repos/{owner}/{repo}/pulls/{n}/reviews.
func (g *gitea) reviews(ctx context.Context, p pull) ([]Review, error) {
	var out []Review
	v := url.Values{"limit": {strconv.Itoa(giteaPageSize)}, "page": {"1"}}
	err := each(ctx, g.api, g.url("/pulls/"+p.id+"/reviews", v), giteaNext, func(r gtReview) bool {
		state := ReviewCommented
		switch r.State {
		case "APPROVED":
			state = ReviewApproved
		case "REQUEST_CHANGES":
			state = ReviewChangesRequested
		case "PENDING", "REQUEST_REVIEW":
			state = ReviewPending
		}
		if r.Dismissed {
			state = ReviewDismissed
		}
		out = append(out, Review{Login: r.User.Login, State: state, CommitSHA: r.CommitID, Dismissed: r.Dismissed, Stale: r.Stale})
		return true
	})
	return out, err
}
