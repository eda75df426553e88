package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/rollgate/rollgate/api/admission"
	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/luascripts"
	"github.com/rollgate/rollgate/strategy"
)

// exitInvalid: `plan` found an object the API server would refuse.
const exitInvalid = 6

// invalidSpec marks the error of `plan` when an object is invalid.
type invalidSpec struct{ err error }

func (e invalidSpec) Error() string { return e.err.Error() }
func (e invalidSpec) Unwrap() error { return e.err }

// planFlags are the flags of `rollgate plan`.
type planFlags struct {
	output    string
	base      string
	baseFile  string
	namespace string
	nodes     int32
	strict    bool
	// helm renders the charts found.
	releaseName string
	valueFiles  []string
}

// helm is how the charts found are rendered.
func (f *planFlags) helm() helmOptions {
	return helmOptions{releaseName: f.releaseName, namespace: f.namespace, valueFiles: f.valueFiles}
}

func newPlanCommand() *cobra.Command {
	f := &planFlags{}
	c := &cobra.Command{
		Use:   "plan [file or folder ...] [-]",
		Short: "Validate Rollouts from files and say what each step of their release will do (no cluster)",
		Long: `Read manifests from files, folders or standard input ("-", e.g. the output
of helm template), as the GitOps tool will apply them: a folder holding a
kustomization.yaml (or a file in such a folder) is rendered with kustomize's
own library, local files only (a remote base is refused, by name); a folder
holding a Chart.yaml (or a file in it) with Helm's own library, as helm
template does (--values, --release-name, -n; dependencies must be in
charts/); other folders are read file by file (.yaml/.yml below them), each
kustomization or chart below rendered. HelmRelease values are not rendered.
For each rollgate object:

  - validate it exactly as the API server does at admission: the CRD's
    OpenAPI schema with its defaults, and its CEL rules, evaluated by
    Kubernetes' own code; unknown fields are errors, as with kubectl's
    strict field validation;
  - for each Rollout, print what every step of a release does for the
    replicas the workload declares in the same files: pods of the new and
    the old revision, the traffic on each router and its matches, pauses,
    gates with the approval branch rollgate will push, and analysis;
  - warn (on stderr) about what the API server accepts but will not work
    as written: a Rollout declared twice, an ingress classType with no
    built-in script, a workloadRef naming nothing in the files read.

With --base <ref> inside a Git working copy, the same paths are read at that
commit too, to say which Rollouts the change releases (the workload's pod
template changed) and which it does not, and to check updates as updates
(spec.workloadRef is immutable). For rendered manifests, --base-file names
the base rendered the same way.

Objects read from a file are named file:line; rendered ones by the folder.

Exit codes: 0 when every object is valid (warnings included), 6 when one is
not (the field and the fix are named) or, with --strict, when there is a
warning, 1 when the files cannot be read or rendered.`,
		Example: `  rollgate plan apps/
  rollgate plan --strict apps/echoserver/overlays/prod
  rollgate plan -n web --release-name web --values prod.yaml charts/web
  helm template web charts/web | rollgate plan -n web -o markdown -
  rollgate plan --base origin/main -o markdown apps/
  helm template web charts/web | rollgate plan --base-file base.yaml -`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkPlanOutput(f.output); err != nil {
				return usageError{err}
			}
			if f.base != "" && f.baseFile != "" {
				return usageError{errors.New("--base and --base-file both name the base: give one")}
			}
			if f.baseFile == "-" {
				return usageError{errors.New("--base-file names a file: standard input is for the manifests to plan")}
			}
			return runPlan(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr(), f, args)
		},
	}
	c.Flags().StringVarP(&f.output, "output", "o", "table", "Output format: table, markdown or json")
	c.Flags().StringVar(&f.base, "base", "", "Git ref to compare with (a branch, tag or commit of the working copy holding the files)")
	c.Flags().StringVar(&f.baseFile, "base-file", "", "Manifests to compare with, rendered from the base (helm template or kustomize build of the base commit)")
	c.Flags().StringVarP(&f.namespace, "namespace", "n", "default", "Namespace of objects that name none (as helm template prints them)")
	c.Flags().Int32Var(&f.nodes, "nodes", 0, "Nodes a DaemonSet runs on, to count its pods (default: show percentages)")
	c.Flags().StringVar(&f.releaseName, "release-name", "", "Release name of the Helm charts rendered (default: the chart's name)")
	c.Flags().StringArrayVar(&f.valueFiles, "values", nil, "Values file for the Helm charts rendered, over the chart's values (as helm template -f; repeatable, the last wins)")
	c.Flags().BoolVar(&f.strict, "strict", false, "Fail (exit 6) on warnings too: a duplicate Rollout, an unknown ingress classType, a workloadRef naming nothing")
	return c
}

