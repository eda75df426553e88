package gitsync

import (
	"context"
	"fmt"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"

	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// Reverting a failed release in Git means setting each container's image
// back to the stable one wherever Git declares it. RevertImages looks in
// three places, in every YAML file it is given:
//
//  1. Plain workload manifests: Deployment, StatefulSet and DaemonSet
//     documents (matching RevertRequest.Workload) have
//     spec.template.spec.{containers,initContainers}[name].image set.
//  2. Kustomizations (kustomization.yaml, or kind Kustomization of
//     kustomize.config.k8s.io): an images entry whose newName (or name,
//     without newName) is the stable image's repository gets newTag or
//     digest set to the stable one (and the other removed).
//  3. Setter markers, for Helm values files and anything else: a scalar
//     whose line ends with a comment
//
//     # rollgate:image <namespace>/<rollout>:<container>[:tag|:name|:digest]
//
//     is set to the stable image of that container: the full reference
//     without suffix, or only its tag, repository or digest with one. For
//     example, in a values file:
//
//     image:
//     repository: ghcr.io/acme/echo # rollgate:image demo/echo:app:name
//     tag: "1.5.0"                  # rollgate:image demo/echo:app:tag
//
// Like approvals, edits are spliced into the original text.

// RevertRequest says which images to restore for one Rollout.
type RevertRequest struct {
	// Namespace of the Rollout (and of its workload and setter markers).
	Namespace string
	// Name of the Rollout, as used in setter markers.
	Name string
	// Revision is the failed canary revision; it names the revert branch.
	Revision string
	// Workload selects the plain workload manifests to edit. An empty
	// Kind matches Deployment, StatefulSet and DaemonSet; an empty Name
	// matches any name. Documents in another namespace than Namespace are
	// skipped.
	Workload WorkloadRef
	// Images maps a container name to its stable image reference.
	Images map[string]string
}

// WorkloadRef names a workload.
type WorkloadRef struct {
	// Kind is Deployment, StatefulSet or DaemonSet; "" matches all three.
	Kind string
	// Name is metadata.name; "" matches any.
	Name string
}

// RevertResult is the outcome of RevertImages.
type RevertResult struct {
	// Files maps each changed path to its new content.
	Files map[string][]byte
	// Found lists the containers with at least one image location (changed
	// or already stable), sorted.
	Found []string
	// Missing lists the containers with no image location in any file.
	Missing []string
}

// RevertImages computes the edits restoring req.Images in files (path to
// content). Files that are not YAML (e.g. Helm templates) are skipped.
// It is pure: nothing is read or written.
func RevertImages(files map[string][]byte, req RevertRequest) (RevertResult, error) {
	rv := &reverter{req: req, stable: map[string]imageRef{}, found: map[string]bool{}}
	for c, img := range req.Images {
		rv.stable[c] = parseImageRef(img)
	}
	res := RevertResult{Files: map[string][]byte{}}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		out, err := rv.editFile(p, files[p])
		if err != nil {
			return RevertResult{}, fmt.Errorf("%s: %w", p, err)
		}
		if out != nil {
			res.Files[p] = out
		}
	}
	for c := range req.Images {
		if rv.found[c] {
			res.Found = append(res.Found, c)
		} else {
			res.Missing = append(res.Missing, c)
		}
	}
	sort.Strings(res.Found)
	sort.Strings(res.Missing)
	return res, nil
}

// imageRef is a parsed image reference.
type imageRef struct {
	Name   string // registry and repository
	Tag    string
	Digest string
}

func parseImageRef(s string) imageRef {
	var r imageRef
	s, r.Digest, _ = strings.Cut(s, "@")
	if i := strings.LastIndex(s, ":"); i > strings.LastIndex(s, "/") {
		s, r.Tag = s[:i], s[i+1:]
	}
	r.Name = s
	return r
}

type reverter struct {
	req    RevertRequest
	stable map[string]imageRef
	found  map[string]bool
}

