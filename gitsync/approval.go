package gitsync

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// ApprovalBranchPrefix is the common prefix of approval branches.
const ApprovalBranchPrefix = "rollgate/approve/"

// ApprovalBranch returns the branch proposing approval a of the Rollout
// namespace/name: rollgate/approve/<namespace>/<name>/<revision>-step-<step>
// for attempt 1, and .../<revision>-attempt-<attempt>-step-<step> from
// attempt 2 on, so that each attempt of a retried release has branches of
// its own. (Revisions are rollgate's hashes, which hold no "-".)
func ApprovalBranch(namespace, name string, a Approval) string {
	rev := a.Revision
	if a.Attempt > 1 {
		rev += "-attempt-" + strconv.Itoa(a.Attempt)
	}
	return fmt.Sprintf("%s%s/%s/%s-step-%d", ApprovalBranchPrefix, namespace, name, rev, a.Step)
}

// ApprovalBranchesOf returns the prefix shared by the approval branches of
// one Rollout, whatever their revision, attempt and step.
func ApprovalBranchesOf(namespace, name string) string {
	return ApprovalBranchPrefix + namespace + "/" + name + "/"
}

// ParseApprovalBranch splits an approval branch name (see ApprovalBranch)
// into its parts; the approval's Attempt is 0 for attempt 1.
func ParseApprovalBranch(branch string) (namespace, name string, a Approval, ok bool) {
	rest, found := strings.CutPrefix(branch, ApprovalBranchPrefix)
	parts := strings.Split(rest, "/")
	if !found || len(parts) != 3 {
		return "", "", Approval{}, false
	}
	rev, step, found := cutNumber(parts[2], "-step-")
	if !found || step < 1 {
		return "", "", Approval{}, false
	}
	a = Approval{Revision: rev, Step: step}
	if rev, attempt, found := cutNumber(rev, "-attempt-"); found {
		if attempt < 2 {
			return "", "", Approval{}, false
		}
		a.Revision, a.Attempt = rev, attempt
	}
	return parts[0], parts[1], a, a.Revision != ""
}

// cutNumber splits s at the last sep followed by a decimal number only.
func cutNumber(s, sep string) (before string, n int, found bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, 0, false
	}
	digits := s[i+len(sep):]
	n, err := strconv.Atoi(digits)
	if err != nil || digits == "" || digits[0] < '0' || digits[0] > '9' {
		return s, 0, false
	}
	return s[:i], n, true
}

// HasApproval reports whether approvals approve exactly the revision,
// attempt and step of want. An approval for another revision, attempt or
// step does not count: a stale approval can never release a later revision,
// nor a retry of the same one. An unset attempt means attempt 1.
func HasApproval(approvals []Approval, want Approval) bool {
	for _, a := range approvals {
		if a.Revision == want.Revision && a.Step == want.Step && max(a.Attempt, 1) == max(want.Attempt, 1) {
			return true
		}
	}
	return false
}

// ApprovalsIn returns spec.approvals of the Rollout namespace/name in a
// manifest file (which may hold several YAML documents).
func ApprovalsIn(manifest []byte, namespace, name string) ([]Approval, error) {
	f, err := parseYAMLFile(manifest)
	if err != nil {
		return nil, err
	}
	i, err := findRollout(f, namespace, name)
	if errors.Is(err, ErrManifestNotFound) {
		if m, found, merr := findApprovalsMarker(f, namespace, name); found || merr != nil {
			if merr != nil {
				return nil, merr
			}
			return decodeApprovals(m.value, "the list marked rollgate:approvals")
		}
	}
	if err != nil {
		return nil, err
	}
	return approvalsOf(f.root(i))
}

func approvalsOf(root *yaml.Node) ([]Approval, error) {
	_, spec := mapGet(root, "spec")
	_, seq := mapGet(spec, "approvals")
	return decodeApprovals(seq, "spec.approvals")
}

// decodeApprovals decodes a list of approvals (nil or null: none); what
// names the list in errors.
func decodeApprovals(seq *yaml.Node, what string) ([]Approval, error) {
	if seq == nil || (seq.Kind == yaml.ScalarNode && seq.Tag == "!!null") {
		return nil, nil
	}
	var out []Approval
	if err := seq.Decode(&out); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalidManifest, what, err)
	}
	return out, nil
}

// Proposal describes an approval branch after ProposeApproval.
type Proposal struct {
	// Branch is the approval branch (see ApprovalBranch).
	Branch string
	// Commit is the head of Branch; "" when AlreadyApproved.
	Commit string
	// Pushed reports whether this call created or replaced Branch.
	Pushed bool
	// AlreadyApproved reports that the tracked branch already holds the
	// approval (the proposal was merged, or approved directly): no branch
	// is needed.
	AlreadyApproved bool
}

