package gitsync

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
	"sigs.k8s.io/yaml"
)

// Status file identity: every status file carries these, so ReadStatus can
// tell status files from anything else on the branch.
const (
	StatusAPIVersion = "status.rollgate.dev/v1alpha1"
	StatusKind       = "RolloutStatus"
	// DefaultStatusBranch receives status files unless configured otherwise.
	DefaultStatusBranch = "rollgate/status"
	// OverviewFile is the Markdown overview written next to the status files.
	OverviewFile = "README.md"
	// DefaultMaxMeasurements bounds RolloutState.Analysis in status files.
	DefaultMaxMeasurements = 10
)

// RolloutState is the progress of one Rollout as written to Git. The
// reconciler maps a Rollout's status into it; gitsync only renders and
// parses it. Times are written in UTC with second precision.
type RolloutState struct {
	// Namespace of the Rollout.
	Namespace string `json:"namespace"`
	// Name of the Rollout.
	Name string `json:"name"`
	// Phase is the overall phase (e.g. Progressing, Paused, Healthy,
	// Degraded, RolledBack).
	Phase string `json:"phase,omitempty"`
	// Step is the current canary step.
	Step StepState `json:"step,omitzero"`
	// Stable describes the stable version.
	Stable VersionState `json:"stable,omitzero"`
	// Canary describes the canary version.
	Canary VersionState `json:"canary,omitzero"`
	// Approvals lists the approvals seen in the Rollout's spec.
	Approvals []Approval `json:"approvals,omitempty"`
	// AwaitingApproval is set while a manual gate waits.
	AwaitingApproval *AwaitingApproval `json:"awaitingApproval,omitempty"`
	// ApprovalRecord, under an approval policy (Repository
	// spec.approvals), says how the last approval that counted was
	// verified: the commit that brought it, its signer, and with
	// spec.approvals.reviews the pull request, its merge commit and its
	// approving reviewers, as the forge reported them.
	ApprovalRecord string `json:"approvalRecord,omitempty"`
	// LastTransitionTime is when Phase or Step last changed.
	LastTransitionTime time.Time `json:"lastTransitionTime,omitzero"`
	// Message is a human-readable explanation of the current state.
	Message string `json:"message,omitempty"`
	// Reason says what the release waits for, in one word, when it waits:
	// the reason of the Rollout's Progressing condition (WaitingForApproval,
	// WaitingForFleet, WaitingForFreeze, WaitingForBudget, WaitingForHook
	// or WaitingForGroup); empty otherwise.
	Reason string `json:"reason,omitempty"`
	// Queue is the release's place in the queue of a budget of the
	// release rules, while it waits there.
	Queue *QueueState `json:"queue,omitempty"`
	// Analysis holds the latest analysis measurements, newest last,
	// bounded by the Writer (DefaultMaxMeasurements).
	Analysis []Measurement `json:"analysis,omitempty"`
	// Git says where the Rollout comes from.
	Git GitInfo `json:"git,omitzero"`
	// WaitsFor names the upstream releases the Rollout's fleet gates wait
	// for, "<cluster>/<namespace>/<name>" each: other clusters read it to
	// find a cycle in the graph of waves.
	WaitsFor []string `json:"waitsFor,omitempty"`
	// Group is the lockstep group the Rollout releases with
	// (spec.group.name), if any.
	Group string `json:"group,omitempty"`
}

// QueueState is a release's place in a budget's queue.
type QueueState struct {
	Budget   string    `json:"budget"`
	Position int       `json:"position"`
	Since    time.Time `json:"since"`
}

// StepState is the position in the step list.
type StepState struct {
	// Current is the 1-based current step; 0 before the first step.
	Current int `json:"current"`
	// Total is the number of steps.
	Total int `json:"total"`
	// State is the state within the step (e.g. Upgrading, Paused, Ready).
	State string `json:"state,omitempty"`
}

// VersionState describes the pods and traffic of one version.
type VersionState struct {
	// Revision identifies the version (e.g. pod-template hash).
	Revision string `json:"revision,omitempty"`
	// Replicas counts the pods of this version.
	Replicas int32 `json:"replicas"`
	// ReadyReplicas counts the ready pods of this version.
	ReadyReplicas int32 `json:"readyReplicas"`
	// TrafficPercent is the share of traffic routed to this version.
	TrafficPercent int32 `json:"trafficPercent"`
	// Images are the version's containers as "<container>=<image>",
	// sorted by container: the identity of a version across clusters,
	// whose pod templates may differ in everything else. Written when
	// the controller knows them (the version of the workload's template).
	Images []string `json:"images,omitempty"`
}

// Approval binds a manual approval to a canary revision, an attempt and a
// step, as in the Rollout's spec.approvals.
type Approval struct {
	// Revision is the canary revision approved.
	Revision string `json:"revision"`
	// Step is the 1-based step approved.
	Step int `json:"step"`
	// Attempt is the release attempt approved (status.attempt, raised by
	// spec.retry); 0 means attempt 1 and is how attempt 1 is written.
	Attempt int `json:"attempt,omitempty"`
}

