package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/rollgate/rollgate/api/admission"
	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/gitsync"
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
}

func newPlanCommand() *cobra.Command {
	f := &planFlags{}
	c := &cobra.Command{
		Use:   "plan [file or folder ...] [-]",
		Short: "Validate Rollouts from files and say what each step of their release will do (no cluster)",
		Long: `Read manifests from files, folders (every .yaml/.yml below them) or standard
input ("-", e.g. the output of kustomize build or helm template), and for
each rollgate object:

  - validate it exactly as the API server does at admission: the CRD's
    OpenAPI schema with its defaults, and its CEL rules, evaluated by
    Kubernetes' own code; unknown fields are errors, as with kubectl's
    strict field validation;
  - for each Rollout, print what every step of a release does for the
    replicas the workload declares in the same files: pods of the new and
    the old revision, the traffic on each router and its matches, pauses,
    gates with the approval branch rollgate will push, and analysis.

With --base <ref> inside a Git working copy, the same paths are read at that
commit too, to say which Rollouts the change releases (the workload's pod
template changed) and which it does not, and to check updates as updates
(spec.workloadRef is immutable). For rendered manifests, --base-file names
the base rendered the same way.

Exit codes: 0 when every object is valid, 6 when one is not (the field and
the fix are named), 1 when the files cannot be read.`,
		Example: `  rollgate plan apps/
  kustomize build apps/echoserver | rollgate plan -
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
			return runPlan(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout(), f, args)
		},
	}
	c.Flags().StringVarP(&f.output, "output", "o", "table", "Output format: table, markdown or json")
	c.Flags().StringVar(&f.base, "base", "", "Git ref to compare with (a branch, tag or commit of the working copy holding the files)")
	c.Flags().StringVar(&f.baseFile, "base-file", "", "Manifests to compare with, rendered from the base (helm template or kustomize build of the base commit)")
	c.Flags().StringVarP(&f.namespace, "namespace", "n", "default", "Namespace of objects that name none (as helm template prints them)")
	c.Flags().Int32Var(&f.nodes, "nodes", 0, "Nodes a DaemonSet runs on, to count its pods (default: show percentages)")
	return c
}

func checkPlanOutput(o string) error {
	switch o {
	case "table", "markdown", "json":
		return nil
	}
	return fmt.Errorf("unknown output format %q: use table, markdown or json", o)
}

// runPlan reads, validates, plans and prints.
func runPlan(ctx context.Context, stdin io.Reader, w io.Writer, f *planFlags, args []string) error {
	head, err := readManifests(stdin, args, f.namespace)
	if err != nil {
		return err
	}
	var base *manifestSet
	switch {
	case f.base != "":
		if base, err = readBase(head, args, f.base, f.namespace); err != nil {
			return err
		}
	case f.baseFile != "":
		if base, err = readManifests(nil, []string{f.baseFile}, f.namespace); err != nil {
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
	if n := len(report.Invalid); n > 0 {
		return invalidSpec{fmt.Errorf("%d object(s) would be refused by the API server: %s", n, report.Invalid[0].summary())}
	}
	return nil
}

// readBase reads the files of head at ref, in the working copy holding the
// first path argument. Standard input has no base.
func readBase(head *manifestSet, args []string, ref, namespace string) (*manifestSet, error) {
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
		if err := base.add(ref+":"+path, data, namespace); err != nil {
			return nil, err
		}
	}
	return base, nil
}

// buildPlan validates every rollgate object of head and plans its Rollouts.
func buildPlan(ctx context.Context, v *admission.Validator, head, base *manifestSet, f *planFlags) planReport {
	report := planReport{Base: f.base + f.baseFile}
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
	}
	return report
}

// summary is the first error of an invalid object, for the exit message.
func (o invalidObject) summary() string {
	return fmt.Sprintf("%s %s/%s (%s): %s", o.Kind, o.Namespace, o.Name, o.Source, strings.Join(o.Errors[:1], ""))
}

// readManifests reads every argument: "-" is standard input, a folder is
// read recursively (.yaml and .yml files, hidden folders skipped).
func readManifests(stdin io.Reader, args []string, namespace string) (*manifestSet, error) {
	set := &manifestSet{}
	for _, a := range args {
		if a == "-" {
			data, err := io.ReadAll(stdin)
			if err != nil {
				return nil, err
			}
			if err := set.add("<stdin>", data, namespace); err != nil {
				return nil, err
			}
			continue
		}
		files, err := yamlFiles(a)
		if err != nil {
			return nil, err
		}
		for _, p := range files {
			data, err := os.ReadFile(p)
			if err != nil {
				return nil, err
			}
			set.files = append(set.files, p)
			if err := set.add(p, data, namespace); err != nil {
				return nil, err
			}
		}
	}
	return set, nil
}
