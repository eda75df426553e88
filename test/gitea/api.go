package gitea

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// APIError is an answer of Gitea's API outside 2xx.
type APIError struct {
	Method, Path string
	StatusCode   int
	Body         string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("gitea API %s %s: %d %s: %s", e.Method, e.Path, e.StatusCode, http.StatusText(e.StatusCode), e.Body)
}

// Call sends method to path (under api/v1, such as "repos/o/r/pulls")
// with token (none when empty), in as its JSON body (nil for none), and
// decodes the JSON answer into out (nil to discard it). An answer outside
// 2xx is an *APIError.
func (s *Server) Call(ctx context.Context, token, method, path string, in, out any) error {
	return s.call(ctx, func(r *http.Request) {
		if token != "" {
			r.Header.Set("Authorization", "token "+token)
		}
	}, method, path, in, out)
}

func (s *Server) call(ctx context.Context, auth func(*http.Request), method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.URL+"api/v1/"+strings.TrimPrefix(path, "/"), body)
	if err != nil {
		return err
	}
	auth(req)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return &APIError{Method: method, Path: path, StatusCode: resp.StatusCode, Body: strings.TrimSpace(string(data))}
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("gitea API %s %s: decoding %q: %w", method, path, data, err)
		}
	}
	return nil
}

// CreateToken creates an access token of u with scopes (such as
// "write:repository", "write:issue") the way a person does, with their
// password (the API creates tokens only under basic auth).
func (s *Server) CreateToken(ctx context.Context, u User, name string, scopes ...string) (string, error) {
	var out struct {
		Token string `json:"sha1"`
	}
	in := map[string]any{"name": name, "scopes": scopes}
	err := s.call(ctx, func(r *http.Request) { r.SetBasicAuth(u.Name, u.Password) },
		http.MethodPost, "users/"+url.PathEscape(u.Name)+"/tokens", in, &out)
	if err == nil && out.Token == "" {
		err = fmt.Errorf("gitea: token %q of %s came back empty", name, u.Name)
	}
	return out.Token, err
}

// Repo is a repository on the Server.
type Repo struct {
	// Owner and Name make the project, "<Owner>/<Name>".
	Owner, Name string
	// CloneURL is its Git URL over HTTP.
	CloneURL string
	// DefaultBranch is main.
	DefaultBranch string
}

// Project is "<owner>/<name>", as rollgate's forge.New takes it.
func (r Repo) Project() string { return r.Owner + "/" + r.Name }

// path is the API path of the repository.
func (r Repo) path() string { return "repos/" + url.PathEscape(r.Owner) + "/" + url.PathEscape(r.Name) }

// CreateRepo creates repository name of the administrator, with a first
// commit (a README) on main, and makes the reviewer a collaborator with
// write access, as a team that reviews pull requests has.
func (s *Server) CreateRepo(ctx context.Context, name string) (Repo, error) {
	var out struct {
		CloneURL      string `json:"clone_url"`
		DefaultBranch string `json:"default_branch"`
	}
	in := map[string]any{"name": name, "auto_init": true, "readme": "Default", "default_branch": "main"}
	if err := s.Call(ctx, s.Admin.Token, http.MethodPost, "user/repos", in, &out); err != nil {
		return Repo{}, err
	}
	r := Repo{Owner: s.Admin.Name, Name: name, CloneURL: out.CloneURL, DefaultBranch: out.DefaultBranch}
	err := s.Call(ctx, s.Admin.Token, http.MethodPut, r.path()+"/collaborators/"+url.PathEscape(s.Reviewer.Name),
		map[string]any{"permission": "write"}, nil)
	return r, err
}

// CreateFile commits a file to branch through the contents API.
func (s *Server) CreateFile(ctx context.Context, r Repo, branch, path string, content []byte) error {
	in := map[string]any{
		"branch": branch, "content": base64.StdEncoding.EncodeToString(content),
		"message": "Add " + path,
	}
	return s.Call(ctx, s.Admin.Token, http.MethodPost, r.path()+"/contents/"+path, in, nil)
}

// CreateLabel adds a label to the repository.
func (s *Server) CreateLabel(ctx context.Context, r Repo, name string) error {
	return s.Call(ctx, s.Admin.Token, http.MethodPost, r.path()+"/labels",
		map[string]any{"name": name, "color": "#1f6feb"}, nil)
}