// editFile returns the edited content of one file, or nil when unchanged.
func (rv *reverter) editFile(p string, src []byte) ([]byte, error) {
	if ext := path.Ext(p); ext != ".yaml" && ext != ".yml" {
		return nil, nil
	}
	f, err := parseYAMLFile(src)
	if err != nil {
		return nil, nil // not YAML (a template, say): nothing to do here
	}
	byStart := map[int]edit{}
	for i := range f.docs {
		root := f.root(i)
		var edits []edit
		edits = append(edits, rv.markerEdits(f, root)...)
		edits = append(edits, rv.containerEdits(f, root)...)
		kedits, err := rv.kustomizeEdits(f, p, root)
		if err != nil {
			return nil, err
		}
		for _, e := range append(edits, kedits...) {
			byStart[e.start] = e
		}
	}
	if len(byStart) == 0 {
		return nil, nil
	}
	edits := make([]edit, 0, len(byStart))
	for _, e := range byStart {
		edits = append(edits, e)
	}
	out := applyEdits(src, edits)
	if err := rv.verify(p, f, out); err != nil {
		return nil, err
	}
	return out, nil
}

// verify checks an edited file parses into as many documents and needs no
// further edit.
func (rv *reverter) verify(p string, before *yamlFile, out []byte) error {
	after, err := parseYAMLFile(out)
	if err != nil || len(after.docs) != len(before.docs) {
		return fmt.Errorf("%w: the image edit broke the file", ErrInvalidManifest)
	}
	check := &reverter{req: rv.req, stable: rv.stable, found: map[string]bool{}}
	if again, err := check.editFile(p+".check.yaml", out); err != nil || again != nil {
		return fmt.Errorf("%w: the image edit did not take", ErrInvalidManifest)
	}
	return nil
}

// markerRE matches a setter marker comment.
var markerRE = regexp.MustCompile(`#\s*rollgate:image\s+([^\s/]+)/([^\s:]+):([^\s:]+)(?::(tag|name|digest))?\s*$`)

// markerEdits sets every scalar carrying a marker for this Rollout.
func (rv *reverter) markerEdits(f *yamlFile, n *yaml.Node) []edit {
	var out []edit
	if n.Kind == yaml.ScalarNode && n.LineComment != "" {
		if m := markerRE.FindStringSubmatch(n.LineComment); m != nil && m[1] == rv.req.Namespace && m[2] == rv.req.Name {
			if ref, ok := rv.stable[m[3]]; ok {
				want, ok := ref.part(m[4])
				if ok {
					rv.found[m[3]] = true
					if n.Value != want {
						if e, err := f.setScalarEdit(n, want); err == nil {
							out = append(out, e)
						}
					}
				}
			}
		}
	}
	for _, c := range n.Content {
		out = append(out, rv.markerEdits(f, c)...)
	}
	return out
}

// part returns the marker's part of the reference ("" = whole).
func (r imageRef) part(which string) (string, bool) {
	switch which {
	case "tag":
		return r.Tag, r.Tag != ""
	case "name":
		return r.Name, true
	case "digest":
		return r.Digest, r.Digest != ""
	}
	s := r.Name
	if r.Tag != "" {
		s += ":" + r.Tag
	}
	if r.Digest != "" {
		s += "@" + r.Digest
	}
	return s, true
}

// containerEdits sets container images in a matching workload document.
func (rv *reverter) containerEdits(f *yamlFile, root *yaml.Node) []edit {
	kind := scalarAt(root, "kind")
	switch kind {
	case "Deployment", "StatefulSet", "DaemonSet":
	default:
		return nil
	}
	w := rv.req.Workload
	if (w.Kind != "" && w.Kind != kind) || (w.Name != "" && w.Name != scalarAt(root, "metadata", "name")) {
		return nil
	}
	if ns := scalarAt(root, "metadata", "namespace"); ns != "" && ns != rv.req.Namespace {
		return nil
	}
	_, spec := mapGet(root, "spec")
	_, tmpl := mapGet(spec, "template")
	_, podSpec := mapGet(tmpl, "spec")
	var out []edit
	for _, field := range []string{"initContainers", "containers"} {
		_, list := mapGet(podSpec, field)
		if list == nil || list.Kind != yaml.SequenceNode {
			continue
		}
		for _, c := range list.Content {
			ref, ok := rv.stable[scalarAt(c, "name")]
			_, img := mapGet(c, "image")
			if !ok || img == nil || img.Kind != yaml.ScalarNode {
				continue
			}
			rv.found[scalarAt(c, "name")] = true
			want, _ := ref.part("")
			if img.Value != want {
				if e, err := f.setScalarEdit(img, want); err == nil {
					out = append(out, e)
				}
			}
		}
	}
	return out
}

