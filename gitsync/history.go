package gitsync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// The audit trail of a Rollout is the history of its status file: every
// status commit that changed <namespace>/<name>.yaml is one version of the
// Rollout's progress. ReadHistory reads those versions (read-only) and
// folds them into releases; DORA computes delivery figures from them.

// Outcomes of a release.
const (
	// OutcomeReleased: the canary revision became the stable one (phase
	// Healthy).
	OutcomeReleased = "Released"
	// OutcomeRolledBack: the release failed or was aborted (phase Failed,
	// step state RollingBack or RolledBack).
	OutcomeRolledBack = "RolledBack"
	// OutcomeSuperseded: another canary revision replaced this one before
	// it was released or rolled back.
	OutcomeSuperseded = "Superseded"
	// OutcomeInProgress: the release had not ended at the last version read.
	OutcomeInProgress = "InProgress"
)

// NotRecorded stands for what the status file does not hold.
const NotRecorded = "not recorded"

// HistoryOptions select the status file whose history ReadHistory reads.
type HistoryOptions struct {
	// Branch is the status branch; "" means DefaultStatusBranch.
	Branch string
	// Prefix is the directory of the status files (WriterOptions.PathPrefix).
	Prefix string
	// Namespace and Name name the Rollout.
	Namespace, Name string
	// Since bounds the walk: commits older than Since are not read, except
	// the newest of them, which gives the state at the start of the
	// window. Zero reads the whole branch.
	Since time.Time
	// SourceTimes looks up the commit time of the tracked-branch commit a
	// release was first seen with (GitInfo.Revision), when the status file
	// names this repository; it downloads the tracked branch's history.
	SourceTimes bool
}

// StatusVersion is one version of a status file: the state as a status
// commit wrote it.
type StatusVersion struct {
	// Commit is the status commit and Time its committer time.
	Commit string
	Time   time.Time
	// State is the parsed file.
	State RolloutState
}

// History is the audit trail of one Rollout, read from its status file's
// history.
type History struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Branch is the status branch read; Head its commit.
	Branch string `json:"branch"`
	Head   string `json:"head"`
	// Since is the start of the window (zero: the whole branch), Until the
	// head commit's time.
	Since time.Time `json:"since,omitzero"`
	Until time.Time `json:"until"`
	// Commits counts the status commits walked; Versions the versions of
	// the file among them.
	Commits  int `json:"commits"`
	Versions int `json:"versions"`
	// Incomplete is set when the branch's history ended (or the local copy
	// was shallow) before Since.
	Incomplete bool `json:"incomplete,omitempty"`
	// Releases, oldest first.
	Releases []Release `json:"releases"`
}

// Release is one canary revision's way through the steps.
type Release struct {
	// Revision is the canary revision; Stable the revision it replaces.
	Revision string `json:"revision"`
	Stable   string `json:"stable,omitempty"`
	// Images are the canary's "<container>=<image>" as recorded.
	Images []string `json:"images,omitempty"`
	// FirstSeen is the time of the first version showing this canary.
	FirstSeen time.Time `json:"firstSeen"`
	// StartedBeforeWindow is set when the release was already under way
	// at the first version read: its start is not known.
	StartedBeforeWindow bool `json:"startedBeforeWindow,omitempty"`
	// SourceCommit is the tracked-branch commit rollgate had observed when
	// the canary first appeared (GitInfo.Revision), and SourceCommitTime
	// its committer time when it could be read.
	SourceCommit     string    `json:"sourceCommit,omitempty"`
	SourceCommitTime time.Time `json:"sourceCommitTime,omitzero"`
	// Steps, in the order they started.
	Steps []StepSpan `json:"steps,omitempty"`
	// Gates are the manual approvals of this revision.
	Gates []Gate `json:"gates,omitempty"`
	// Analysis holds the measurements first seen during the release.
	Analysis []Measurement `json:"analysis,omitempty"`
	// Outcome is one of the Outcome constants; Ended when it was reached
	// (the commit time of the first version showing it).
	Outcome string    `json:"outcome"`
	Ended   time.Time `json:"ended,omitzero"`
	// Revert is the revert branch of a rolled-back revision when it is on
	// the remote; "" otherwise (the status file does not record it).
	Revert string `json:"revert,omitempty"`
}

// StepSpan is one step of a release.
type StepSpan struct {
	// Step is 1-based; Total the number of steps then.
	Step  int `json:"step"`
	Total int `json:"total"`
	// Start is when the step started (lastTransitionTime, else the commit
	// time); End when the next step started or the release ended.
	Start time.Time `json:"start"`
	End   time.Time `json:"end,omitzero"`
	// States are the step states recorded, in order.
	States []string `json:"states,omitempty"`
}