// RequireApprovals protects branch: merging into it takes n approving
// reviews by users with write access, and nobody pushes to it directly.
func (s *Server) RequireApprovals(ctx context.Context, r Repo, branch string, n int) error {
	in := map[string]any{"rule_name": branch, "required_approvals": n, "enable_push": false}
	return s.Call(ctx, s.Admin.Token, http.MethodPost, r.path()+"/branch_protections", in, nil)
}

// PullRequest is the part of a Gitea pull request the tests read.
type PullRequest struct {
	Number         int64   `json:"number"`
	State          string  `json:"state"`
	Title          string  `json:"title"`
	Body           string  `json:"body"`
	HTMLURL        string  `json:"html_url"`
	Mergeable      bool    `json:"mergeable"`
	Merged         bool    `json:"merged"`
	MergeCommitSHA *string `json:"merge_commit_sha"`
	User           struct {
		Login string `json:"login"`
	} `json:"user"`
	Head struct {
		Ref string `json:"ref"`
		SHA string `json:"sha"`
	} `json:"head"`
	Base struct {
		Ref string `json:"ref"`
	} `json:"base"`
	Labels []struct {
		Name string `json:"name"`
	} `json:"labels"`
}

// PullRequests lists the repository's pull requests in state (open,
// closed or all), up to 50.
func (s *Server) PullRequests(ctx context.Context, r Repo, state string) ([]PullRequest, error) {
	var out []PullRequest
	err := s.Call(ctx, s.Admin.Token, http.MethodGet, r.path()+"/pulls?limit=50&state="+url.QueryEscape(state), nil, &out)
	return out, err
}

// PullRequest reads pull request n.
func (s *Server) PullRequest(ctx context.Context, r Repo, n int64) (PullRequest, error) {
	var out PullRequest
	err := s.Call(ctx, s.Admin.Token, http.MethodGet, fmt.Sprintf("%s/pulls/%d", r.path(), n), nil, &out)
	return out, err
}

// Comments lists the comments of pull request (or issue) n.
func (s *Server) Comments(ctx context.Context, r Repo, n int64) ([]string, error) {
	var out []struct {
		Body string `json:"body"`
	}
	err := s.Call(ctx, s.Admin.Token, http.MethodGet, fmt.Sprintf("%s/issues/%d/comments", r.path(), n), nil, &out)
	var bodies []string
	for _, c := range out {
		bodies = append(bodies, c.Body)
	}
	return bodies, err
}

// WaitMergeable waits until Gitea has checked pull request n and found it
// mergeable (it checks in the background after each push), as the merge
// button waits in its UI.
func (s *Server) WaitMergeable(ctx context.Context, r Repo, n int64, timeout time.Duration) (PullRequest, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		pr, err := s.PullRequest(ctx, r, n)
		if err == nil && pr.Mergeable {
			return pr, nil
		}
		select {
		case <-ctx.Done():
			return pr, fmt.Errorf("pull request %d of %s not mergeable within %s (last error %v)", n, r.Project(), timeout, err)
		case <-tick.C:
		}
	}
}

// Review submits a review of pull request n by u: event is APPROVED,
// REQUEST_CHANGES or COMMENT.
func (s *Server) Review(ctx context.Context, u User, r Repo, n int64, event, body string) error {
	return s.Call(ctx, u.Token, http.MethodPost, fmt.Sprintf("%s/pulls/%d/reviews", r.path(), n),
		map[string]any{"event": event, "body": body}, nil)
}