// ProposeApproval creates or refreshes the approval branch for approval a
// of Rollout namespace/name: one commit on top of the head of trackedBranch
// that appends a to spec.approvals in the manifest at manifestPath, as
// {revision, step} for attempt 1 and {revision, step, attempt} from attempt
// 2 on. Merging the branch is the approval. It is idempotent: an existing
// branch that already carries the approval is left as is, and nothing is
// pushed when trackedBranch already has it. by names who or what asked for
// approval, for the commit message. ErrManifestNotFound means the file holds
// no such Rollout.
//
// live names the Rollout's stable and canary revisions. Given them, the
// commit also removes the entries that can no longer open a gate (see
// AddApproval), so that merging approval after approval keeps the list
// within what the release under way needs, and a list grown past
// MaxApprovals comes back under it. An existing branch is then reused only
// when it holds nothing to remove.
func ProposeApproval(ctx context.Context, repo *Repository, trackedBranch, manifestPath, namespace, name string, a Approval, by string, live ...string) (Proposal, error) {
	a = a.entry()
	p := Proposal{Branch: ApprovalBranch(namespace, name, a)}
	tracked, err := ApprovalsOnBranch(ctx, repo, trackedBranch, manifestPath, namespace, name)
	if err != nil {
		return p, err
	}
	if HasApproval(tracked, a) {
		p.AlreadyApproved = true
		return p, nil
	}
	existing, err := repo.Snapshot(ctx, p.Branch)
	if err != nil {
		return p, err
	}
	if existing.Exists() {
		if data, err := existing.ReadFile(manifestPath); err == nil {
			if as, err := ApprovalsIn(data, namespace, name); err == nil && HasApproval(as, a) && prunedItems(as, a, live) == nil {
				p.Commit = existing.Commit
				return p, nil
			}
		}
	}
	note := "Merging this change approves the step; rollgate then continues the rollout."
	res, err := repo.Update(ctx, UpdateRequest{Branch: p.Branch, From: trackedBranch}, approvalBuild(manifestPath, namespace, name, a, live, by, note))
	if err != nil {
		return p, fmt.Errorf("proposing approval of %s/%s %s: %w", namespace, name, a.what(), err)
	}
	if len(res.Changed) == 0 {
		p.AlreadyApproved = true
		return p, nil
	}
	p.Commit, p.Pushed = res.Commit, true
	return p, nil
}

// RecordApproval commits approval a straight to trackedBranch (for
// `rollgate approve --direct`), retrying on concurrent pushes. It returns
// the commit holding the approval (the current head when it was already
// there). live prunes the list as for ProposeApproval.
func RecordApproval(ctx context.Context, repo *Repository, trackedBranch, manifestPath, namespace, name string, a Approval, by string, live ...string) (string, error) {
	a = a.entry()
	note := "Recorded directly on the tracked branch."
	res, err := repo.Update(ctx, UpdateRequest{Branch: trackedBranch}, approvalBuild(manifestPath, namespace, name, a, live, by, note))
	if err != nil {
		return "", fmt.Errorf("recording approval of %s/%s %s: %w", namespace, name, a.what(), err)
	}
	return res.Commit, nil
}

// entry is a as written to spec.approvals: attempt 1 is left out, so the
// common approval stays {revision, step}.
func (a Approval) entry() Approval {
	if a.Attempt <= 1 {
		a.Attempt = 0
	}
	return a
}

// what names the approved step for messages: "step 2", or "attempt 3
// step 2" from attempt 2 on.
func (a Approval) what() string {
	if a.Attempt > 1 {
		return fmt.Sprintf("attempt %d step %d", a.Attempt, a.Step)
	}
	return fmt.Sprintf("step %d", a.Step)
}

// approvalBuild returns the BuildFunc adding a to the manifest, pruning
// against live; by and note go into the commit message.
func approvalBuild(manifestPath, namespace, name string, a Approval, live []string, by, note string) BuildFunc {
	return func(base *Snapshot) (*Change, error) {
		data, err := base.ReadFile(manifestPath)
		if err != nil {
			return nil, err
		}
		e, err := editApprovals(data, namespace, name, a, live)
		if err != nil || !e.changed {
			return nil, err
		}
		msg := approvalMessage("Approve", namespace, name, a, manifestPath, by, note, e.removed)
		return &Change{Files: map[string][]byte{manifestPath: e.out}, Message: msg}, nil
	}
}

// approvalMessage is the commit message of an approval that removed the
// entries removed.
func approvalMessage(verb, namespace, name string, a Approval, path, by, note string, removed []Approval) string {
	var b strings.Builder
	fmt.Fprintf(&b, "rollgate: %s %s/%s revision %s %s\n\n", strings.ToLower(verb), namespace, name, a.Revision, a.what())
	fmt.Fprintf(&b, "Adds %s to spec.approvals of Rollout %s/%s\nin %s. %s\n",
		approvalItem(a), namespace, name, path, note)
	if n := pruneNote(removed); n != "" {
		b.WriteString("\n" + n)
	}
	if by = strings.Join(strings.Fields(by), " "); by != "" {
		fmt.Fprintf(&b, "\nRequested-by: %s\n", by)
	}
	return b.String()
}

// ApprovalsOnBranch returns spec.approvals of the Rollout namespace/name as
// declared at the head of branch, so a merged approval is seen before the
// GitOps tool applies it.
func ApprovalsOnBranch(ctx context.Context, repo *Repository, branch, manifestPath, namespace, name string) ([]Approval, error) {
	data, err := repo.ReadFile(ctx, branch, manifestPath)
	if err != nil {
		return nil, err
	}
	as, err := ApprovalsIn(data, namespace, name)
	if err != nil {
		return nil, fmt.Errorf("%s at %s: %w", manifestPath, branch, err)
	}
	return as, nil
}

// CleanupApprovalBranches deletes the approval branches of Rollout
// namespace/name for which keep returns false, and returns their names.
// A nil keep deletes them all.
func CleanupApprovalBranches(ctx context.Context, repo *Repository, namespace, name string, keep func(branch string) bool) ([]string, error) {
	branches, err := repo.Branches(ctx, ApprovalBranchesOf(namespace, name))
	if err != nil {
		return nil, err
	}
	var stale []string
	for b := range branches {
		if keep == nil || !keep(b) {
			stale = append(stale, b)
		}
	}
	sort.Strings(stale)
	if err := repo.DeleteBranches(ctx, stale...); err != nil {
		return nil, err
	}
	return stale, nil
}