// Gate is one manual approval gate of a release.
type Gate struct {
	Step    int `json:"step"`
	Attempt int `json:"attempt,omitempty"`
	// Waiting is when the gate started waiting (zero when no version
	// showed it waiting).
	Waiting time.Time `json:"waiting,omitzero"`
	// Branch and PullRequestURL are the approval branch and pull request
	// recorded while the gate waited.
	Branch         string `json:"branch,omitempty"`
	PullRequestURL string `json:"pullRequestURL,omitempty"`
	// Approved is when the approval first appeared in the file's
	// approvals; zero when none was recorded.
	Approved time.Time `json:"approved,omitzero"`
	// Opened is when the release went past the gate; zero while it waits.
	Opened time.Time `json:"opened,omitzero"`
	// How says how the gate was opened, as far as the file tells.
	How string `json:"how"`
}

// ReadHistory fetches the history of the status branch and returns the
// audit trail of one Rollout. It walks first parents from the head back to
// opts.Since and reads only the commits that changed the Rollout's file.
// The branch's whole history is downloaded (status commits are small);
// the walk, not the download, is bounded by Since. A Rollout whose file
// appears in no commit read is ErrFileNotFound.
func ReadHistory(ctx context.Context, repo *Repository, opts HistoryOptions) (History, error) {
	if opts.Branch == "" {
		opts.Branch = DefaultStatusBranch
	}
	file := strings.TrimPrefix(StatusPath(strings.Trim(opts.Prefix, "/"), opts.Namespace, opts.Name), "/")
	h := History{Namespace: opts.Namespace, Name: opts.Name, Branch: opts.Branch, Since: opts.Since}
	head, err := repo.fetchHistory(ctx, opts.Branch)
	if err != nil {
		return h, err
	}
	versions, err := repo.fileVersions(head, file, opts.Since, &h)
	if err != nil {
		return h, repo.red.wrap("reading "+opts.Branch, err)
	}
	if len(versions) == 0 {
		return h, fmt.Errorf("%w: %s on %s", ErrFileNotFound, file, opts.Branch)
	}
	h.Versions = len(versions)
	h.Releases = FoldHistory(versions, opts.Since)
	if opts.SourceTimes {
		repo.sourceTimes(ctx, h.Releases, versions)
	}
	if heads, err := repo.Branches(ctx, RevertBranchesOf(opts.Namespace, opts.Name)); err == nil {
		for i := range h.Releases {
			r := &h.Releases[i]
			if b := RevertBranch(opts.Namespace, opts.Name, r.Revision); r.Outcome == OutcomeRolledBack && heads[b] != "" {
				r.Revert = b
			}
		}
	}
	return h, nil
}

// fetchHistory downloads branch with its whole history and returns its
// head, or ErrBranchNotFound.
func (r *Repository) fetchHistory(ctx context.Context, branch string) (plumbing.Hash, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.repair(); err != nil {
		return plumbing.ZeroHash, err
	}
	heads, err := r.listRemote(ctx)
	if err != nil {
		return plumbing.ZeroHash, r.red.wrap("listing branches of "+r.safeURL, r.noteDamage(err))
	}
	h, ok := heads[branch]
	if !ok {
		return plumbing.ZeroHash, fmt.Errorf("%w: %s", ErrBranchNotFound, branch)
	}
	fctx, cancel := r.netContext(ctx)
	defer cancel()
	start := time.Now()
	err = r.repo.FetchContext(fctx, &git.FetchOptions{
		RemoteName: remoteName,
		RefSpecs:   []config.RefSpec{config.RefSpec(fmt.Sprintf("+refs/heads/%s:%s", branch, trackingRef(branch)))},
		Auth:       r.auth, Tags: git.NoTags, Force: true,
		CABundle: r.opts.Credentials.caBundleData(),
	})
	if errors.Is(err, git.NoErrAlreadyUpToDate) {
		err = nil
	}
	r.observe(OpFetch, start, err)
	if err != nil {
		return plumbing.ZeroHash, r.red.wrap("fetching the history of "+branch+" from "+r.safeURL, r.noteDamage(err))
	}
	return h, nil
}

