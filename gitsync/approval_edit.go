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
// already there. Only the inserted text differs from the input: comments
// and formatting elsewhere are kept byte for byte.
func AddApproval(manifest []byte, namespace, name string, a Approval) (out []byte, changed bool, err error) {
	a = a.entry()
	f, err := parseYAMLFile(manifest)
	if err != nil {
		return nil, false, err
	}
	doc, err := findRollout(f, namespace, name)
	if errors.Is(err, ErrManifestNotFound) {
		if m, found, merr := findApprovalsMarker(f, namespace, name); found || merr != nil {
			if merr != nil {
				return nil, false, merr
			}
			return addMarkedApproval(manifest, f, m, a)
		}
	}
	if err != nil {
		return nil, false, err
	}
	current, err := approvalsOf(f.root(doc))
	if err != nil {
		return nil, false, err
	}
	if HasApproval(current, a) {
		return manifest, false, nil
	}
	if e, err := spliceApproval(f, f.root(doc), a); err == nil {
		out := applyEdits(manifest, []edit{e})
		if approvalEditOK(manifest, out, doc, a) {
			return out, true, nil
		}
	}
	out, err = roundTrip(manifest, func(n *yaml.RNode) error { return appendApprovalNode(n, namespace, name, a) })
	if err != nil {
		return nil, false, err
	}
	if !approvalEditOK(manifest, out, doc, a) {
		return nil, false, fmt.Errorf("%w: could not add the approval to %s/%s safely", ErrInvalidManifest, namespace, name)
	}
	return out, true, nil
}

// approvalItem is the flow mapping of a in spec.approvals.
func approvalItem(a Approval) string {
	item := fmt.Sprintf("{revision: %s, step: %d", yamlString(a.Revision), a.Step)
	if a.Attempt != 0 {
		item += fmt.Sprintf(", attempt: %d", a.Attempt)
	}
	return item + "}"
}

// spliceApproval computes the text insertion adding a to spec.approvals.
func spliceApproval(f *yamlFile, root *yaml.Node, a Approval) (edit, error) {
	nl := f.newline()
	item := approvalItem(a)
	_, spec := mapGet(root, "spec")
	if spec == nil || spec.Kind != yaml.MappingNode || spec.Style&yaml.FlowStyle != 0 || len(spec.Content) == 0 {
		return edit{}, fmt.Errorf("spec is not a block mapping")
	}
	key, seq := mapGet(spec, "approvals")
	if key == nil {
		at, lead := f.insertAfter(lastLine(spec))
		indent := strings.Repeat(" ", spec.Column-1)
		text := lead + indent + "approvals:" + nl + indent + strings.Repeat(" ", f.seqIndent()) + "- " + item + nl
		return edit{start: at, end: at, text: text}, nil
	}
	return f.appendItemEdit(key, seq, item)
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
// held before (as they were, approvedBy and all) followed by a.
func approvalEditOK(before, after []byte, doc int, a Approval) bool {
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
	want := append(append([]any(nil), had...), approvalData(a))
	if specA == nil || !reflect.DeepEqual(specA["approvals"], want) {
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
// round-trip fallback); other resources are left alone.
func appendApprovalNode(n *yaml.RNode, namespace, name string, a Approval) error {
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
	seq.Value.YNode().Content = append(seq.Value.YNode().Content, item.YNode())
	return nil
}
