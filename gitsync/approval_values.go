package gitsync

import (
	"fmt"
	"reflect"
	"regexp"

	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// Approvals of a Rollout that a Helm chart renders. Git then holds no
// Rollout manifest, only the chart's values file; the chart renders a list
// from it into spec.approvals, and a marker comment on that list tells
// rollgate where the approvals of which Rollout go, the way setter markers
// tell a revert where the image is (see RevertImages):
//
//	rollout:
//	  approvals: []   # rollgate:approvals demo/echoserver
//
// spec.git.path of the Rollout names the values file. ApprovalsIn reads the
// marked list and AddApproval appends to it (and prunes it, as it does
// spec.approvals), so an approval branch edits the values file, and
// merging it approves the step with the same audit trail as a Rollout
// manifest.

// approvalsMarkerRE matches the marker comment: the namespace and name of
// the Rollout whose approvals the list holds.
var approvalsMarkerRE = regexp.MustCompile(`#\s*rollgate:approvals\s+([^\s/]+)/(\S+)\s*$`)

// approvalsMarker is a list of approvals marked in a YAML file.
type approvalsMarker struct {
	doc        int
	path       []string // mapping keys from the document root to the list
	key, value *yaml.Node
}

// findApprovalsMarker finds the list marked `# rollgate:approvals
// <namespace>/<name>` (the comment on the key line, or after a flow list).
// Only mappings are searched: the list must be reachable by keys. Two
// lists marked for the same Rollout are an error.
func findApprovalsMarker(f *yamlFile, namespace, name string) (approvalsMarker, bool, error) {
	var found []approvalsMarker
	var walk func(doc int, n *yaml.Node, path []string)
	walk = func(doc int, n *yaml.Node, path []string) {
		if n == nil || n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := append(append([]string(nil), path...), k.Value)
			for _, c := range []string{k.LineComment, v.LineComment} {
				if m := approvalsMarkerRE.FindStringSubmatch(c); m != nil && m[1] == namespace && m[2] == name {
					found = append(found, approvalsMarker{doc: doc, path: p, key: k, value: v})
					break
				}
			}
			walk(doc, v, p)
		}
	}
	for i := range f.docs {
		walk(i, f.root(i), nil)
	}
	switch len(found) {
	case 0:
		return approvalsMarker{}, false, nil
	case 1:
		return found[0], true, nil
	}
	return approvalsMarker{}, true, fmt.Errorf("%w: more than one list marked rollgate:approvals %s/%s", ErrInvalidManifest, namespace, name)
}

// addMarkedApproval appends a to the marked list m of manifest, removing
// the entries that live prunes (see AddApproval); only the edited list's
// text differs, and the result is verified (every other value unchanged,
// the kept entries as before followed by a).
func addMarkedApproval(manifest []byte, f *yamlFile, m approvalsMarker, a Approval, live []string) (approvalEdit, error) {
	what := "the list marked rollgate:approvals"
	current, err := decodeApprovals(m.value, what)
	if err != nil {
		return approvalEdit{}, err
	}
	if HasApproval(current, a) {
		return approvalEdit{out: manifest}, nil
	}
	drop := prunedItems(current, a, live)
	edits, err := f.listEdits(m.key, m.value, drop, approvalItem(a))
	if err != nil {
		return approvalEdit{}, fmt.Errorf("%w: %s: %v", ErrInvalidManifest, what, err)
	}
	out := applyEdits(manifest, edits)
	if !markedEditOK(manifest, out, m, drop, a) {
		return approvalEdit{}, fmt.Errorf("%w: could not add the approval to %s safely", ErrInvalidManifest, what)
	}
	return approvalEdit{out: out, changed: true, removed: removedBy(current, drop)}, nil
}

// markedEditOK verifies an edit of the marked list: before, with the
// entries drop marks removed from the list at m.path and a appended to
// it, reads exactly as after.
func markedEditOK(before, after []byte, m approvalsMarker, drop []bool, a Approval) bool {
	b, errB := decodeDocs(before)
	x, errA := decodeDocs(after)
	if errB != nil || errA != nil || len(x) != len(b) {
		return false
	}
	parent, ok := b[m.doc].(map[string]any)
	for _, k := range m.path[:len(m.path)-1] {
		if !ok {
			return false
		}
		parent, ok = parent[k].(map[string]any)
	}
	if !ok {
		return false
	}
	last := m.path[len(m.path)-1]
	had, _ := parent[last].([]any)
	if parent[last], ok = keptData(had, drop, a); !ok {
		return false
	}
	return reflect.DeepEqual(b, x)
}
