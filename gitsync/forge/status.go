package forge

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// StatusState is the state of a commit status.
type StatusState string

// The states rollgate reports; every forge knows them (GitLab calls
// failure "failed").
const (
	StatusPending StatusState = "pending"
	StatusSuccess StatusState = "success"
	StatusFailure StatusState = "failure"
)

// CommitStatus is what rollgate reports on the head commit of a pull
// request: the gate it stands for and where the release is.
type CommitStatus struct {
	State StatusState
	// Context names the check: one per Rollout (StatusContext), so a
	// later report replaces the earlier one.
	Context string
	// Description is one line; forges cut it (GitHub at 140 characters).
	Description string
	// TargetURL, when set, is where the status links to.
	TargetURL string
}

// StatusContext is the commit status context of a Rollout.
func StatusContext(namespace, name string) string {
	return "rollgate/" + namespace + "/" + name
}

// maxDescription is GitHub's limit; the shortest of the three forges.
const maxDescription = 140

// statusSetter is what each provider implements for ReportStatus.
type statusSetter interface {
	// setStatus sets st on commit sha.
	setStatus(ctx context.Context, sha string, st CommitStatus) error
}

// ReportStatus implements Client.
func (c *client) ReportStatus(ctx context.Context, head string, st CommitStatus) (string, error) {
	switch {
	case head == "":
		return "", fmt.Errorf("%w: head is required", ErrInvalidRequest)
	case st.Context == "":
		return "", fmt.Errorf("%w: the status context is required", ErrInvalidRequest)
	case st.State != StatusPending && st.State != StatusSuccess && st.State != StatusFailure:
		return "", fmt.Errorf("%w: status state %q", ErrInvalidRequest, st.State)
	}
	found, err := c.pullFrom(ctx, head)
	if err != nil {
		return "", err
	}
	if found.headSHA == "" {
		return "", fmt.Errorf("%w: the pull request from branch %s names no head commit", ErrNotFound, head)
	}
	st.Description = oneLine(st.Description, maxDescription)
	if err := c.b.setStatus(ctx, found.headSHA, st); err != nil {
		return "", err
	}
	return found.headSHA, nil
}

// oneLine is s on one line, cut to n characters.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		s = string(r[:n-1]) + "…"
	}
	return s
}

// setStatus posts POST /repos/{owner}/{repo}/statuses/{sha}, the same call
// on GitHub and Gitea.
func (g *githubLike[P]) setStatus(ctx context.Context, sha string, st CommitStatus) error {
	in := struct {
		State       string `json:"state"`
		TargetURL   string `json:"target_url,omitempty"`
		Description string `json:"description"`
		Context     string `json:"context"`
	}{string(st.State), st.TargetURL, st.Description, st.Context}
	_, err := g.api.call(ctx, http.MethodPost, g.url("/statuses/"+url.PathEscape(sha), nil), in, nil)
	return err
}

// setStatus posts POST /projects/:id/statuses/:sha.
func (g *gitlab) setStatus(ctx context.Context, sha string, st CommitStatus) error {
	state := string(st.State)
	if st.State == StatusFailure {
		state = "failed"
	}
	in := struct {
		State       string `json:"state"`
		Name        string `json:"name"`
		Description string `json:"description"`
		TargetURL   string `json:"target_url,omitempty"`
	}{state, st.Context, st.Description, st.TargetURL}
	project := strings.TrimSuffix(g.mrs, "/merge_requests")
	_, err := g.api.call(ctx, http.MethodPost, g.api.url(project+"/statuses/"+url.PathEscape(sha), nil), in, nil)
	return err
}