// isKustomization reports whether the document at p is a Kustomization.
func isKustomization(p string, root *yaml.Node) bool {
	switch path.Base(p) {
	case "kustomization.yaml", "kustomization.yml", "Kustomization":
		return true
	}
	return scalarAt(root, "kind") == "Kustomization" &&
		strings.HasPrefix(scalarAt(root, "apiVersion"), "kustomize.config.k8s.io/")
}

// kustomizeEdits sets the images overrides of a Kustomization.
func (rv *reverter) kustomizeEdits(f *yamlFile, p string, root *yaml.Node) ([]edit, error) {
	if !isKustomization(p, root) {
		return nil, nil
	}
	_, images := mapGet(root, "images")
	if images == nil || images.Kind != yaml.SequenceNode {
		return nil, nil
	}
	containers := make([]string, 0, len(rv.stable))
	for c := range rv.stable {
		containers = append(containers, c)
	}
	sort.Strings(containers)
	var out []edit
	for _, entry := range images.Content {
		target := scalarAt(entry, "newName")
		if target == "" {
			target = scalarAt(entry, "name")
		}
		for _, c := range containers {
			ref := rv.stable[c]
			if ref.Name != target {
				continue
			}
			rv.found[c] = true
			edits, err := imageEntryEdits(f, entry, ref)
			if err != nil {
				return nil, fmt.Errorf("images entry %q: %w", target, err)
			}
			out = append(out, edits...)
			break
		}
	}
	return out, nil
}

