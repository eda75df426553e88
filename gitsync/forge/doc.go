// Package forge opens, refreshes and closes pull requests (merge requests
// on GitLab) for rollgate's approval and revert branches through a forge's
// REST API: GitHub (v3), GitLab (v4) and Gitea (v1).
//
// A forge is optional. gitsync pushes the branches and detects merges by
// reading Git itself; a Client only makes the branches visible as pull
// requests, keeps their descriptions current and closes the ones a newer
// revision or step made stale. Without a forge, people merge the branches
// by hand.
//
// New builds a Client for one repository. Every method is idempotent and
// takes a context, so a reconciler can call it on each pass. ApprovalBody,
// RevertBody and the title helpers build the Markdown shown to reviewers;
// their output depends only on their arguments.
//
// The API token never appears in an error: errors name the provider, the
// method, the URL path and the HTTP status, and quote at most 200 bytes of
// the response body with the token removed. The package does not log.
// Errors wrap ErrAuth, ErrNotFound, ErrRejected or ErrRateLimited where the
// caller has a decision to make (test with errors.Is), and *Error carries
// the details (errors.As).
package forge
