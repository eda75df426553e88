package gitsync

import (
	"fmt"
	"slices"
	"strings"

	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// Pruning approvals. Every gate of every release adds an entry to
// spec.approvals, and the CRD caps the list at MaxApprovals entries: left
// alone, the approval that crosses the cap makes the manifest invalid, and
// the GitOps tool stops applying it (and Flux everything in its
// Kustomization). So an approval edit that is told the Rollout's live
// revisions (its stable revision and the canary revision being released)
// removes, in the same commit, every entry that can no longer open a gate:
//
//   - an entry of a revision that is neither the stable nor the canary one;
//   - an entry of the canary revision for an earlier attempt than the one
//     approved (after spec.retry each attempt is approved anew).
//
// Every other entry stays as it is, byte for byte, and so do the comments
// on their own lines around the removed ones. The list then holds at most
// the gated steps of the release under way (its current attempt) and the
// entries of the stable revision: with at most 50 steps, at most 100.
//
// Signed approvals (ApprovalVerifier) are not affected: signatures are on
// commits, not entries, and an approval is judged by the commit that
// brought it to the tracked branch, found by walking back to the first
// commit whose parent lacks it. Pruning never touches an entry of the
// live release, so that walk ends at the same commit as before; only
// entries that can open no gate any more, and are never judged, go.

// MaxApprovals is the most entries spec.approvals may hold (the CRD's
// maxItems).
const MaxApprovals = 100

// keepsApproval reports whether an edit adding approval a keeps entry e,
// for a Rollout whose live revisions are live. Without live revisions
// nothing is removed. a.Revision, the canary revision, is always live.
func keepsApproval(e, a Approval, live []string) bool {
	if len(live) == 0 {
		return true
	}
	if e.Revision == a.Revision {
		return max(e.Attempt, 1) >= max(a.Attempt, 1)
	}
	return e.Revision != "" && slices.Contains(live, e.Revision)
}

// prunedItems returns, for each entry of current, whether the edit adding
// a removes it; nil when it removes none.
func prunedItems(current []Approval, a Approval, live []string) []bool {
	var drop []bool
	for i, e := range current {
		if keepsApproval(e, a, live) {
			continue
		}
		if drop == nil {
			drop = make([]bool, len(current))
		}
		drop[i] = true
	}
	return drop
}

// removedBy returns the entries of current that drop marks.
func removedBy(current []Approval, drop []bool) []Approval {
	var out []Approval
	for i, d := range drop {
		if d {
			out = append(out, current[i])
		}
	}
	return out
}

// listEdits computes the text edits that append item to the sequence seq
// (the value of key) and remove the items drop marks. Comment and blank
// lines between items stay, except the blank lines right after a removed
// item (so removing the first of two items separated by a blank line does
// not leave the list starting with one).
func (f *yamlFile) listEdits(key, seq *yaml.Node, drop []bool, item string) ([]edit, error) {
	if drop == nil {
		e, err := f.appendItemEdit(key, seq, item)
		return []edit{e}, err
	}
	if seq.Kind != yaml.SequenceNode || len(drop) != len(seq.Content) {
		return nil, fmt.Errorf("the approvals list changed under the edit")
	}
	if seq.Style&yaml.FlowStyle != 0 {
		e, err := f.flowListEdit(seq, drop, item)
		return []edit{e}, err
	}
	return f.blockListEdits(seq, drop, item)
}

// blockListEdits removes the dropped items of a block sequence, each one
// the whole lines from its "- " to its last line, and appends item. When
// the last item goes, item takes its place.
func (f *yamlFile) blockListEdits(seq *yaml.Node, drop []bool, item string) ([]edit, error) {
	line := strings.Repeat(" ", seq.Column-1) + "- " + item + f.newline()
	var edits []edit
	for i, it := range seq.Content {
		if !drop[i] {
			continue
		}
		start := f.offset(it.Line, 1)
		if lead := strings.TrimSpace(string(f.src[start:f.offset(it.Line, it.Column)])); lead != "-" {
			return nil, fmt.Errorf("approvals item at line %d does not start its line", it.Line)
		}
		last := lastLine(it)
		if i == len(seq.Content)-1 {
			return append(edits, edit{start: start, end: f.lineEnd(last), text: line}), nil
		}
		for next := seq.Content[i+1].Line; last+1 < next && f.blankLine(last+1); last++ {
		}
		edits = append(edits, edit{start: start, end: f.lineEnd(last)})
	}
	at, lead := f.insertAfter(lastLine(seq))
	return append(edits, edit{start: at, end: at, text: lead + line}), nil
}

// flowListEdit rewrites a single-line flow sequence of flow mappings as
// the kept items, in their own text, followed by item.
func (f *yamlFile) flowListEdit(seq *yaml.Node, drop []bool, item string) (edit, error) {
	end, err := f.flowEnd(seq)
	if err != nil {
		return edit{}, err
	}
	var kept []string
	for i, it := range seq.Content {
		if drop[i] {
			continue
		}
		if it.Kind != yaml.MappingNode || it.Style&yaml.FlowStyle == 0 || it.Line != seq.Line {
			return edit{}, fmt.Errorf("approvals item at line %d is not a flow mapping on the list's line", it.Line)
		}
		itemEnd, err := f.flowEnd(it)
		if err != nil {
			return edit{}, err
		}
		kept = append(kept, string(f.src[f.offset(it.Line, it.Column):itemEnd+1]))
	}
	text := "[" + strings.Join(append(kept, item), ", ") + "]"
	return edit{start: f.offset(seq.Line, seq.Column), end: end + 1, text: text}, nil
}

// blankLine reports whether line holds only white space.
func (f *yamlFile) blankLine(line int) bool {
	if line < 1 || line > len(f.lines) {
		return false
	}
	return strings.TrimSpace(string(f.src[f.lines[line-1]:f.lineEnd(line)])) == ""
}

// keptData returns the decoded items of a list that survive drop, followed
// by a, as decodeDocs reads the edited list back.
func keptData(had []any, drop []bool, a Approval) ([]any, bool) {
	if drop != nil && len(drop) != len(had) {
		return nil, false
	}
	want := make([]any, 0, len(had)+1)
	for i, x := range had {
		if drop == nil || !drop[i] {
			want = append(want, x)
		}
	}
	return append(want, approvalData(a)), true
}

// pruneNote says in a commit message which entries an approval removed.
func pruneNote(removed []Approval) string {
	if len(removed) == 0 {
		return ""
	}
	const shown = 10
	names := make([]string, 0, min(len(removed), shown))
	for _, r := range removed[:min(len(removed), shown)] {
		names = append(names, fmt.Sprintf("%s %s", r.Revision, r.what()))
	}
	list := strings.Join(names, ", ")
	if more := len(removed) - shown; more > 0 {
		list += fmt.Sprintf(" and %d more", more)
	}
	entries := "entries"
	if len(removed) == 1 {
		entries = "entry"
	}
	return fmt.Sprintf("Removes %d %s that can no longer open a gate (a revision that is\nneither stable nor canary, or an earlier attempt): %s.\n",
		len(removed), entries, list)
}
