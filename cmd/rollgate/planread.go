package main

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
	"sigs.k8s.io/yaml"
)

// planSource is one thing `rollgate plan` reads: a YAML file read as it
// is, a folder rendered by kustomize, a Helm chart rendered by Helm, or
// standard input ("-").
type planSource struct {
	path      string
	kustomize bool
	chart     bool
}

// planSources sorts the arguments into what is read. A folder holding a
// kustomization file is rendered, and so is the folder of a file given
// that sits next to one. Other folders are walked as Flux does for a path
// without a kustomization file: their .yaml and .yml files are read as
// they are, and each folder below that holds a kustomization file is
// rendered as a whole (its files are not read again). Hidden folders are
// skipped. A folder holding a Chart.yaml is rendered by Helm, and so is
// the chart above a file given. A folder is rendered once however often it
// is named.
func planSources(args []string) ([]planSource, error) {
	var out []planSource
	rendered := map[string]bool{}
	add := func(s planSource) {
		if s.path = filepath.Clean(s.path); !rendered[s.path] {
			rendered[s.path] = true
			out = append(out, s)
		}
	}
	render := func(dir string) { add(planSource{path: dir, kustomize: true}) }
	chart := func(dir string) { add(planSource{path: dir, chart: true}) }
	for _, a := range args {
		if a == "-" {
			out = append(out, planSource{path: a})
			continue
		}
		st, err := os.Stat(a)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			if dir := filepath.Dir(a); kustomizationFile(filesys.MakeFsOnDisk(), dir) != "" {
				render(dir)
			} else if c := chartAbove(a); c != "" {
				chart(c)
			} else {
				out = append(out, planSource{path: a})
			}
			continue
		}
		err = filepath.WalkDir(a, func(p string, d fs.DirEntry, err error) error {
			switch {
			case err != nil:
				return err
			case d.IsDir() && p != a && strings.HasPrefix(d.Name(), "."):
				return filepath.SkipDir
			case d.IsDir() && kustomizationFile(filesys.MakeFsOnDisk(), p) != "":
				render(p)
				return filepath.SkipDir
			case d.IsDir() && isChart(p):
				chart(p)
				return filepath.SkipDir
			case !d.IsDir() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")):
				out = append(out, planSource{path: p})
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// readManifests reads every source; objects without a namespace get
// namespace. Objects read from a file are named by file:line, rendered
// ones by the folder rendered.
func readManifests(stdin io.Reader, sources []planSource, namespace string, helm helmOptions) (*manifestSet, error) {
	set := &manifestSet{}
	for _, s := range sources {
		switch {
		case s.chart:
			files, err := helmTemplateDir(s.path, helm)
			if err != nil {
				return nil, err
			}
			if err := set.addChart(s.path, files, namespace); err != nil {
				return nil, err
			}
		case s.path == "-":
			data, err := io.ReadAll(stdin)
			if err != nil {
				return nil, err
			}
			if err := set.addFile("<stdin>", data, namespace); err != nil {
				return nil, err
			}
		case s.kustomize:
			data, err := kustomizeBuild(filesys.MakeFsOnDisk(), s.path)
			if err != nil {
				return nil, err
			}
			if err := set.addRendered(renderedSource(s.path), data, namespace); err != nil {
				return nil, err
			}
		default:
			data, err := os.ReadFile(s.path)
			if err != nil {
				return nil, err
			}
			set.files = append(set.files, s.path)
			if err := set.addFile(s.path, data, namespace); err != nil {
				return nil, err
			}
		}
	}
	return set, nil
}

// renderedSource names the objects kustomize rendered from dir.
func renderedSource(dir string) string { return "kustomize build " + dir }

// addFile adds the objects of a file, each named file:line, the line where
// its document (or its item of a List) starts.
func (s *manifestSet) addFile(file string, data []byte, namespace string) error {
	return s.addDocuments(data, namespace, func(line int) string { return fmt.Sprintf("%s:%d", file, line) })
}

// addRendered adds rendered objects, each named source: their lines are in
// no file.
func (s *manifestSet) addRendered(source string, data []byte, namespace string) error {
	return s.addDocuments(data, namespace, func(int) string { return source })
}

// addDocuments keeps every Kubernetes object of data (List items
// included), each named by at(the line where it starts); objects without
// a namespace get namespace.
func (s *manifestSet) addDocuments(data []byte, namespace string, at func(line int) string) error {
	for _, d := range yamlDocuments(data) {
		// The lines before the document are kept as blank lines, so that
		// YAML errors and node lines count from the top of the file.
		raw := append(bytes.Repeat([]byte("\n"), d.first-1), d.data...)
		js, err := yaml.YAMLToJSON(raw)
		if err != nil {
			return fmt.Errorf("%s: %w", at(d.line), err)
		}
		var m map[string]any
		if err := utiljson.Unmarshal(js, &m); err != nil || m == nil {
			continue // not an object (a scalar)
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetAPIVersion() == "" || u.GetKind() == "" {
			continue
		}
		if !u.IsList() {
			if u.GetNamespace() == "" {
				u.SetNamespace(namespace)
			}
			s.objects = append(s.objects, manifest{source: at(d.line), obj: u})
			continue
		}
		l, err := u.ToList()
		if err != nil {
			return fmt.Errorf("%s: %w", at(d.line), err)
		}
		lines := itemLines(raw)
		for i := range l.Items {
			o, line := &l.Items[i], d.line
			if i < len(lines) {
				line = lines[i]
			}
			if o.GetNamespace() == "" {
				o.SetNamespace(namespace)
			}
			s.objects = append(s.objects, manifest{source: at(line), obj: o})
		}
	}
	return nil
}

// itemLines is the line of each item of a List document.
func itemLines(raw []byte) []int {
	n, err := kyaml.Parse(string(raw))
	if err != nil {
		return nil
	}
	items, err := n.Pipe(kyaml.Lookup("items"))
	if err != nil || items == nil {
		return nil
	}
	var lines []int
	for _, it := range items.Content() {
		lines = append(lines, it.Line)
	}
	return lines
}

// yamlDocument is one document of a YAML stream: its text, the line it
// starts on (first) and the line of its first content (line), both
// counted from 1 in the stream.
type yamlDocument struct {
	first, line int
	data        []byte
}

// yamlDocuments splits a YAML stream where Kubernetes' own reader
// (k8s.io/apimachinery/pkg/util/yaml) splits it: at lines that are "---"
// and blanks. Documents of blank lines and comments only are left out.
func yamlDocuments(data []byte) []yamlDocument {
	var docs []yamlDocument
	cur := yamlDocument{first: 1}
	for n := 1; len(data) > 0; n++ {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line = data[:i+1]
		}
		data = data[len(line):]
		if bytes.HasPrefix(line, []byte("---")) && len(bytes.TrimSpace(line[3:])) == 0 {
			docs = append(docs, cur)
			cur = yamlDocument{first: n + 1}
			continue
		}
		if t := bytes.TrimSpace(line); cur.line == 0 && len(t) > 0 && t[0] != '#' {
			cur.line = n
		}
		cur.data = append(cur.data, line...)
	}
	docs = append(docs, cur)
	out := docs[:0]
	for _, d := range docs {
		if d.line > 0 {
			out = append(out, d)
		}
	}
	return out
}
