// Package dashboard serves `rollgate dashboard`: a read-only web page, and a
// JSON endpoint mirroring it, showing Rollouts as the user's kubeconfig lets
// them be read (ClusterSource) or as rollgate last wrote them to the Git
// status branch, with the history of past releases (GitSource).
//
// Nothing here writes: ClusterSource holds a client.Reader (get and list
// only) and GitSource reads the status branch with gitsync's history
// reader, the one `rollgate history` uses.
package dashboard

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
)

// Source reads Rollouts for the page. namespace "" means every namespace.
type Source interface {
	// Describe names the source for the page's header (no credentials).
	Describe() string
	List(ctx context.Context, namespace string) ([]Rollout, error)
	Get(ctx context.Context, namespace, name string) (Rollout, error)
}

// Rollout is one Rollout as the page and /api/rollouts show it.
type Rollout struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Phase     string `json:"phase,omitempty"`
	// Step is 1-based; Steps the number of steps.
	Step    int    `json:"step"`
	Steps   int    `json:"steps"`
	State   string `json:"state,omitempty"`
	Message string `json:"message,omitempty"`
	// Traffic is the status' own description of the split ("5%",
	// "matches"), when the source records one.
	Traffic string `json:"traffic,omitempty"`
	// Stable and Canary are the two versions and their traffic shares.
	Stable Version `json:"stable"`
	Canary Version `json:"canary"`
	// Gate is the manual gate the release waits at, if any.
	Gate       *Gate       `json:"gate,omitempty"`
	Analysis   []Analysis  `json:"analysis,omitempty"`
	Conditions []Condition `json:"conditions,omitempty"`
	// RevertBranch and RevertPullRequestURL name the revert of a
	// rolled-back release (cluster source).
	RevertBranch         string `json:"revertBranch,omitempty"`
	RevertPullRequestURL string `json:"revertPullRequestURL,omitempty"`
	// Releases are the past releases read from the status branch (Git
	// source), oldest first; nil for the cluster source.
	Releases []gitsync.Release `json:"releases,omitempty"`
}

// Version is one revision and its share of pods and traffic.
type Version struct {
	Revision string `json:"revision,omitempty"`
	// Weight is the percentage of traffic sent to it.
	Weight   int32 `json:"weight"`
	Replicas int32 `json:"replicas"`
	Ready    int32 `json:"ready"`
}

// Gate is a manual approval gate.
type Gate struct {
	Step    int `json:"step"`
	Attempt int `json:"attempt,omitempty"`
	// Branch is the approval branch; PullRequestURL its pull request.
	Branch         string    `json:"branch,omitempty"`
	PullRequestURL string    `json:"pullRequestURL,omitempty"`
	Since          time.Time `json:"since,omitzero"`
	Reason         string    `json:"reason,omitempty"`
}

// Analysis is the result of one metric check.
type Analysis struct {
	Name    string `json:"name"`
	Step    int    `json:"step,omitempty"`
	Phase   string `json:"phase"`
	Value   string `json:"value,omitempty"`
	Counts  string `json:"counts,omitempty"`
	Message string `json:"message,omitempty"`
}

// Condition is a status condition.
type Condition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// ClusterSource reads Rollouts from the API server with the user's own
// credentials. Its Reader can get and list, nothing else.
type ClusterSource struct {
	Reader client.Reader
	// Cluster names the API server for the header.
	Cluster string
}

// Describe implements Source.
func (c ClusterSource) Describe() string { return "cluster " + Redact(c.Cluster) }

// List implements Source.
func (c ClusterSource) List(ctx context.Context, namespace string) ([]Rollout, error) {
	var list v1alpha1.RolloutList
	if err := c.Reader.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, err
	}
	out := make([]Rollout, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, fromRollout(&list.Items[i]))
	}
	return out, nil
}

// Get implements Source.
func (c ClusterSource) Get(ctx context.Context, namespace, name string) (Rollout, error) {
	ro := &v1alpha1.Rollout{}
	if err := c.Reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, ro); err != nil {
		return Rollout{}, err
	}
	return fromRollout(ro), nil
}

