package forge

import (
	"context"
	"fmt"
)

// States of a pull request in a PullRequestRecord.
const (
	StateOpen   = "open"
	StateClosed = "closed" // closed without merge
	StateMerged = "merged"
)

// States of a Review, the same for every forge.
const (
	ReviewApproved         = "approved"
	ReviewChangesRequested = "changes_requested"
	ReviewCommented        = "commented"
	ReviewDismissed        = "dismissed"
	ReviewPending          = "pending"
)

// PullRequestRecord is what the forge says of one pull request and its
// reviews.
type PullRequestRecord struct {
	// Number is the pull request's number (the iid on GitLab).
	Number int64
	// URL is its web URL.
	URL string
	// Author is the login that opened it.
	Author string
	// Head and Base are its branches.
	Head, Base string
	// State is StateOpen, StateClosed or StateMerged.
	State string
	// HeadSHA is the commit at the head of the pull request (when merged,
	// the head that was merged).
	HeadSHA string
	// MergeCommit is the commit the merge made on Base ("" unless merged;
	// the squash commit when squashed).
	MergeCommit string
	// Reviews in the order the forge lists them (oldest first).
	Reviews []Review
}

// Review is one review of a pull request.
type Review struct {
	// Login of the reviewer.
	Login string
	// State is ReviewApproved, ReviewChangesRequested, ReviewCommented,
	// ReviewDismissed or ReviewPending.
	State string
	// CommitSHA is the commit the review was made on; "" when the forge
	// does not record it (GitLab approvals).
	CommitSHA string
	// Dismissed and Stale are the forge's flags (Gitea): dismissed by a
	// maintainer, or made before the last push.
	Dismissed, Stale bool
}

// reviewer is what a backend adds for PullRequestReviews.
type reviewer interface {
	// reviews lists the reviews of p.
	reviews(ctx context.Context, p pull) ([]Review, error)
}

// PullRequestReviews implements Client.
func (c *client) PullRequestReviews(ctx context.Context, head string) (PullRequestRecord, error) {
	if head == "" {
		return PullRequestRecord{}, fmt.Errorf("%w: head is required", ErrInvalidRequest)
	}
	found, err := c.pullFrom(ctx, head)
	if err != nil {
		return PullRequestRecord{}, err
	}
	rec := PullRequestRecord{Number: found.number, URL: found.url, Author: found.author, Head: found.head, Base: found.base,
		State: found.state, HeadSHA: found.headSHA, MergeCommit: found.mergeSHA}
	if found.merged {
		rec.State = StateMerged
	} else if rec.State != StateClosed {
		rec.State = StateOpen
	}
	rec.Reviews, err = c.b.(reviewer).reviews(ctx, found)
	if err != nil {
		return rec, err
	}
	return rec, nil
}

// pullFrom returns the pull request from head (in the project itself): the
// merged one (the first the forge lists, normally the newest), or else
// the newest one in any state; ErrNotFound when there is none.
func (c *client) pullFrom(ctx context.Context, head string) (pull, error) {
	var found pull
	var ok bool
	err := c.b.list(ctx, query{all: true, head: head}, func(p pull) bool {
		if !p.own || p.head != head {
			return true
		}
		if !ok || p.merged && !found.merged {
			found, ok = p, true
		}
		return !found.merged
	})
	if err != nil {
		return pull{}, err
	}
	if !ok {
		return pull{}, fmt.Errorf("%w: no pull request from branch %s", ErrNotFound, head)
	}
	return found, nil
}
