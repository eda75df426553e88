package gitsync

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"

	"sigs.k8s.io/kustomize/kyaml/yaml"
	sigsyaml "sigs.k8s.io/yaml"
)

// YAML edits work in two layers. kyaml parses the file (every document, with
// positions) to find the nodes to change; the change is then spliced into
// the original bytes, so everything else (comments, blank lines, quoting,
// indentation, other documents) stays byte-identical and a pull request
// shows only the lines that matter. Every splice is verified by parsing the
// result and comparing it with the intended data; when a layout is too
// unusual to splice safely, the edit falls back to a kyaml round trip of the
// file, which keeps comments but may normalize layout.

// yamlFile is a parsed multi-document YAML file.
type yamlFile struct {
	src   []byte
	docs  []*yaml.Node // document nodes; Content[0] is the root
	lines []int        // byte offset of the start of each line (index 0 = line 1)
}

func parseYAMLFile(src []byte) (*yamlFile, error) {
	f := &yamlFile{src: src, lines: []int{0}}
	for i, b := range src {
		if b == '\n' {
			f.lines = append(f.lines, i+1)
		}
	}
	dec := yaml.NewDecoder(bytes.NewReader(src))
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return f, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidManifest, err)
		}
		f.docs = append(f.docs, &n)
	}
}

// offset converts a 1-based line and rune column to a byte offset.
func (f *yamlFile) offset(line, col int) int {
	if line < 1 {
		return 0
	}
	if line > len(f.lines) {
		return len(f.src)
	}
	off := f.lines[line-1]
	for i := 1; i < col && off < len(f.src) && f.src[off] != '\n'; i++ {
		_, size := utf8.DecodeRune(f.src[off:])
		off += size
	}
	return off
}

// lineEnd returns the offset just after the newline ending line (or the
// end of the file).
func (f *yamlFile) lineEnd(line int) int {
	if line >= len(f.lines) {
		return len(f.src)
	}
	return f.lines[line]
}

// root returns the root node of document i.
func (f *yamlFile) root(i int) *yaml.Node {
	d := f.docs[i]
	if d.Kind == yaml.DocumentNode && len(d.Content) > 0 {
		return d.Content[0]
	}
	return d
}

// mapGet returns the key and value nodes of key in mapping m, or nils
// (kyaml's RNode.Field).
func mapGet(m *yaml.Node, key string) (*yaml.Node, *yaml.Node) {
	if f := yaml.NewRNode(m).Field(key); f != nil {
		return f.Key.YNode(), f.Value.YNode()
	}
	return nil, nil
}

func scalarAt(m *yaml.Node, keys ...string) string {
	n := m
	for _, k := range keys {
		_, n = mapGet(n, k)
	}
	if n == nil || n.Kind != yaml.ScalarNode {
		return ""
	}
	return n.Value
}

// lastLine returns the last source line a block node occupies.
func lastLine(n *yaml.Node) int {
	last := n.Line
	if n.Kind == yaml.ScalarNode && (n.Style&(yaml.LiteralStyle|yaml.FoldedStyle)) != 0 {
		last += strings.Count(strings.TrimSuffix(n.Value, "\n"), "\n") + 1
	}
	for _, c := range n.Content {
		last = max(last, lastLine(c))
	}
	return last
}

// findRollout returns the index of the document holding the Rollout
// (apiVersion rollgate.dev/*) named name; a namespace set in the document
// must equal namespace.
func findRollout(f *yamlFile, namespace, name string) (int, error) {
	found := -1
	for i := range f.docs {
		r := f.root(i)
		if !strings.HasPrefix(scalarAt(r, "apiVersion"), "rollgate.dev/") || scalarAt(r, "kind") != "Rollout" ||
			scalarAt(r, "metadata", "name") != name {
			continue
		}
		if ns := scalarAt(r, "metadata", "namespace"); ns != "" && ns != namespace {
			continue
		}
		if found >= 0 {
			return -1, fmt.Errorf("%w: more than one Rollout %s/%s in the file", ErrInvalidManifest, namespace, name)
		}
		found = i
	}
	if found < 0 {
		return -1, fmt.Errorf("%w: no Rollout %s/%s", ErrManifestNotFound, namespace, name)
	}
	return found, nil
}