// fileVersions walks first parents from head and returns the versions of
// file, oldest first, stopping after the first commit older than since.
func (r *Repository) fileVersions(head plumbing.Hash, file string, since time.Time, h *History) ([]StatusVersion, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []StatusVersion
	c, err := r.repo.CommitObject(head)
	if err != nil {
		return nil, err
	}
	h.Head, h.Until = head.String(), c.Committer.When.UTC()
	for c != nil {
		h.Commits++
		blob, ok, err := fileHash(c, file)
		if err != nil {
			return nil, err
		}
		var parent *object.Commit
		if len(c.ParentHashes) > 0 {
			if parent, err = r.repo.CommitObject(c.ParentHashes[0]); err != nil {
				h.Incomplete = true // a shallow copy: no parent here
				parent = nil
			}
		}
		old := !since.IsZero() && c.Committer.When.Before(since)
		prev, prevOK := plumbing.ZeroHash, false
		if parent != nil && !old {
			if prev, prevOK, err = fileHash(parent, file); err != nil {
				return nil, err
			}
		}
		if ok && (old || !prevOK || prev != blob) {
			v, err := r.version(c, blob)
			if err != nil {
				return nil, fmt.Errorf("%s at %s: %w", file, c.Hash.String()[:10], err)
			}
			out = append(out, v)
		}
		if old {
			break
		}
		if parent == nil && !since.IsZero() && !h.Incomplete {
			h.Incomplete = true // the branch starts inside the window
		}
		c = parent
	}
	slices.Reverse(out)
	return out, nil
}

func fileHash(c *object.Commit, file string) (plumbing.Hash, bool, error) {
	t, err := c.Tree()
	if err != nil {
		return plumbing.ZeroHash, false, err
	}
	e, err := t.FindEntry(file)
	if errors.Is(err, object.ErrEntryNotFound) || errors.Is(err, object.ErrDirectoryNotFound) {
		return plumbing.ZeroHash, false, nil
	}
	if err != nil {
		return plumbing.ZeroHash, false, err
	}
	return e.Hash, e.Mode.IsFile(), nil
}

func (r *Repository) version(c *object.Commit, blob plumbing.Hash) (StatusVersion, error) {
	data, err := r.blob(blob)
	if err != nil {
		return StatusVersion{}, err
	}
	s, ok, err := ParseStatus(data)
	if err == nil && !ok {
		err = errors.New("not a status file")
	}
	return StatusVersion{Commit: c.Hash.String(), Time: c.Committer.When.UTC(), State: s}, err
}

