package main

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
)

// helmOptions are how `plan` renders Helm charts, as `helm template`
// flags do.
type helmOptions struct {
	// releaseName is .Release.Name; empty: the chart's name.
	releaseName string
	// namespace is .Release.Namespace.
	namespace string
	// valueFiles are merged over the chart's values, in order (-f).
	valueFiles []string
}

// isChart says whether dir holds a Helm chart (a Chart.yaml file).
func isChart(dir string) bool {
	st, err := os.Stat(filepath.Join(dir, "Chart.yaml"))
	return err == nil && !st.IsDir()
}

// chartAbove is the nearest folder holding file (up to the path given)
// that is a chart, or "".
func chartAbove(file string) string {
	for dir := filepath.Dir(file); ; dir = filepath.Dir(dir) {
		if isChart(dir) {
			return dir
		}
		if dir == filepath.Dir(dir) {
			return ""
		}
	}
}

// helmTemplateDir renders the chart in dir (see helmTemplate).
func helmTemplateDir(dir string, o helmOptions) (map[string]string, error) {
	c, err := loader.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("helm chart %s: %w", dir, err)
	}
	return helmTemplate(c, dir, o)
}

// helmTemplate renders chart c with Helm's own library, as `helm template`
// does without a cluster: the chart's values, then each values file; Helm's
// default capabilities (no cluster is asked). Dependencies must be in the
// chart's charts/ folder: nothing is fetched. The result maps each
// template (chart/templates/...) to its manifests; NOTES.txt is left out.
func helmTemplate(c *chart.Chart, dir string, o helmOptions) (map[string]string, error) {
	have := map[string]bool{}
	for _, d := range c.Dependencies() {
		have[d.Name()] = true
	}
	for _, d := range c.Metadata.Dependencies {
		if !have[d.Name] {
			return nil, fmt.Errorf("helm chart %s: dependency %q (%s) is not in its charts/ folder: rollgate plan fetches nothing (run helm dependency build first)", dir, d.Name, d.Repository)
		}
	}
	vals := map[string]any{}
	for _, f := range o.valueFiles {
		v, err := chartutil.ReadValuesFile(f)
		if err != nil {
			return nil, fmt.Errorf("--values %s: %w", f, err)
		}
		vals = chartutil.CoalesceTables(v.AsMap(), vals) // the later file wins
	}
	if err := chartutil.ProcessDependenciesWithMerge(c, vals); err != nil {
		return nil, fmt.Errorf("helm chart %s: %w", dir, err)
	}
	name := o.releaseName
	if name == "" {
		name = c.Name()
	}
	rv, err := chartutil.ToRenderValues(c, vals, chartutil.ReleaseOptions{Name: name, Namespace: o.namespace, Revision: 1, IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, fmt.Errorf("helm chart %s: %w", dir, err)
	}
	files, err := engine.Render(c, rv)
	if err != nil {
		return nil, fmt.Errorf("helm template %s: %w", dir, err)
	}
	for k, v := range files {
		if strings.HasSuffix(k, "NOTES.txt") || strings.TrimSpace(v) == "" {
			delete(files, k)
		}
	}
	return files, nil
}

// addChart adds the manifests of a rendered chart, each named by the chart
// folder and its template.
func (s *manifestSet) addChart(dir string, files map[string]string, namespace string) error {
	names := make([]string, 0, len(files))
	for k := range files {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if err := s.addRendered(fmt.Sprintf("helm template %s: %s", dir, k), []byte(files[k]), namespace); err != nil {
			return err
		}
	}
	return nil
}

// chartAt loads the chart of folder rel (relative to the top of the working
// copy) from a Git tree, or nil when the tree has no chart there.
func chartAt(tree *object.Tree, rel string) (*chart.Chart, error) {
	prefix := path.Clean(filepath.ToSlash(rel)) + "/"
	if prefix == "./" {
		prefix = "" // the top of the working copy
	}
	var files []*loader.BufferedFile
	err := tree.Files().ForEach(func(f *object.File) error {
		if !strings.HasPrefix(f.Name, prefix) || (f.Mode != filemode.Regular && f.Mode != filemode.Executable) {
			return nil
		}
		s, err := f.Contents()
		if err != nil {
			return err
		}
		files = append(files, &loader.BufferedFile{Name: strings.TrimPrefix(f.Name, prefix), Data: []byte(s)})
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		if f.Name == "Chart.yaml" {
			return loader.LoadFiles(files)
		}
	}
	return nil, nil
}

// renderChartAt adds to base the chart of folder rel as it was in tree
// (the commit ref), if it was a chart there.
func renderChartAt(base *manifestSet, tree *object.Tree, rel, ref, dir, namespace string, o helmOptions) error {
	c, err := chartAt(tree, rel)
	if err != nil || c == nil {
		return err
	}
	files, err := helmTemplate(c, ref+":"+dir, o)
	if err != nil {
		return fmt.Errorf("--base %s: %w", ref, err)
	}
	return base.addChart(ref+":"+dir, files, namespace)
}