// edit replaces src[start:end] with text.
type edit struct {
	start, end int
	text       string
}

func applyEdits(src []byte, edits []edit) []byte {
	sort.Slice(edits, func(i, j int) bool { return edits[i].start > edits[j].start })
	out := append([]byte(nil), src...)
	for _, e := range edits {
		out = append(out[:e.start], append([]byte(e.text), out[e.end:]...)...)
	}
	return out
}

// plainSafe matches strings that can stay unquoted when they resolve to a
// YAML string.
var plainSafe = regexp.MustCompile(`^[A-Za-z0-9_./-][A-Za-z0-9_./:@+-]*$`)

// yamlString renders s as a YAML scalar that reads back as the string s:
// plain when unambiguous, double-quoted otherwise.
func yamlString(s string) string {
	if plainSafe.MatchString(s) && !strings.Contains(s, ": ") && !strings.HasSuffix(s, ":") && readsAsString(s) {
		return s
	}
	b, _ := json.Marshal(s)
	return string(b)
}

// readsAsString reports whether the plain scalar s reads back as the string
// s under both YAML 1.2 (yaml.v3, kyaml) and YAML 1.1 (sigs.k8s.io/yaml, as
// used by kubectl, Flux and Argo CD, where y, no, on ... are booleans).
func readsAsString(s string) bool {
	if s == "" {
		return false
	}
	if c := s[0]; (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') && plainSafe.MatchString(s) {
		// Starting with a letter, only booleans and null are not strings.
		switch strings.ToLower(s) {
		case "y", "yes", "n", "no", "true", "false", "on", "off", "null":
			return false
		}
		return true
	}
	var v3 any
	if err := yaml.Unmarshal([]byte(s), &v3); err != nil || v3 != s {
		return false
	}
	var v1 any
	if err := sigsyaml.Unmarshal([]byte(s), &v1); err != nil || v1 != s {
		return false
	}
	return true
}

// scalarSpan returns the byte span of a single-line scalar's source token.
func (f *yamlFile) scalarSpan(n *yaml.Node) (int, int, error) {
	start := f.offset(n.Line, n.Column)
	lineEnd := f.lineEnd(n.Line)
	line := f.src[start:lineEnd]
	switch n.Style {
	case 0, yaml.TaggedStyle:
		if !bytes.HasPrefix(line, []byte(n.Value)) {
			return 0, 0, fmt.Errorf("%w: multi-line scalar at line %d", ErrInvalidManifest, n.Line)
		}
		return start, start + len(n.Value), nil
	case yaml.DoubleQuotedStyle:
		for i := 1; i < len(line); i++ {
			switch line[i] {
			case '\\':
				i++
			case '"':
				return start, start + i + 1, nil
			}
		}
	case yaml.SingleQuotedStyle:
		for i := 1; i < len(line); i++ {
			if line[i] == '\'' {
				if i+1 < len(line) && line[i+1] == '\'' {
					i++
					continue
				}
				return start, start + i + 1, nil
			}
		}
	}
	return 0, 0, fmt.Errorf("%w: cannot edit the scalar at line %d in place", ErrInvalidManifest, n.Line)
}

// setScalarEdit returns the edit that sets scalar n to value, keeping its
// quoting style where possible.
func (f *yamlFile) setScalarEdit(n *yaml.Node, value string) (edit, error) {
	start, end, err := f.scalarSpan(n)
	if err != nil {
		return edit{}, err
	}
	text := yamlString(value)
	switch n.Style {
	case yaml.DoubleQuotedStyle:
		b, _ := json.Marshal(value)
		text = string(b)
	case yaml.SingleQuotedStyle:
		text = "'" + strings.ReplaceAll(value, "'", "''") + "'"
	}
	return edit{start: start, end: end, text: text}, nil
}