// sourceTimes fills SourceCommitTime of the releases whose source commit
// is on the tracked branch of this repository. What cannot be read stays
// zero: lead time then starts at FirstSeen.
func (r *Repository) sourceTimes(ctx context.Context, rels []Release, versions []StatusVersion) {
	branches := map[string]bool{}
	for _, v := range versions {
		g := v.State.Git
		if g.Branch != "" && g.Revision != "" && sameRepository(g.Repository, r.safeURL) {
			branches[g.Branch] = true
		}
	}
	for b := range branches {
		_, _ = r.fetchHistory(ctx, b)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range rels {
		h := plumbing.NewHash(rels[i].SourceCommit)
		if rels[i].SourceCommit == "" || h.IsZero() {
			continue
		}
		if c, err := r.repo.CommitObject(h); err == nil {
			rels[i].SourceCommitTime = c.Committer.When.UTC()
		}
	}
}

// sameRepository compares repository URLs, ignoring a trailing ".git" or
// "/".
func sameRepository(a, b string) bool {
	norm := func(s string) string { return strings.TrimSuffix(strings.TrimSuffix(s, "/"), ".git") }
	return a != "" && norm(a) == norm(b)
}

// FoldHistory folds the versions of one status file (oldest first) into
// releases. A version older than since (the first, at most) gives the
// state at the start of the window: a release already under way there is
// marked StartedBeforeWindow. It reads nothing but the versions.
func FoldHistory(versions []StatusVersion, since time.Time) []Release {
	var rels []Release
	seen := map[string]bool{}
	for i, v := range versions {
		s := v.State
		canary := s.Canary.Revision
		releasing := canary != "" && canary != s.Stable.Revision
		cur := lastRelease(rels)
		if releasing && (cur == nil || canary != cur.Revision || (cur.Outcome != OutcomeInProgress && !failed(s) && s.Phase != "Healthy")) {
			if cur != nil && cur.Outcome == OutcomeInProgress {
				endRelease(cur, OutcomeSuperseded, v.Time)
			}
			rels = append(rels, Release{
				Revision: canary, Stable: s.Stable.Revision, FirstSeen: v.Time, Outcome: OutcomeInProgress,
				StartedBeforeWindow: i == 0 && !since.IsZero() && v.Time.Before(since), SourceCommit: s.Git.Revision,
			})
			cur = &rels[len(rels)-1]
		}
		var fresh []Measurement
		for _, m := range s.Analysis {
			k := m.Name + "\x00" + m.Time.String() + "\x00" + m.Phase + "\x00" + m.Value
			if !seen[k] {
				seen[k] = true
				fresh = append(fresh, m)
			}
		}
		if cur == nil || cur.Outcome != OutcomeInProgress {
			continue
		}
		cur.Analysis = append(cur.Analysis, fresh...)
		if canary == cur.Revision {
			if len(cur.Images) == 0 {
				cur.Images = s.Canary.Images
			}
			trackStep(cur, s, v.Time)
		}
		trackGates(cur, s, v.Time)
		switch {
		case failed(s) && (canary == cur.Revision || canary == ""):
			endRelease(cur, OutcomeRolledBack, v.Time)
		case s.Phase == "Healthy" && s.Stable.Revision == cur.Revision:
			endRelease(cur, OutcomeReleased, v.Time)
		case s.Phase == "Healthy" && !releasing:
			endRelease(cur, OutcomeSuperseded, v.Time)
		}
	}
	for i := range rels {
		for j := range rels[i].Gates {
			rels[i].Gates[j].How = gateHow(rels[i].Gates[j], rels[i].Outcome)
		}
	}
	return rels
}

func lastRelease(rels []Release) *Release {
	if len(rels) == 0 {
		return nil
	}
	return &rels[len(rels)-1]
}

// failed reports a state of a failed release: rolling back or rolled back.
func failed(s RolloutState) bool {
	return s.Phase == "Failed" || s.Step.State == "RollingBack" || s.Step.State == "RolledBack"
}

func endRelease(r *Release, outcome string, at time.Time) {
	r.Outcome, r.Ended = outcome, at
	if n := len(r.Steps); n > 0 && r.Steps[n-1].End.IsZero() {
		r.Steps[n-1].End = at
	}
}

// trackStep records the step and step state of s. A step starts at the
// state's lastTransitionTime (when the step last changed), else at the
// commit time.
func trackStep(r *Release, s RolloutState, at time.Time) {
	if s.Step.Current <= 0 {
		return
	}
	n := len(r.Steps)
	if n == 0 || r.Steps[n-1].Step != s.Step.Current {
		start := at
		if t := s.LastTransitionTime; !t.IsZero() && !t.After(at) && (n == 0 || !t.Before(r.Steps[n-1].Start)) {
			start = t.UTC()
		}
		if n > 0 && r.Steps[n-1].End.IsZero() {
			r.Steps[n-1].End = start
		}
		r.Steps = append(r.Steps, StepSpan{Step: s.Step.Current, Total: s.Step.Total, Start: start})
		n++
	}
	st := &r.Steps[n-1]
	if s.Step.State != "" && (len(st.States) == 0 || st.States[len(st.States)-1] != s.Step.State) {
		st.States = append(st.States, s.Step.State)
	}
}

// trackGates records the gate s waits at and the approvals of r's
// revision, and marks the gates the release went past.
func trackGates(r *Release, s RolloutState, at time.Time) {
	gate := func(step, attempt int) *Gate {
		for i := range r.Gates {
			if r.Gates[i].Step == step && r.Gates[i].Attempt == attempt {
				return &r.Gates[i]
			}
		}
		r.Gates = append(r.Gates, Gate{Step: step, Attempt: attempt})
		return &r.Gates[len(r.Gates)-1]
	}
	a := s.AwaitingApproval
	if a != nil && a.Revision == r.Revision {
		g := gate(a.Step, a.Attempt)
		if g.Waiting.IsZero() {
			g.Waiting = at
			if !a.Since.IsZero() && !a.Since.After(at) {
				g.Waiting = a.Since.UTC()
			}
		}
		g.Branch = cmpOr(a.Branch, g.Branch)
		g.PullRequestURL = cmpOr(a.PullRequestURL, g.PullRequestURL)
	}
	for _, ap := range s.Approvals {
		if ap.Revision == r.Revision {
			if g := gate(ap.Step, ap.Attempt); g.Approved.IsZero() {
				g.Approved = at
			}
		}
	}
	released := s.Phase == "Healthy" && s.Stable.Revision == r.Revision
	for i := range r.Gates {
		g := &r.Gates[i]
		waiting := a != nil && a.Revision == r.Revision && a.Step == g.Step && a.Attempt == g.Attempt
		if g.Opened.IsZero() && !waiting && !failed(s) && (released || s.Step.Current > g.Step ||
			(!g.Waiting.IsZero() && s.Step.Current == g.Step)) {
			g.Opened = at
		}
	}
	slices.SortStableFunc(r.Gates, func(x, y Gate) int { return x.Attempt*1000 + x.Step - (y.Attempt*1000 + y.Step) })
}

// gateHow says how a gate was opened, from what the file records: the
// approval in spec.approvals and the branch or pull request it waited
// on. Who approved, the reviews and the signature are not in the file.
func gateHow(g Gate, outcome string) string {
	var how string
	switch {
	case g.Opened.IsZero() && outcome == OutcomeInProgress:
		how = "waiting"
	case g.Opened.IsZero():
		how = "not opened"
	case g.Approved.IsZero():
		how = "no approval recorded (spec.promote, a removed step, or an approval not yet written)"
	default:
		how = "approval in spec.approvals"
	}
	switch {
	case g.PullRequestURL != "":
		how += "; pull request " + g.PullRequestURL
	case g.Branch != "":
		how += "; branch " + g.Branch
	}
	return how + "; approver: " + NotRecorded
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Figure is one DORA figure: Value in Unit (nil when nothing to compute it
// from), computed from Count releases.
type Figure struct {
	Value *float64 `json:"value"`
	Unit  string   `json:"unit"`
	Count int      `json:"count"`
	Note  string   `json:"note,omitempty"`
}

// DORA holds the four DORA figures over a window.
type DORA struct {
	Since               time.Time `json:"since"`
	Until               time.Time `json:"until"`
	DeploymentFrequency Figure    `json:"deploymentFrequency"`
	LeadTime            Figure    `json:"leadTime"`
	ChangeFailureRate   Figure    `json:"changeFailureRate"`
	TimeToRestore       Figure    `json:"timeToRestore"`
}

// ComputeDORA computes the DORA figures of releases ended in [since,
// until]. A zero since means the first release's FirstSeen.
//
//   - deployment frequency: releases released per day;
//   - lead time: median hours from the source commit's time (when known,
//     else the release's first version in the status history) to released,
//     over released releases that started inside the window;
//   - change failure rate: rolled back / (released + rolled back), in %;
//   - time to restore: median hours from a rollback to the next release
//     released.
func ComputeDORA(releases []Release, since, until time.Time) DORA {
	if since.IsZero() && len(releases) > 0 {
		since = releases[0].FirstSeen
	}
	d := DORA{Since: since.UTC(), Until: until.UTC()}
	in := func(r Release) bool { return !r.Ended.IsZero() && !r.Ended.Before(since) && !r.Ended.After(until) }
	var released, rolledBack int
	var lead, restore []float64
	fromSource, unrestored := 0, 0
	for i, r := range releases {
		if !in(r) {
			continue
		}
		switch r.Outcome {
		case OutcomeReleased:
			released++
			if r.StartedBeforeWindow {
				continue
			}
			start := r.FirstSeen
			if !r.SourceCommitTime.IsZero() && r.SourceCommitTime.Before(start) {
				start, fromSource = r.SourceCommitTime, fromSource+1
			}
			lead = append(lead, r.Ended.Sub(start).Hours())
		case OutcomeRolledBack:
			rolledBack++
			j := slices.IndexFunc(releases[i+1:], func(n Release) bool { return n.Outcome == OutcomeReleased })
			if j < 0 || releases[i+1+j].Ended.After(until) {
				unrestored++
				continue
			}
			restore = append(restore, releases[i+1+j].Ended.Sub(r.Ended).Hours())
		}
	}
	days := until.Sub(since).Hours() / 24
	d.DeploymentFrequency = Figure{Unit: "releases/day", Count: released}
	if days > 0 {
		d.DeploymentFrequency.Value = ptr(float64(released) / days)
	}
	d.LeadTime = Figure{Value: median(lead), Unit: "hours (median)", Count: len(lead),
		Note: fmt.Sprintf("%d from the source commit's time, %d from the first status version", fromSource, len(lead)-fromSource)}
	d.ChangeFailureRate = Figure{Unit: "% of finished releases", Count: released + rolledBack}
	if released+rolledBack > 0 {
		d.ChangeFailureRate.Value = ptr(100 * float64(rolledBack) / float64(released+rolledBack))
	}
	d.TimeToRestore = Figure{Value: median(restore), Unit: "hours (median)", Count: len(restore)}
	if unrestored > 0 {
		d.TimeToRestore.Note = fmt.Sprintf("%d rollback(s) not yet followed by a release", unrestored)
	}
	return d
}

func ptr(f float64) *float64 { return &f }

func median(xs []float64) *float64 {
	if len(xs) == 0 {
		return nil
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return ptr(s[n/2])
	} else {
		return ptr((s[n/2-1] + s[n/2]) / 2)
	}
}
