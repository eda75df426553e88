package gitsync

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// AddApproval returns manifest with a appended to spec.approvals of the
// Rollout namespace/name (creating the list when absent), as
// {revision, step}, with attempt only from attempt 2 on. It reports
// changed=false, and returns manifest unchanged, when the approval is
// already there. Only the inserted (and removed) text differs from the
// input: comments and formatting elsewhere are kept byte for byte.
//
// live names the Rollout's live revisions: its stable revision and its
// canary revision (a.Revision, which is live in any case). Given any, the
// same edit removes the entries that can no longer open a gate: those of
// every other revision, and those of an earlier attempt of a.Revision (see
// MaxApprovals). The entries kept are left as they were, and so are the
// comment lines around the removed ones. Given none, nothing is removed.
func AddApproval(manifest []byte, namespace, name string, a Approval, live ...string) (out []byte, changed bool, err error) {
	e, err := editApprovals(manifest, namespace, name, a, live)
	if err != nil {
		return nil, false, err
	}
	return e.out, e.changed, nil
}

// approvalEdit is the outcome of adding one approval to a file.
type approvalEdit struct {
	out     []byte
	changed bool
	removed []Approval // the entries pruned
}

// editApprovals adds a to the approvals of the Rollout namespace/name in
// manifest (its spec.approvals, or the list marked for it), pruning
// against live (see AddApproval).
func editApprovals(manifest []byte, namespace, name string, a Approval, live []string) (approvalEdit, error) {
	a = a.entry()
	f, err := parseYAMLFile(manifest)
	if err != nil {
		return approvalEdit{}, err
	}
	doc, err := findRollout(f, namespace, name)
	if errors.Is(err, ErrManifestNotFound) {
		if m, found, merr := findApprovalsMarker(f, namespace, name); found || merr != nil {
			if merr != nil {
				return approvalEdit{}, merr
			}
			return addMarkedApproval(manifest, f, m, a, live)
		}
	}
	if err != nil {
		return approvalEdit{}, err
	}
	current, err := approvalsOf(f.root(doc))
	if err != nil {
		return approvalEdit{}, err
	}
	if HasApproval(current, a) {
		return approvalEdit{out: manifest}, nil
	}
	drop := prunedItems(current, a, live)
	done := approvalEdit{changed: true, removed: removedBy(current, drop)}
	if edits, err := spliceApproval(f, f.root(doc), a, drop); err == nil {
		out := applyEdits(manifest, edits)
		if approvalEditOK(manifest, out, doc, drop, a) {
			done.out = out
			return done, nil
		}
	}
	out, err := roundTrip(manifest, func(n *yaml.RNode) error { return appendApprovalNode(n, namespace, name, a, drop) })
	if err != nil {
		return approvalEdit{}, err
	}
	if !approvalEditOK(manifest, out, doc, drop, a) {
		return approvalEdit{}, fmt.Errorf("%w: could not add the approval to %s/%s safely", ErrInvalidManifest, namespace, name)
	}
	done.out = out
	return done, nil
}

// approvalItem is the flow mapping of a in spec.approvals.
func approvalItem(a Approval) string {
	item := fmt.Sprintf("{revision: %s, step: %d", yamlString(a.Revision), a.Step)
	if a.Attempt != 0 {
		item += fmt.Sprintf(", attempt: %d", a.Attempt)
	}
	return item + "}"
}

// spliceApproval computes the text edits adding a to spec.approvals and
// removing the entries drop marks.
func spliceApproval(f *yamlFile, root *yaml.Node, a Approval, drop []bool) ([]edit, error) {
	nl := f.newline()
	item := approvalItem(a)
	_, spec := mapGet(root, "spec")
	if spec == nil || spec.Kind != yaml.MappingNode || spec.Style&yaml.FlowStyle != 0 || len(spec.Content) == 0 {
		return nil, fmt.Errorf("spec is not a block mapping")
	}
	key, seq := mapGet(spec, "approvals")
	if key == nil {
		at, lead := f.insertAfter(lastLine(spec))
		indent := strings.Repeat(" ", spec.Column-1)
		text := lead + indent + "approvals:" + nl + indent + strings.Repeat(" ", f.seqIndent()) + "- " + item + nl
		return []edit{{start: at, end: at, text: text}}, nil
	}
	return f.listEdits(key, seq, drop, item)
}

// appendItemEdit computes the text insertion appending item to the
// sequence seq, the value of key: a block or flow sequence, or an empty
// value.
func (f *yamlFile) appendItemEdit(key, seq *yaml.Node, item string) (edit, error) {
	nl := f.newline()
	switch {
	case seq.Kind == yaml.SequenceNode && seq.Style&yaml.FlowStyle == 0 && len(seq.Content) > 0:
		at, lead := f.insertAfter(lastLine(seq))
		return edit{start: at, end: at, text: lead + strings.Repeat(" ", seq.Column-1) + "- " + item + nl}, nil
	case seq.Kind == yaml.SequenceNode && seq.Style&yaml.FlowStyle != 0:
		end, err := f.flowEnd(seq)
		if err != nil {
			return edit{}, err
		}
		if len(seq.Content) > 0 {
			item = ", " + item
		}
		return edit{start: end, end: end, text: item}, nil
	case seq.Kind == yaml.ScalarNode && seq.Tag == "!!null" && seq.Value == "":
		at, lead := f.insertAfter(key.Line)
		indent := strings.Repeat(" ", key.Column-1+f.seqIndent())
		return edit{start: at, end: at, text: lead + indent + "- " + item + nl}, nil
	case seq.Kind == yaml.ScalarNode && seq.Tag == "!!null":
		start, end, err := f.scalarSpan(seq)
		return edit{start: start, end: end, text: "[" + item + "]"}, err
	}
	return edit{}, fmt.Errorf("the approvals list has an unexpected layout")
}