// AwaitingApproval describes an open manual gate.
type AwaitingApproval struct {
	// Revision is the canary revision waiting.
	Revision string `json:"revision"`
	// Step is the 1-based step waiting.
	Step int `json:"step"`
	// Attempt is the release attempt waiting, from attempt 2 on; 0 means
	// attempt 1. The approval must name it.
	Attempt int `json:"attempt,omitempty"`
	// Branch is the approval branch to merge (see ApprovalBranch).
	Branch string `json:"branch,omitempty"`
	// PullRequestURL is set when a forge pull request was opened.
	PullRequestURL string `json:"pullRequestURL,omitempty"`
	// Since is when the gate opened.
	Since time.Time `json:"since,omitzero"`
}

// Measurement is one analysis result.
type Measurement struct {
	// Name is the metric (or template/metric) name.
	Name string `json:"name"`
	// Phase is Successful, Failed, Inconclusive or Error.
	Phase string `json:"phase"`
	// Value is the measured value as text.
	Value string `json:"value,omitempty"`
	// Time is when the measurement was taken.
	Time time.Time `json:"time,omitzero"`
	// Message explains an error or failure.
	Message string `json:"message,omitempty"`
}

// GitInfo says where the Rollout is declared.
type GitInfo struct {
	// Repository is the repository URL (without credentials).
	Repository string `json:"repository,omitempty"`
	// Branch is the tracked branch.
	Branch string `json:"branch,omitempty"`
	// Path is the Rollout manifest path.
	Path string `json:"path,omitempty"`
	// Revision is the commit of the tracked branch last observed.
	Revision string `json:"revision,omitempty"`
}

// key is "<namespace>/<name>".
func (s RolloutState) key() string { return s.Namespace + "/" + s.Name }

// statusDoc is the on-disk form: identity fields, then the state inline.
type statusDoc struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	RolloutState
}

// StatusPath returns the path of a Rollout's status file under prefix.
func StatusPath(prefix, namespace, name string) string {
	return path.Join(prefix, namespace, name+".yaml")
}

// normalize returns s with times in UTC at second precision and at most
// maxMeasurements (newest) measurements, so rendering is deterministic.
func (s RolloutState) normalize(maxMeasurements int) RolloutState {
	t := func(x time.Time) time.Time {
		if x.IsZero() {
			return x
		}
		return x.UTC().Truncate(time.Second)
	}
	s.LastTransitionTime = t(s.LastTransitionTime)
	if s.AwaitingApproval != nil {
		a := *s.AwaitingApproval
		a.Since = t(a.Since)
		s.AwaitingApproval = &a
	}
	if maxMeasurements > 0 && len(s.Analysis) > maxMeasurements {
		s.Analysis = s.Analysis[len(s.Analysis)-maxMeasurements:]
	}
	ms := make([]Measurement, len(s.Analysis))
	for i, m := range s.Analysis {
		m.Time = t(m.Time)
		ms[i] = m
	}
	if len(ms) == 0 {
		ms = nil
	}
	s.Analysis = ms
	return s
}

// RenderStatus returns the YAML status file of s. The output depends only
// on s, so an unchanged state renders byte-identical files. Fields appear in
// declaration order (identity, phase, step, versions, ...), for people
// reading the file.
func RenderStatus(s RolloutState) ([]byte, error) {
	js, err := json.Marshal(statusDoc{APIVersion: StatusAPIVersion, Kind: StatusKind, RolloutState: s.normalize(0)})
	if err != nil {
		return nil, err
	}
	// JSON is YAML: parsing it keeps the key order; then drop the JSON
	// quoting and flow style so the encoder writes plain block YAML.
	var doc kyaml.Node
	if err := kyaml.Unmarshal(js, &doc); err != nil {
		return nil, err
	}
	plainStyle(&doc)
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Progress of Rollout %s, written by rollgate.\n", s.key())
	b.WriteString("# Do not edit: the controller overwrites this file.\n")
	enc := kyaml.NewEncoder(&b)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// plainStyle clears the style of n and its descendants, quoting only the
// strings that would otherwise read as something else.
func plainStyle(n *kyaml.Node) {
	n.Style = 0
	if n.Kind == kyaml.ScalarNode && n.Tag == "!!str" && !readsAsString(n.Value) {
		n.Style = kyaml.DoubleQuotedStyle
	}
	for _, c := range n.Content {
		plainStyle(c)
	}
}

// ParseStatus parses a status file. It reports ok=false for YAML that is
// not a status file (another apiVersion or kind).
func ParseStatus(data []byte) (state RolloutState, ok bool, err error) {
	var doc statusDoc
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return RolloutState{}, false, fmt.Errorf("%w: %v", ErrInvalidManifest, err)
	}
	if doc.APIVersion != StatusAPIVersion || doc.Kind != StatusKind {
		return RolloutState{}, false, nil
	}
	return doc.RolloutState, true, nil
}

// overviewTitle starts every overview; the Writer only overwrites a
// README.md that starts with it.
const overviewTitle = "# Rollout status\n\n"

