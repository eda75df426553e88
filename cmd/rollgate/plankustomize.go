package main

import (
	"fmt"
	"path"
	"path/filepath"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"sigs.k8s.io/kustomize/api/konfig"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/rollgate/rollgate/gitsync"
)

// kustomizationFile is the name of the kustomization file in dir, or "".
func kustomizationFile(fsys filesys.FileSystem, dir string) string {
	for _, name := range konfig.RecognizedKustomizationFileNames() {
		if p := filepath.Join(dir, name); fsys.Exists(p) && !fsys.IsDir(p) {
			return name
		}
	}
	return ""
}

// kustomizeBuild renders the kustomization in dir with kustomize's own
// library, as `kustomize build dir` does with its default options (files
// loaded from the kustomization's folder and below, bases from anywhere
// local, no plugins, no Helm). Nothing is fetched: a remote base or file is
// refused first, by name.
func kustomizeBuild(fsys filesys.FileSystem, dir string) ([]byte, error) {
	if err := refuseRemote(fsys, dir, map[string]bool{}); err != nil {
		return nil, err
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	return m.AsYaml()
}

// refuseRemote fails on the first reference to something remote in the
// kustomization of dir or of any local folder it uses, where kustomize
// would clone a Git repository or download a file. It also refuses Helm
// charts, which kustomize inflates by running helm.
func refuseRemote(fsys filesys.FileSystem, dir string, seen map[string]bool) error {
	if seen[dir] {
		return nil
	}
	seen[dir] = true
	name := kustomizationFile(fsys, dir)
	if name == "" {
		return nil
	}
	file := filepath.Join(dir, name)
	data, err := fsys.ReadFile(file)
	if err != nil {
		return err
	}
	var k types.Kustomization
	if err := k.Unmarshal(data); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if len(k.HelmCharts) > 0 || len(k.HelmChartInflationGenerator) > 0 {
		return fmt.Errorf("%s: helmCharts are not rendered by rollgate plan: render them with kustomize build --enable-helm and pipe the output to rollgate plan -", file)
	}
	for _, r := range kustomizationRefs(&k) {
		if looksRemote(r.value) {
			return fmt.Errorf("%s: %s entry %q is remote: rollgate plan renders local files only and fetches nothing (render with kustomize build and pipe the output to rollgate plan -)", file, r.field, r.value)
		}
		if sub := filepath.Join(dir, r.value); fsys.IsDir(sub) {
			if err := refuseRemote(fsys, sub, seen); err != nil {
				return err
			}
		}
	}
	return nil
}

// kustomizationRef is one value of a kustomization that names a file, a
// folder or a URL.
type kustomizationRef struct{ field, value string }

// kustomizationRefs lists every field of k that kustomize loads from a
// path.
func kustomizationRefs(k *types.Kustomization) []kustomizationRef {
	var out []kustomizationRef
	add := func(field string, values ...string) {
		for _, v := range values {
			if v != "" {
				out = append(out, kustomizationRef{field, v})
			}
		}
	}
	add("resources", k.Resources...)
	add("bases", k.Bases...)
	add("components", k.Components...)
	add("crds", k.Crds...)
	add("configurations", k.Configurations...)
	add("generators", k.Generators...)
	add("transformers", k.Transformers...)
	add("validators", k.Validators...)
	add("openapi", k.OpenAPI["path"])
	for _, p := range append(k.Patches, k.PatchesJson6902...) {
		add("patches", p.Path)
	}
	for _, p := range k.PatchesStrategicMerge {
		if !strings.Contains(string(p), "\n") { // else an inline patch
			add("patchesStrategicMerge", string(p))
		}
	}
	for _, g := range k.ConfigMapGenerator {
		add("configMapGenerator", append(g.FileSources, g.EnvSources...)...)
	}
	for _, g := range k.SecretGenerator {
		add("secretGenerator", append(g.FileSources, g.EnvSources...)...)
	}
	return out
}

// looksRemote says whether kustomize would fetch ref: a URL
// (https://, ssh://, git::...), a GitHub path without scheme, or an SCP-like
// Git address (git@host:org/repo).
func looksRemote(ref string) bool {
	if strings.Contains(ref, "://") || strings.HasPrefix(ref, "git::") || strings.HasPrefix(ref, "github.com") {
		return true
	}
	first, _, _ := strings.Cut(ref, "/")
	return strings.Contains(first, "@")
}

// treeFS is the files of a Git tree in memory, under /, for kustomize to
// render a folder as it was at a commit (symbolic links and submodules
// left out).
func treeFS(tree *object.Tree) (filesys.FileSystem, error) {
	fsys := filesys.MakeFsInMemory()
	err := tree.Files().ForEach(func(f *object.File) error {
		if f.Mode != filemode.Regular && f.Mode != filemode.Executable {
			return nil
		}
		s, err := f.Contents()
		if err != nil {
			return err
		}
		return fsys.WriteFile(path.Join("/", f.Name), []byte(s))
	})
	return fsys, err
}

// renderBase adds to base each kustomization and chart of sources rendered
// from the files of tree (the commit ref of the working copy co); a folder
// with no kustomization file or chart at ref is new there and adds nothing.
func renderBase(base *manifestSet, co *gitsync.Checkout, tree *object.Tree, sources []planSource, ref, namespace string, helm helmOptions) error {
	var fsys filesys.FileSystem
	for _, s := range sources {
		if !s.kustomize && !s.chart {
			continue
		}
		rel, err := inCheckout(co, s.path)
		if err != nil {
			return err
		}
		if s.chart {
			if err := renderChartAt(base, tree, rel, ref, s.path, namespace, helm); err != nil {
				return err
			}
			continue
		}
		if fsys == nil {
			if fsys, err = treeFS(tree); err != nil {
				return err
			}
		}
		dir := path.Join("/", filepath.ToSlash(rel))
		if kustomizationFile(fsys, dir) == "" {
			continue
		}
		data, err := kustomizeBuild(fsys, dir)
		if err != nil {
			return fmt.Errorf("--base %s: %w", ref, err)
		}
		if err := base.addRendered(renderedSource(ref+":"+s.path), data, namespace); err != nil {
			return err
		}
	}
	return nil
}

// inCheckout is p's path relative to the top of the working copy co.
func inCheckout(co *gitsync.Checkout, p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	root := co.Root()
	if real, err := filepath.EvalSymlinks(root); err == nil {
		root = real
	}
	rel, err := filepath.Rel(root, abs)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("%s is outside the working copy %s", p, co.Root())
	}
	return rel, nil
}