// Merge merges pull request n as u with a merge commit, the default of
// Gitea's merge button. Gitea checks whether a pull request can merge in
// the background, again after events such as a review, and refuses a
// merge while a check runs (405 "Please try again later"); Merge then
// tries again, as a person clicks again, for up to mergeRetry. Any other
// refusal (missing approvals, a conflict) is returned at once.
func (s *Server) Merge(ctx context.Context, u User, r Repo, n int64) error {
	deadline := time.Now().Add(mergeRetry)
	for {
		err := s.Call(ctx, u.Token, http.MethodPost, fmt.Sprintf("%s/pulls/%d/merge", r.path(), n),
			map[string]any{"do": "merge"}, nil)
		var apiErr *APIError
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusMethodNotAllowed ||
			!strings.Contains(apiErr.Body, "try again later") || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// mergeRetry bounds how long Merge waits for Gitea's mergeability check.
const mergeRetry = 30 * time.Second

// BranchHead returns the commit at the head of branch.
func (s *Server) BranchHead(ctx context.Context, r Repo, branch string) (string, error) {
	var out struct {
		Commit struct {
			ID string `json:"id"`
		} `json:"commit"`
	}
	err := s.Call(ctx, s.Admin.Token, http.MethodGet, r.path()+"/branches/"+url.PathEscape(branch), nil, &out)
	return out.Commit.ID, err
}

// CommitStatus is a commit status as Gitea lists it.
type CommitStatus struct {
	State       string `json:"status"`
	Context     string `json:"context"`
	Description string `json:"description"`
	TargetURL   string `json:"target_url"`
}

// CombinedStatus returns the state Gitea combines from the commit's
// statuses, and the latest status of each context.
func (s *Server) CombinedStatus(ctx context.Context, r Repo, sha string) (string, []CommitStatus, error) {
	var out struct {
		State    string         `json:"state"`
		Statuses []CommitStatus `json:"statuses"`
	}
	err := s.Call(ctx, s.Admin.Token, http.MethodGet, r.path()+"/commits/"+url.PathEscape(sha)+"/status", nil, &out)
	return out.State, out.Statuses, err
}

// UpdateFile commits content as path on a new branch made from base, as
// the web editor's "create a new branch for this commit" does.
func (s *Server) UpdateFile(ctx context.Context, r Repo, base, newBranch, path string, content []byte) error {
	var cur struct {
		SHA string `json:"sha"`
	}
	if err := s.Call(ctx, s.Admin.Token, http.MethodGet, r.path()+"/contents/"+path+"?ref="+url.QueryEscape(base), nil, &cur); err != nil {
		return err
	}
	in := map[string]any{
		"branch": base, "new_branch": newBranch, "sha": cur.SHA,
		"content": base64.StdEncoding.EncodeToString(content), "message": "Update " + path,
	}
	return s.Call(ctx, s.Admin.Token, http.MethodPut, r.path()+"/contents/"+path, in, nil)
}

// OpenPullRequest opens a pull request from head into base as u.
func (s *Server) OpenPullRequest(ctx context.Context, u User, r Repo, head, base, title string) (PullRequest, error) {
	var out PullRequest
	err := s.Call(ctx, u.Token, http.MethodPost, r.path()+"/pulls", map[string]any{"head": head, "base": base, "title": title}, &out)
	return out, err
}

// FileAt returns the content of path on branch.
func (s *Server) FileAt(ctx context.Context, r Repo, branch, path string) (string, error) {
	var out struct {
		Content string `json:"content"`
	}
	if err := s.Call(ctx, s.Admin.Token, http.MethodGet, r.path()+"/contents/"+path+"?ref="+url.QueryEscape(branch), nil, &out); err != nil {
		return "", err
	}
	b, err := base64.StdEncoding.DecodeString(out.Content)
	return string(b), err
}

// Hook is a repository webhook: Gitea POSTs a signed JSON payload to URL
// on every push (Gitea's own type: X-Gitea-Signature, the HMAC-SHA256 of
// the body with Secret).
type Hook struct {
	ID          int64
	URL, Secret string
	repo        Repo
}

// CreateHook adds a push webhook to url signed with secret, as the
// repository's owner does in its settings.
func (s *Server) CreateHook(ctx context.Context, r Repo, url, secret string) (Hook, error) {
	var out struct {
		ID int64 `json:"id"`
	}
	in := map[string]any{"type": "gitea", "active": true, "events": []string{"push"},
		"config": map[string]string{"url": url, "content_type": "json", "secret": secret}}
	if err := s.Call(ctx, s.Admin.Token, http.MethodPost, r.path()+"/hooks", in, &out); err != nil {
		return Hook{}, err
	}
	return Hook{ID: out.ID, URL: url, Secret: secret, repo: r}, nil
}

// DeleteHook removes h. (Gitea's API cannot change a webhook's secret: a
// person changes it in the settings page; a new webhook stands in.)
func (s *Server) DeleteHook(ctx context.Context, h Hook) error {
	return s.Call(ctx, s.Admin.Token, http.MethodDelete, fmt.Sprintf("%s/hooks/%d", h.repo.path(), h.ID), nil, nil)
}

// TestHook makes Gitea deliver h's push event of the default branch's head
// now (the "Test Delivery" button).
func (s *Server) TestHook(ctx context.Context, h Hook) error {
	return s.Call(ctx, s.Admin.Token, http.MethodPost, fmt.Sprintf("%s/hooks/%d/tests", h.repo.path(), h.ID), nil, nil)
}