func fromRollout(ro *v1alpha1.Rollout) Rollout {
	s := ro.Status
	r := Rollout{
		Namespace: ro.Namespace, Name: ro.Name, Phase: string(s.Phase),
		Step: int(s.CurrentStepIndex), Steps: int(s.StepCount), State: string(s.CurrentStepState),
		Message: s.Message, Traffic: s.Traffic,
		Stable: Version{Revision: s.StableRevision, Weight: 100 - s.CanaryWeight, Replicas: s.StableReplicas, Ready: s.StableReadyReplicas},
		Canary: Version{Revision: s.CanaryRevision, Weight: s.CanaryWeight, Replicas: s.CanaryReplicas, Ready: s.CanaryReadyReplicas},
	}
	if a := s.AwaitingApproval; a != nil {
		r.Gate = &Gate{Step: int(a.Step), Attempt: int(a.Attempt), Branch: a.Branch, PullRequestURL: a.PullRequestURL,
			Since: a.Since.UTC(), Reason: a.Reason}
	}
	for _, m := range s.Analysis {
		a := Analysis{Name: m.Template + "/" + m.Metric, Step: int(m.Step), Phase: m.Phase,
			Counts: fmt.Sprintf("%d successful, %d failed, %d inconclusive, %d errors", m.Successful, m.Failed, m.Inconclusive, m.Errors)}
		if n := len(m.Measurements); n > 0 {
			a.Value, a.Message = m.Measurements[n-1].Value, m.Measurements[n-1].Message
		}
		r.Analysis = append(r.Analysis, a)
	}
	for _, c := range s.Conditions {
		r.Conditions = append(r.Conditions, Condition{Type: c.Type, Status: string(c.Status), Reason: c.Reason, Message: c.Message})
	}
	if g := s.Git; g != nil {
		r.RevertBranch, r.RevertPullRequestURL = g.RevertBranch, g.RevertPullRequestURL
	}
	return r
}

// GitSource reads the status branch alone: each Rollout's last status
// file and the history of its releases.
type GitSource struct {
	// Status reads the status files at the branch head (a shallow fetch);
	// History reads the branch's history. They must be two Repositories:
	// a full fetch into a shallow copy stays shallow, and the history
	// read from it would end at the head.
	Status, History *gitsync.Repository
	// URL is the repository URL; it is shown without userinfo.
	URL    string
	Branch string
	Prefix string
	// Since bounds the history read (0: the whole branch).
	Since time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Cache, when set, keeps what was read at the remote's current branch
	// heads: a page load that finds them unchanged (one ls-remote) reads
	// nothing else.
	Cache *GitCache
}

// Describe implements Source.
func (g GitSource) Describe() string {
	return fmt.Sprintf("Git %s, branch %s", Redact(g.URL), g.Branch)
}

// List implements Source.
func (g GitSource) List(ctx context.Context, namespace string) ([]Rollout, error) {
	return cached(ctx, g, "list "+namespace, func() ([]Rollout, error) { return g.list(ctx, namespace) })
}