// newline returns the file's line ending.
func (f *yamlFile) newline() string {
	if bytes := f.src; len(f.lines) > 1 && f.lines[1] >= 2 && bytes[f.lines[1]-2] == '\r' {
		return "\r\n"
	}
	return "\n"
}

// insertAfter returns the offset after line and the text needed before an
// insertion there (a newline when the file does not end with one).
func (f *yamlFile) insertAfter(line int) (int, string) {
	at := f.lineEnd(line)
	if at == len(f.src) && len(f.src) > 0 && f.src[len(f.src)-1] != '\n' {
		return at, f.newline()
	}
	return at, ""
}

// flowEnd returns the offset of the closing bracket of a single-line flow
// sequence.
func (f *yamlFile) flowEnd(seq *yaml.Node) (int, error) {
	start := f.offset(seq.Line, seq.Column)
	line := f.src[start:f.lineEnd(seq.Line)]
	depth, quote := 0, byte(0)
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote != 0:
			if c == '\\' && quote == '"' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '[' || c == '{':
			depth++
		case c == ']' || c == '}':
			depth--
			if depth == 0 {
				return start + i, nil
			}
		}
	}
	return 0, fmt.Errorf("flow sequence spans lines")
}

// approvalEditOK verifies an edit: every other document is unchanged, the
// Rollout differs only in spec.approvals, which now holds the entries it
// held before that drop does not mark (as they were, approvedBy and all)
// followed by a.
func approvalEditOK(before, after []byte, doc int, drop []bool, a Approval) bool {
	b, errB := decodeDocs(before)
	x, errA := decodeDocs(after)
	if errB != nil || errA != nil || len(x) != len(b) {
		return false
	}
	for i := range b {
		if i != doc && !reflect.DeepEqual(x[i], b[i]) {
			return false
		}
	}
	ma, okA := x[doc].(map[string]any)
	mb, okB := b[doc].(map[string]any)
	if !okA || !okB {
		return false
	}
	specA, _ := ma["spec"].(map[string]any)
	specB, _ := mb["spec"].(map[string]any)
	had, _ := specB["approvals"].([]any)
	want, ok := keptData(had, drop, a)
	if !ok || specA == nil || !reflect.DeepEqual(specA["approvals"], want) {
		return false
	}
	stripApprovals(ma)
	stripApprovals(mb)
	return reflect.DeepEqual(ma, mb)
}

// stripApprovals removes spec.approvals (and a spec left empty).
func stripApprovals(m map[string]any) {
	if spec, ok := m["spec"].(map[string]any); ok {
		delete(spec, "approvals")
		if len(spec) == 0 {
			delete(m, "spec")
		}
	}
}

// approvalData is a as decodeDocs reads approvalItem(a) back.
func approvalData(a Approval) map[string]any {
	m := map[string]any{"revision": a.Revision, "step": a.Step}
	if a.Attempt != 0 {
		m["attempt"] = a.Attempt
	}
	return m
}

// appendApprovalNode adds a to the Rollout namespace/name with kyaml (the
// round-trip fallback), removing the entries drop marks; other resources
// are left alone.
func appendApprovalNode(n *yaml.RNode, namespace, name string, a Approval, drop []bool) error {
	meta, err := n.GetMeta()
	if err != nil || !strings.HasPrefix(meta.APIVersion, "rollgate.dev/") || meta.Kind != "Rollout" ||
		meta.Name != name || (meta.Namespace != "" && meta.Namespace != namespace) {
		return nil
	}
	spec, err := n.Pipe(yaml.LookupCreate(yaml.MappingNode, "spec"))
	if err != nil {
		return err
	}
	item, err := yaml.Parse(approvalItem(a))
	if err != nil {
		return err
	}
	seq := spec.Field("approvals")
	if seq == nil || seq.Value.YNode().Kind != yaml.SequenceNode {
		list := yaml.NewListRNode()
		list.YNode().Style = 0
		if err := spec.PipeE(yaml.SetField("approvals", list)); err != nil {
			return err
		}
		seq = spec.Field("approvals")
	}
	list := seq.Value.YNode()
	if drop != nil {
		if len(drop) != len(list.Content) {
			return fmt.Errorf("%w: the approvals list of %s/%s changed under the edit", ErrInvalidManifest, namespace, name)
		}
		kept := list.Content[:0:0]
		for i, it := range list.Content {
			if !drop[i] {
				kept = append(kept, it)
			}
		}
		list.Content = kept
	}
	list.Content = append(list.Content, item.YNode())
	return nil
}