// RenderOverview returns the README.md overview of states (any order).
func RenderOverview(states []RolloutState) []byte {
	sorted := append([]RolloutState(nil), states...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].key() < sorted[j].key() })
	var b bytes.Buffer
	b.WriteString(overviewTitle)
	b.WriteString("Written by rollgate; one file per Rollout in `<namespace>/<name>.yaml`. Do not edit.\n\n")
	if len(sorted) == 0 {
		b.WriteString("No rollouts.\n")
		return b.Bytes()
	}
	b.WriteString("| Rollout | Phase | Step | Traffic (stable / canary) | Stable → canary | Updated |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	for _, s := range sorted {
		s = s.normalize(0)
		step := "-"
		if s.Step.Total > 0 {
			step = fmt.Sprintf("%d/%d", s.Step.Current, s.Step.Total)
			if s.Step.State != "" {
				step += " " + s.Step.State
			}
		}
		phase := s.Phase
		if s.AwaitingApproval != nil {
			phase += " (awaiting approval: `" + s.AwaitingApproval.Branch + "`)"
		}
		updated := "-"
		if !s.LastTransitionTime.IsZero() {
			updated = s.LastTransitionTime.Format(time.RFC3339)
		}
		fmt.Fprintf(&b, "| [%s](%s) | %s | %s | %d%% / %d%% | %s → %s | %s |\n",
			mdCell(s.key()), StatusPath("", s.Namespace, s.Name), mdCell(phase), mdCell(step),
			s.Stable.TrafficPercent, s.Canary.TrafficPercent,
			mdCell(orDash(s.Stable.Revision)), mdCell(orDash(s.Canary.Revision)), updated)
	}
	return b.Bytes()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// mdCell escapes text for a Markdown table cell.
func mdCell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.Join(strings.Fields(s), " ")
}

// ReadStatus fetches branch and returns every Rollout state written there
// (at the repository root), sorted by namespace and name. It needs nothing
// but Git: the CLI's `rollgate status --repo` uses it.
func ReadStatus(ctx context.Context, repo *Repository, branch string) ([]RolloutState, error) {
	return ReadStatusAt(ctx, repo, branch, "")
}

// ReadStatusAt is ReadStatus for status files written under prefix.
func ReadStatusAt(ctx context.Context, repo *Repository, branch, prefix string) ([]RolloutState, error) {
	snap, err := repo.Snapshot(ctx, branch)
	if err != nil {
		return nil, err
	}
	if !snap.Exists() {
		return nil, fmt.Errorf("%w: %s", ErrBranchNotFound, branch)
	}
	states, err := readStates(snap, prefix, nil)
	if err != nil {
		return nil, err
	}
	out := make([]RolloutState, 0, len(states))
	for _, s := range states {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key() < out[j].key() })
	return out, nil
}

// ClusterStates returns the status files written under root by the
// controllers of every cluster (Repository spec.status.cluster), keyed by
// "<cluster>/<namespace>/<name>". Files that are not status files are
// skipped; one that cannot be parsed is an error naming it. The snapshot
// is read, not fetched: fetch it on your own schedule.
func ClusterStates(snap *Snapshot, root string) (map[string]RolloutState, error) {
	return parseStates(snap, root, 2, nil)
}

// readStates parses the status files under prefix, keyed by namespace/name,
// except those whose "<namespace>/<name>" path skip accepts. Files that are
// not status files are skipped; a status file that cannot be parsed is an
// error naming it.
func readStates(snap *Snapshot, prefix string, skip func(key string) bool) (map[string]RolloutState, error) {
	return parseStates(snap, prefix, 1, skip)
}

// parseStates parses the status files dirs levels below prefix
// ("<namespace>/<name>.yaml" at 1, "<cluster>/<namespace>/<name>.yaml" at
// 2), keyed by "<namespace>/<name>" as the file says, after the cluster
// directory at 2, except those whose path without ".yaml" skip accepts.
func parseStates(snap *Snapshot, prefix string, dirs int, skip func(key string) bool) (map[string]RolloutState, error) {
	files, err := snap.Files(prefix)
	if err != nil {
		return nil, err
	}
	base := strings.Trim(prefix, "/")
	out := map[string]RolloutState{}
	var errs []error
	for _, f := range files {
		rel := strings.TrimPrefix(strings.TrimPrefix(f, base), "/")
		if strings.Count(rel, "/") != dirs || path.Ext(rel) != ".yaml" {
			continue
		}
		if skip != nil && skip(strings.TrimSuffix(rel, ".yaml")) {
			continue
		}
		data, err := snap.ReadFile(f)
		if err != nil {
			return nil, err
		}
		s, ok, err := ParseStatus(data)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f, err))
			continue
		}
		if !ok {
			continue
		}
		key := s.key()
		if dirs == 2 {
			cluster, _, _ := strings.Cut(rel, "/")
			key = cluster + "/" + key
		}
		out[key] = s
	}
	return out, errors.Join(errs...)
}
