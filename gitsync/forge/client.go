package forge

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"
)

// pull is a provider-neutral view of a pull request.
type pull struct {
	// id names the pull request in API paths: the number on GitHub and
	// Gitea, the iid on GitLab.
	id     string
	url    string
	title  string
	body   string
	head   string
	base   string
	labels []string
	// own reports that head is a branch of the project itself, not of a
	// fork: only those are rollgate's.
	own    bool
	merged bool
	// What PullRequestReviews reports: the number, the author's login,
	// StateOpen or StateClosed (merged ones are closed too), the head
	// commit and the merge commit.
	number            int64
	author, state     string
	headSHA, mergeSHA string
}

// query selects pull requests to list. Backends narrow the listing with
// it where their API can; client checks every field again.
type query struct {
	// merged lists merged pull requests instead of open ones.
	merged bool
	// all lists pull requests in every state (open, closed, merged).
	all bool
	// head and base are branch names; "" means any.
	head, base string
}

// backend is what each provider implements; client builds the Client
// behaviour on top of it, the same for every forge.
type backend interface {
	// list calls visit on the pull requests q selects until visit
	// returns false.
	list(ctx context.Context, q query, visit func(pull) bool) error
	// create opens pr and returns it.
	create(ctx context.Context, pr PullRequest) (pull, error)
	// update sets the title and body of p to those of pr.
	update(ctx context.Context, p pull, pr PullRequest) error
	// addLabels adds labels to p.
	addLabels(ctx context.Context, p pull, labels []string) error
	// close closes p without merging it.
	close(ctx context.Context, p pull) error
	// comment adds a comment to p.
	comment(ctx context.Context, p pull, body string) error
	reviewer
	statusSetter
}

// client implements Client on a backend.
type client struct {
	b backend
	// desc describes the client without its token, for String.
	desc string
	// provider is github, gitlab or gitea; web is the project's web page.
	provider, web string
}

// FileURL links the file at path on branch: GitHub's /blob/, GitLab's
// /-/blob/, Gitea's /src/branch/.
func (c *client) FileURL(branch, path string) string {
	segs := strings.Split(strings.Trim(branch, "/")+"/"+strings.Trim(path, "/"), "/")
	for i, seg := range segs {
		segs[i] = url.PathEscape(seg)
	}
	p := strings.Join(segs, "/")
	switch c.provider {
	case GitHub:
		return c.web + "/blob/" + p
	case GitLab:
		return c.web + "/-/blob/" + p
	default:
		return c.web + "/src/branch/" + p
	}
}

var _ Client = (*client)(nil)

// String describes the client; it never includes the token.
func (c *client) String() string { return c.desc }

// GoString is String, so %#v cannot print the token either.
func (c *client) GoString() string { return c.desc }

// EnsurePullRequest implements Client.
func (c *client) EnsurePullRequest(ctx context.Context, pr PullRequest) (string, error) {
	if err := checkPullRequest(pr); err != nil {
		return "", err
	}
	p, found, err := c.find(ctx, pr.Head, pr.Base)
	if err != nil {
		return "", err
	}
	if !found {
		p, err = c.b.create(ctx, pr)
		if errors.Is(err, ErrRejected) {
			// Someone may have opened it since find: reuse theirs.
			if again, ok, ferr := c.find(ctx, pr.Head, pr.Base); ferr == nil && ok {
				p, err = again, nil
			}
		}
		if err != nil {
			return "", err
		}
	}
	// From here on the pull request exists: its URL goes with any error.
	if !sameText(p.title, pr.Title) || !sameText(p.body, pr.Body) {
		if err := c.b.update(ctx, p, pr); err != nil {
			return p.url, err
		}
	}
	if add := missingLabels(pr.Labels, p.labels); len(add) > 0 {
		if err := c.b.addLabels(ctx, p, add); err != nil {
			return p.url, err
		}
	}
	return p.url, nil
}

// find returns the open pull request from head to base, if any.
func (c *client) find(ctx context.Context, head, base string) (pull, bool, error) {
	var found pull
	var ok bool
	err := c.b.list(ctx, query{head: head, base: base}, func(p pull) bool {
		if p.own && !p.merged && p.head == head && p.base == base {
			found, ok = p, true
		}
		return !ok
	})
	return found, ok, err
}

// ClosePullRequests implements Client.
func (c *client) ClosePullRequests(ctx context.Context, headPrefix string, keep func(head string) bool) ([]string, error) {
	if err := checkPrefix(headPrefix); err != nil {
		return nil, err
	}
	// Collect first: closing while paging would shift the pages.
	var stale []pull
	err := c.b.list(ctx, query{}, func(p pull) bool {
		if p.own && !p.merged && strings.HasPrefix(p.head, headPrefix) && (keep == nil || !keep(p.head)) {
			stale = append(stale, p)
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	sort.SliceStable(stale, func(i, j int) bool { return stale[i].head < stale[j].head })
	var closed []string
	var errs []error
	for _, p := range stale {
		if err := c.b.close(ctx, p); err != nil {
			errs = append(errs, err)
			continue
		}
		closed = append(closed, p.head)
		// Comment after closing, so a retry never comments twice.
		if err := c.b.comment(ctx, p, staleComment(p.head)); err != nil {
			errs = append(errs, fmt.Errorf("commenting on closed %s: %w", p.url, err))
		}
	}
	return slices.Compact(closed), errors.Join(errs...)
}

// MergedPullRequest implements Client.
func (c *client) MergedPullRequest(ctx context.Context, head string) (bool, string, error) {
	if head == "" {
		return false, "", fmt.Errorf("%w: head is required", ErrInvalidRequest)
	}
	var url string
	err := c.b.list(ctx, query{merged: true, head: head}, func(p pull) bool {
		if p.own && p.merged && p.head == head {
			url = p.url
		}
		return url == ""
	})
	if err != nil {
		return false, "", err
	}
	return url != "", url, nil
}