// imageEntryEdits sets newTag or digest of one kustomize images entry to
// ref, removing the other (a digest wins over newTag in kustomize).
func imageEntryEdits(f *yamlFile, entry *yaml.Node, ref imageRef) ([]edit, error) {
	set, drop := "newTag", "digest"
	want := ref.Tag
	if ref.Digest != "" {
		set, drop, want = "digest", "newTag", ref.Digest
	}
	if want == "" {
		return nil, nil // a bare name: kustomize keeps the manifest's tag
	}
	var out []edit
	if _, v := mapGet(entry, set); v != nil {
		if v.Value != want {
			e, err := f.setScalarEdit(v, want)
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
	} else {
		e, err := f.insertKeyEdit(entry, set, yamlString(want))
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	if k, _ := mapGet(entry, drop); k != nil {
		e, err := f.deleteKeyEdit(entry, k)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// RevertPolicy says where a revert goes.
type RevertPolicy string

const (
	// RevertPropose pushes the revert to its own branch (see RevertBranch)
	// for review, like an approval.
	RevertPropose RevertPolicy = "Propose"
	// RevertDirect commits the revert straight to the tracked branch.
	RevertDirect RevertPolicy = "Direct"
)

// RevertBranch returns the branch proposing the revert of a failed
// revision: rollgate/revert/<namespace>/<name>/<revision>.
func RevertBranch(namespace, name, revision string) string {
	return RevertBranchesOf(namespace, name) + revision
}

// RevertBranchesOf is the prefix of every revert branch of Rollout
// namespace/name.
func RevertBranchesOf(namespace, name string) string {
	return "rollgate/revert/" + namespace + "/" + name + "/"
}

// RevertOptions configure Revert.
type RevertOptions struct {
	// TrackedBranch holds the manifests.
	TrackedBranch string
	// Paths are the files, or directories (searched recursively for .yaml
	// and .yml files), that declare the workload's images.
	Paths []string
	// Policy picks a revert branch or a direct commit; "" means
	// RevertPropose.
	Policy RevertPolicy
	// By names who or what asked for the revert, for the commit message.
	By string
}

// RevertOutcome describes a Revert.
type RevertOutcome struct {
	// Branch received the commit (the revert branch or the tracked branch).
	Branch string
	// Commit is the head of Branch after the revert.
	Commit string
	// Pushed reports whether a commit was pushed. False means Git already
	// declares the stable images (or the revert branch already exists).
	Pushed bool
	// Files lists the changed files.
	Files []string
	// Missing lists containers whose image was found nowhere: the revert is
	// incomplete for them.
	Missing []string
}

// Revert sets the images of req back to stable in Git, per opts.Policy,
// retrying on concurrent pushes. It returns ErrManifestNotFound when no
// requested container has an image location under opts.Paths.
func Revert(ctx context.Context, repo *Repository, opts RevertOptions, req RevertRequest) (RevertOutcome, error) {
	out := RevertOutcome{Branch: opts.TrackedBranch}
	upd := UpdateRequest{Branch: opts.TrackedBranch}
	if opts.Policy == "" || opts.Policy == RevertPropose {
		out.Branch = RevertBranch(req.Namespace, req.Name, req.Revision)
		upd = UpdateRequest{Branch: out.Branch, From: opts.TrackedBranch}
		if existing, err := repo.Branches(ctx, out.Branch); err == nil && existing[out.Branch] != "" {
			out.Commit = existing[out.Branch]
			return out, nil
		}
	}
	var result RevertResult
	res, err := repo.Update(ctx, upd, func(base *Snapshot) (*Change, error) {
		files, err := readYAMLFiles(base, opts.Paths)
		if err != nil {
			return nil, err
		}
		result, err = RevertImages(files, req)
		if err != nil {
			return nil, err
		}
		if len(result.Found) == 0 {
			return nil, fmt.Errorf("%w: no image of %s in %s", ErrManifestNotFound,
				strings.Join(sortedImageKeys(req.Images), ", "), strings.Join(opts.Paths, ", "))
		}
		if len(result.Files) == 0 {
			return nil, nil
		}
		return &Change{Files: result.Files, Message: revertMessage(req, result, opts.By)}, nil
	})
	if err != nil {
		return out, fmt.Errorf("reverting %s/%s: %w", req.Namespace, req.Name, err)
	}
	out.Commit, out.Files, out.Missing = res.Commit, res.Changed, result.Missing
	out.Pushed = len(res.Changed) > 0
	return out, nil
}

// readYAMLFiles reads the YAML files at paths (files or directories).
func readYAMLFiles(s *Snapshot, paths []string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, p := range paths {
		if data, err := s.ReadFile(p); err == nil {
			out[strings.Trim(p, "/")] = data
			continue
		}
		files, err := s.Files(p)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			if ext := path.Ext(f); ext != ".yaml" && ext != ".yml" {
				continue
			}
			data, err := s.ReadFile(f)
			if err != nil {
				return nil, err
			}
			out[f] = data
		}
	}
	return out, nil
}

func sortedImageKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// revertMessage is the commit message of a revert.
func revertMessage(req RevertRequest, res RevertResult, by string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "rollgate: revert %s/%s to stable (revision %s failed)\n\n", req.Namespace, req.Name, req.Revision)
	for _, c := range sortedImageKeys(req.Images) {
		if slices.Contains(res.Found, c) {
			fmt.Fprintf(&b, "- %s: %s\n", c, req.Images[c])
		}
	}
	if len(res.Missing) > 0 {
		fmt.Fprintf(&b, "\nNot found in Git (revert incomplete): %s\n", strings.Join(res.Missing, ", "))
	}
	if by = strings.Join(strings.Fields(by), " "); by != "" {
		fmt.Fprintf(&b, "\nRequested-by: %s\n", by)
	}
	return b.String()
}