func (g GitSource) list(ctx context.Context, namespace string) ([]Rollout, error) {
	states, err := gitsync.ReadStatusAt(ctx, g.Status, g.Branch, g.Prefix)
	if err != nil {
		return nil, gitError{err}
	}
	sort.Slice(states, func(i, j int) bool {
		return states[i].Namespace+"/"+states[i].Name < states[j].Namespace+"/"+states[j].Name
	})
	out := []Rollout{}
	for _, s := range states {
		if namespace != "" && s.Namespace != namespace {
			continue
		}
		r, err := g.withHistory(ctx, s)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// Get implements Source.
func (g GitSource) Get(ctx context.Context, namespace, name string) (Rollout, error) {
	return cached(ctx, g, "get "+namespace+"/"+name, func() (Rollout, error) { return g.get(ctx, namespace, name) })
}

func (g GitSource) get(ctx context.Context, namespace, name string) (Rollout, error) {
	states, err := gitsync.ReadStatusAt(ctx, g.Status, g.Branch, g.Prefix)
	if err != nil {
		return Rollout{}, gitError{err}
	}
	for _, s := range states {
		if s.Namespace == namespace && s.Name == name {
			return g.withHistory(ctx, s)
		}
	}
	return Rollout{}, gitError{fmt.Errorf("%w: no status file for Rollout %s/%s on %s", gitsync.ErrFileNotFound, namespace, name, g.Branch)}
}

// GitCache keeps the last reads of a GitSource, valid while every branch
// head of the remote is what it was when they were made (the status
// branch; the revert branches its history names) and for at most MaxAge.
// It holds at most maxCached reads; the first read past that empties it.
type GitCache struct {
	// MaxAge bounds how long a read is kept when no head moves (the
	// history window, --since, is counted from the time of the read).
	MaxAge time.Duration

	mu    sync.Mutex
	heads string // the digest of every branch head at the time of the reads
	at    time.Time
	reads map[string]any
}

// maxCached bounds the reads a GitCache holds: one per namespace listed
// and per Rollout read.
const maxCached = 1000

// cached returns the read of key that g.Cache holds at the remote's
// current heads, or makes it with read and keeps it (errors are not
// kept). Without a cache it reads; heads that cannot be listed are the
// error of a read (the Git server cannot be read).
func cached[T any](ctx context.Context, g GitSource, key string, read func() (T, error)) (T, error) {
	c := g.Cache
	if c == nil {
		return read()
	}
	heads, err := g.Status.Branches(ctx, "")
	if err != nil {
		var zero T
		return zero, gitError{err}
	}
	digest := headsDigest(heads)
	now := time.Now()
	c.mu.Lock()
	if c.heads != digest || now.Sub(c.at) > c.MaxAge || len(c.reads) >= maxCached {
		c.heads, c.at, c.reads = digest, now, map[string]any{}
	}
	if v, ok := c.reads[key]; ok {
		c.mu.Unlock()
		return v.(T), nil
	}
	c.mu.Unlock()
	v, err := read()
	if err != nil {
		return v, err
	}
	c.mu.Lock()
	if c.heads == digest {
		c.reads[key] = v
	}
	c.mu.Unlock()
	return v, nil
}

// headsDigest is one string for a set of branch heads.
func headsDigest(heads map[string]string) string {
	names := make([]string, 0, len(heads))
	for n := range heads {
		names = append(names, n)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		fmt.Fprintf(h, "%s %s\n", n, heads[n])
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (g GitSource) withHistory(ctx context.Context, s gitsync.RolloutState) (Rollout, error) {
	r := fromState(s)
	var since time.Time
	if g.Since > 0 {
		now := time.Now
		if g.Now != nil {
			now = g.Now
		}
		since = now().Add(-g.Since)
	}
	h, err := gitsync.ReadHistory(ctx, g.History, gitsync.HistoryOptions{Branch: g.Branch, Prefix: g.Prefix,
		Namespace: s.Namespace, Name: s.Name, Since: since})
	if err != nil && !errors.Is(err, gitsync.ErrFileNotFound) {
		return r, gitError{err}
	}
	r.Releases = h.Releases
	return r, nil
}

func fromState(s gitsync.RolloutState) Rollout {
	r := Rollout{
		Namespace: s.Namespace, Name: s.Name, Phase: s.Phase,
		Step: s.Step.Current, Steps: s.Step.Total, State: s.Step.State, Message: s.Message,
		Stable: Version{Revision: s.Stable.Revision, Weight: s.Stable.TrafficPercent, Replicas: s.Stable.Replicas, Ready: s.Stable.ReadyReplicas},
		Canary: Version{Revision: s.Canary.Revision, Weight: s.Canary.TrafficPercent, Replicas: s.Canary.Replicas, Ready: s.Canary.ReadyReplicas},
	}
	if a := s.AwaitingApproval; a != nil {
		r.Gate = &Gate{Step: a.Step, Attempt: a.Attempt, Branch: a.Branch, PullRequestURL: a.PullRequestURL, Since: a.Since}
	}
	for _, m := range s.Analysis {
		r.Analysis = append(r.Analysis, Analysis{Name: m.Name, Phase: m.Phase, Value: m.Value, Message: m.Message})
	}
	return r
}

// gitError marks an error of the Git source: the Git server is the
// upstream of the page.
type gitError struct{ err error }

func (e gitError) Error() string { return e.err.Error() }
func (e gitError) Unwrap() error { return e.err }

// userinfoRE matches the userinfo of a URL, up to its last "@".
var userinfoRE = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://)[^\s"'<>/]*@`)

// Redact removes the userinfo (user, password, token) of every URL in s.
func Redact(s string) string {
	return userinfoRE.ReplaceAllString(s, "${1}")
}

// status maps an error of a Source to the HTTP status and the message the
// page shows.
func status(err error) (int, string) {
	msg := Redact(err.Error())
	var ge gitError
	if errors.As(err, &ge) {
		switch {
		case errors.Is(err, gitsync.ErrFileNotFound), errors.Is(err, gitsync.ErrBranchNotFound):
			return 404, "not in Git: " + msg
		case errors.Is(err, context.DeadlineExceeded):
			return 504, "the Git server did not answer in time: " + msg
		}
		return 502, "the Git server cannot be read: " + msg
	}
	var api apierrors.APIStatus
	if errors.As(err, &api) {
		switch code := int(api.Status().Code); code {
		case 401:
			return 401, "the API server does not accept your kubeconfig's credentials: " + msg
		case 403:
			return 403, "your kubeconfig's user may not read this (the API server answered 403 Forbidden): " + msg
		case 404:
			return 404, "not found: " + msg
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return 504, "the API server did not answer in time: " + msg
	}
	if strings.Contains(msg, "no matches for kind") {
		return 502, "the API server does not serve rollgate's Rollouts (CRDs not installed?): " + msg
	}
	return 502, "the API server cannot be read: " + msg
}
