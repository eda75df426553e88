package forge

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// github is the backend for the GitHub REST API v3 (github.com and GitHub
// Enterprise Server).
type github struct {
	githubLike[ghPull]
	project string // owner/name
}

func newGitHub(a *api, project string) *github {
	g := &github{project: project}
	g.githubLike = newGitHubLike(a, project, g.pull)
	return g
}

// ghPull is the part of a GitHub pull request rollgate reads.
type ghPull struct {
	Number   int64   `json:"number"`
	HTMLURL  string  `json:"html_url"`
	Title    string  `json:"title"`
	Body     string  `json:"body"`
	MergedAt *string `json:"merged_at"`
	State    string  `json:"state"`
	User     *struct {
		Login string `json:"login"`
	} `json:"user"`
	MergeCommitSHA string `json:"merge_commit_sha"`
	Head           ghRef  `json:"head"`
	Base           ghRef  `json:"base"`
	Labels         []struct {
		Name string `json:"name"`
	} `json:"labels"`
}

// ghRef is the head or base of a GitHub pull request. Repo is null when
// the fork it came from was deleted.
type ghRef struct {
	Ref  string `json:"ref"`
	SHA  string `json:"sha"`
	Repo *struct {
		FullName string `json:"full_name"`
	} `json:"repo"`
}

func (g *github) pull(p ghPull) pull {
	out := pull{
		id: strconv.FormatInt(p.Number, 10), url: p.HTMLURL, title: p.Title, body: p.Body,
		head: p.Head.Ref, base: p.Base.Ref, merged: p.MergedAt != nil,
		own:    p.Head.Repo != nil && strings.EqualFold(p.Head.Repo.FullName, g.project),
		number: p.Number, state: p.State, headSHA: p.Head.SHA,
	}
	if p.User != nil {
		out.author = p.User.Login
	}
	if out.merged {
		out.mergeSHA = p.MergeCommitSHA
	}
	for _, l := range p.Labels {
		out.labels = append(out.labels, l.Name)
	}
	return out
}

// list pages through the pull requests, narrowed with head=owner:branch
// and base; pages follow the Link header.
func (g *github) list(ctx context.Context, q query, visit func(pull) bool) error {
	v := url.Values{"per_page": {"100"}}
	if q.head != "" {
		v.Set("head", g.owner+":"+q.head)
	}
	if q.base != "" {
		v.Set("base", q.base)
	}
	return g.listPulls(ctx, q, v, githubNext, visit)
}

// githubNext pages with the Link header.
func githubNext(_ *url.URL, h http.Header, _ int) string { return linkNext(h) }

// addLabels uses the issues API, which creates labels that do not exist
// yet.
func (g *github) addLabels(ctx context.Context, p pull, labels []string) error {
	return g.addLabelsAs(ctx, p, labels)
}

// ghReview is the part of a GitHub review rollgate reads. User is null
// for a deleted account.
type ghReview struct {
	User *struct {
		Login string `json:"login"`
	} `json:"user"`
	State    string `json:"state"`
	CommitID string `json:"commit_id"`
}

// reviews pages through GET /repos/{owner}/{repo}/pulls/{n}/reviews.
func (g *github) reviews(ctx context.Context, p pull) ([]Review, error) {
	var out []Review
	v := url.Values{"per_page": {"100"}}
	err := each(ctx, g.api, g.url("/pulls/"+p.id+"/reviews", v), githubNext, func(r ghReview) bool {
		if r.User == nil {
			return true
		}
		state := ReviewCommented
		switch r.State {
		case "APPROVED":
			state = ReviewApproved
		case "CHANGES_REQUESTED":
			state = ReviewChangesRequested
		case "DISMISSED":
			state = ReviewDismissed
		case "PENDING":
			state = ReviewPending
		}
		out = append(out, Review{Login: r.User.Login, State: state, CommitSHA: r.CommitID, Dismissed: state == ReviewDismissed})
		return true
	})
	return out, err
}