func checkPlanOutput(o string) error {
	switch o {
	case "table", "markdown", "json":
		return nil
	}
	return fmt.Errorf("unknown output format %q: use table, markdown or json", o)
}

// runPlan reads, validates, plans and prints; warnings go to stderr.
func runPlan(ctx context.Context, stdin io.Reader, w, stderr io.Writer, f *planFlags, args []string) error {
	sources, err := planSources(args)
	if err != nil {
		return err
	}
	head, err := readManifests(stdin, sources, f.namespace, f.helm())
	if err != nil {
		return err
	}
	var base *manifestSet
	switch {
	case f.base != "":
		if base, err = readBase(head, args, sources, f.base, f.namespace, f.helm()); err != nil {
			return err
		}
	case f.baseFile != "":
		if base, err = readManifests(nil, []planSource{{path: f.baseFile}}, f.namespace, f.helm()); err != nil {
			return err
		}
	}
	v, err := admission.New()
	if err != nil {
		return err
	}
	report := buildPlan(ctx, v, head, base, f)
	if err := printPlan(w, report, f.output); err != nil {
		return err
	}
	for _, wa := range report.Warnings {
		fmt.Fprintf(stderr, "warning: %s\n", wa.text())
	}
	if n := len(report.Invalid); n > 0 {
		return invalidSpec{fmt.Errorf("%d object(s) would be refused by the API server: %s", n, report.Invalid[0].summary())}
	}
	if n := len(report.Warnings); n > 0 && f.strict {
		return invalidSpec{fmt.Errorf("--strict: %d warning(s): %s", n, report.Warnings[0].text())}
	}
	return nil
}

// readBase reads the files of head at ref, in the working copy holding the
// first path argument, and renders its kustomizations as they were at ref.
// Standard input has no base.
func readBase(head *manifestSet, args []string, sources []planSource, ref, namespace string, helm helmOptions) (*manifestSet, error) {
	for _, a := range args {
		if a == "-" {
			return nil, usageError{errors.New("--base reads the same files at another commit: it needs files or folders, not standard input")}
		}
	}
	co, err := gitsync.OpenCheckout(args[0])
	if err != nil {
		return nil, err
	}
	tree, err := co.Tree(ref)
	if err != nil {
		return nil, err
	}
	base := &manifestSet{}
	for _, path := range head.files {
		data, err := co.ReadFileAt(tree, path)
		if errors.Is(err, gitsync.ErrFileNotFound) {
			continue // a new file
		}
		if err != nil {
			return nil, err
		}
		if err := base.addFile(ref+":"+path, data, namespace); err != nil {
			return nil, err
		}
	}
	return base, renderBase(base, co, tree, sources, ref, namespace, helm)
}