// decodeDocs decodes every document of src into plain Go values.
func decodeDocs(src []byte) ([]any, error) {
	f, err := parseYAMLFile(src)
	if err != nil {
		return nil, err
	}
	out := make([]any, len(f.docs))
	for i, d := range f.docs {
		if err := d.Decode(&out[i]); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidManifest, err)
		}
	}
	return out, nil
}

// sameData reports whether two files hold the same data in every document.
func sameData(a, b []byte) bool {
	da, errA := decodeDocs(a)
	db, errB := decodeDocs(b)
	return errA == nil && errB == nil && reflect.DeepEqual(da, db)
}

// roundTrip applies fn to every document of src with kyaml and re-encodes
// the file. Comments survive; layout may be normalized. It is the fallback
// for layouts the splice editor does not handle.
func roundTrip(src []byte, fn func(*yaml.RNode) error) ([]byte, error) {
	f, err := parseYAMLFile(src)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	for i, d := range f.docs {
		n := yaml.NewRNode(f.root(i))
		if err := fn(n); err != nil {
			return nil, err
		}
		if i > 0 {
			out.WriteString("---\n")
		}
		enc := yaml.NewEncoder(&out)
		if f.seqIndent() > 0 {
			enc.DefaultSeqIndent()
		}
		if err := enc.Encode(d); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidManifest, err)
		}
		if err := enc.Close(); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidManifest, err)
		}
	}
	return out.Bytes(), nil
}

// seqIndent returns the indentation of block sequences relative to their
// key in this file: 0 ("key:\n- a", kubectl style) or 2 ("key:\n  - a").
func (f *yamlFile) seqIndent() int {
	var walk func(n *yaml.Node) int
	walk = func(n *yaml.Node) int {
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				if v.Kind == yaml.SequenceNode && v.Style&yaml.FlowStyle == 0 && v.Line > k.Line {
					return v.Column - k.Column
				}
			}
		}
		for _, c := range n.Content {
			if d := walk(c); d >= 0 {
				return d
			}
		}
		return -1
	}
	for i := range f.docs {
		if d := walk(f.root(i)); d >= 0 {
			return d
		}
	}
	return 0
}

// insertKeyEdit adds "key: value" as the last entry of a block mapping.
func (f *yamlFile) insertKeyEdit(m *yaml.Node, key, value string) (edit, error) {
	if m.Kind != yaml.MappingNode || m.Style&yaml.FlowStyle != 0 || len(m.Content) == 0 {
		return edit{}, fmt.Errorf("%w: cannot add %q to a flow or empty mapping in place", ErrInvalidManifest, key)
	}
	at, lead := f.insertAfter(lastLine(m))
	text := lead + strings.Repeat(" ", m.Column-1) + key + ": " + value + f.newline()
	return edit{start: at, end: at, text: text}, nil
}

// deleteKeyEdit removes the line holding key k (and its scalar value) from
// block mapping m. The key must be alone on its line.
func (f *yamlFile) deleteKeyEdit(m *yaml.Node, k *yaml.Node) (edit, error) {
	var v *yaml.Node
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i] == k {
			v = m.Content[i+1]
		}
	}
	start := f.offset(k.Line, 1)
	keyStart := f.offset(k.Line, k.Column)
	if m.Style&yaml.FlowStyle != 0 || v == nil || v.Kind != yaml.ScalarNode || lastLine(v) != k.Line ||
		strings.TrimSpace(string(f.src[start:keyStart])) != "" {
		return edit{}, fmt.Errorf("%w: cannot remove %q in place", ErrInvalidManifest, k.Value)
	}
	return edit{start: start, end: f.lineEnd(k.Line), text: ""}, nil
}