// buildPlan validates every rollgate object of head and plans its Rollouts.
func buildPlan(ctx context.Context, v *admission.Validator, head, base *manifestSet, f *planFlags) planReport {
	report := planReport{Base: f.base + f.baseFile, Warnings: duplicateRollouts(head)}
	lib := luascripts.NewLibrary()
	var rollouts []*v1alpha1.Rollout
	for _, m := range head.objects {
		if !v.Handles(m.obj.GroupVersionKind()) {
			continue
		}
		var old *unstructured.Unstructured
		if base != nil {
			if b := base.find(m.obj.GetAPIVersion(), m.obj.GetKind(), m.obj.GetNamespace(), m.obj.GetName()); b != nil {
				old = b.obj
			}
		}
		if errs := v.Validate(ctx, m.obj, old); len(errs) > 0 {
			inv := invalidObject{Source: m.source, Kind: m.obj.GetKind(), Namespace: m.obj.GetNamespace(), Name: m.obj.GetName()}
			for _, e := range errs {
				inv.Errors = append(inv.Errors, e.Error())
			}
			report.Invalid = append(report.Invalid, inv)
			continue
		}
		if m.obj.GetKind() != "Rollout" {
			continue
		}
		ro := &v1alpha1.Rollout{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m.obj.Object, ro); err != nil {
			report.Invalid = append(report.Invalid, invalidObject{Source: m.source, Kind: "Rollout", Namespace: m.obj.GetNamespace(), Name: m.obj.GetName(), Errors: []string{err.Error()}})
			continue
		}
		report.Rollouts = append(report.Rollouts, planRollout(ro, m.source, head, base, f.nodes))
		report.Warnings = append(report.Warnings, rolloutWarnings(ro, m.source, head, lib)...)
		rollouts = append(rollouts, ro)
	}
	planGroups(&report, rollouts)
	return report
}

// planGroups shows the lockstep groups of the Rollouts (report.Rollouts[i]
// plans rollouts[i]): the members, the coordinator whose gates are the
// group's (the others' gates name it instead of an approval branch of
// their own), and a warning on each member whose steps or gates differ
// from another's.
func planGroups(report *planReport, rollouts []*v1alpha1.Rollout) {
	byGroup := map[[2]string][]int{}
	var keys [][2]string
	for i, ro := range rollouts {
		if g := ro.Spec.Group; g != nil {
			k := [2]string{ro.Namespace, g.Name}
			if _, ok := byGroup[k]; !ok {
				keys = append(keys, k)
			}
			byGroup[k] = append(byGroup[k], i)
		}
	}
	for _, k := range keys {
		idx := byGroup[k]
		var names []string
		for _, i := range idx {
			names = append(names, rollouts[i].Name)
		}
		coord := strategy.GroupCoordinator(names)
		sort.Strings(names)
		report.Groups = append(report.Groups, groupPlan{Namespace: k[0], Name: k[1], Members: names, Coordinator: coord})
		for _, i := range idx {
			ro, p := rollouts[i], &report.Rollouts[i]
			p.Group, p.Coordinator = k[1], coord
			if ro.Name != coord {
				for j := range p.Steps {
					if p.Steps[j].ApprovalBranch != "" {
						p.Steps[j].ApprovalBranch = ""
						p.Steps[j].Pause = "the group's gate, approved on " + coord
					}
				}
			}
			g := &strategy.Group{Name: k[1], Self: ro.Name}
			for _, o := range idx {
				if o != i {
					g.Members = append(g.Members, strategy.GroupMember{Name: rollouts[o].Name, Spec: &rollouts[o].Spec})
				}
			}
			if err := strategy.CheckGroup(g, &ro.Spec); err != nil {
				report.Warnings = append(report.Warnings, planWarning{Source: p.Source, Kind: "Rollout", Namespace: ro.Namespace, Name: ro.Name,
					Message: err.Error() + ": no member of the group will start a release"})
			}
		}
	}
}

// summary is the first error of an invalid object, for the exit message.
func (o invalidObject) summary() string {
	return fmt.Sprintf("%s %s/%s (%s): %s", o.Kind, o.Namespace, o.Name, o.Source, strings.Join(o.Errors[:1], ""))
}
