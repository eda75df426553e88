package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/rollgate/rollgate/api/admission"
	"github.com/rollgate/rollgate/api/kruise"
	"github.com/rollgate/rollgate/gitsync"
)

// exitNotConverted: `convert` left a Kruise object out (the report says why).
const exitNotConverted = 7

// notConverted marks the error of `convert` when an object was left out.
type notConverted struct{ err error }

func (e notConverted) Error() string { return e.err.Error() }
func (e notConverted) Unwrap() error { return e.err }

func newConvertCommand() *cobra.Command {
	var gitRepo, gitPath string
	c := &cobra.Command{
		Use:   "convert <file> | -",
		Short: "Convert OpenKruise Rollout manifests into rollgate Rollouts, keeping comments",
		Long: `Convert the OpenKruise Rollouts (rollouts.kruise.io v1alpha1 and v1beta1) of a
manifest file, or of standard input ("-"), into rollgate Rollouts, and print
the file to standard output: other documents unchanged, comments and field
order kept. Standard error gets the report: per Kruise object, every field
that was renamed, changed, added or removed, and why (what rollgate does
instead).

Kruise's manual gates are kept: a step with no pause, an empty pause or a
pause without duration waits for a human in Kruise (except a last canary
step at replicas 100%), so it gets pause: {}. Kruise's rolling style is
kept: v1alpha1 without the rolling-style annotation (or "canary") releases
a Deployment through a separate canary Deployment, which becomes
enableExtraWorkloadForCanary: true; "partition" is in place.

Fields rollgate's Rollout does not have are removed, never passed on. The
converted Rollouts are then validated and planned as 'rollgate plan' does.

Exit codes: 0 when every Kruise object was converted, 7 when one could not
be (for example a CloneSet, which rollgate does not release, or a rolling
style Kruise refuses: the report says why and the object is left out) or
when the file holds nothing to convert (empty, or an Argo Rollout), 6 when
a converted Rollout would be refused by the API server, 1 when the file
cannot be read.`,
		Example: `  rollgate convert apps/checkout/rollout.yaml > rollout.rollgate.yaml
  rollgate convert --git-repository app-repo apps/checkout/rollout.yaml
  kubectl get rollouts.rollouts.kruise.io -n shop checkout -o yaml | rollgate convert -`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runConvert(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr(), args[0], gitRepo, gitPath)
		},
	}
	c.Flags().StringVar(&gitRepo, "git-repository", "", "Add spec.git naming this Repository, so that gates open by merged pull requests")
	c.Flags().StringVar(&gitPath, "git-path", "", "spec.git.path (default: the file's path in its Git working copy)")
	return c
}

// runConvert converts one file and checks the result as `plan` does.
func runConvert(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, arg, gitRepo, gitPath string) error {
	var src []byte
	var err error
	source := arg
	if arg == "-" {
		source = "<stdin>"
		src, err = io.ReadAll(stdin)
	} else {
		src, err = os.ReadFile(arg)
	}
	if err != nil {
		return err
	}
	if gitRepo != "" && gitPath == "" {
		if gitPath, err = pathInRepo(arg); err != nil {
			return usageError{err}
		}
	}
	crds, err := admission.ChartCRDs()
	if err != nil {
		return err
	}
	conv, err := kruise.NewConverter(crds, kruise.Options{GitRepository: gitRepo, GitPath: gitPath})
	if err != nil {
		return err
	}
	out, results, err := conv.Convert(src)
	if errors.Is(err, kruise.ErrNothingToConvert) {
		return notConverted{fmt.Errorf("%s: %w", source, err)}
	}
	if err != nil {
		return fmt.Errorf("%s: %w", source, err)
	}
	fmt.Fprint(stderr, kruise.Report(source, results))
	if _, err := stdout.Write(out); err != nil {
		return err
	}
	if err := checkConverted(ctx, out); err != nil {
		return err
	}
	for _, r := range results {
		if !r.Converted {
			return notConverted{fmt.Errorf("%s:%d %s %s/%s was not converted: %s", source, r.Doc, r.Kind, r.Namespace, r.Name, r.Err)}
		}
	}
	return nil
}

// checkConverted validates and plans the converted Rollouts as `plan` does.
func checkConverted(ctx context.Context, out []byte) error {
	set := &manifestSet{}
	if err := set.add("<converted>", out, "default"); err != nil {
		return err
	}
	v, err := admission.New()
	if err != nil {
		return err
	}
	report := buildPlan(ctx, v, set, nil, &planFlags{})
	if len(report.Invalid) > 0 {
		return invalidSpec{fmt.Errorf("a converted object would be refused by the API server: %s", report.Invalid[0].summary())}
	}
	for _, p := range report.Rollouts {
		if p.Error != "" {
			return invalidSpec{fmt.Errorf("converted Rollout %s/%s cannot be planned: %s", p.Namespace, p.Name, p.Error)}
		}
	}
	return nil
}

// pathInRepo is file's path in the Git working copy that holds it.
func pathInRepo(file string) (string, error) {
	if file == "-" {
		return "", errors.New("--git-repository with standard input needs --git-path")
	}
	co, err := gitsync.OpenCheckout(filepath.Dir(file))
	if err != nil {
		return "", fmt.Errorf("%w; pass --git-path", err)
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(co.Root(), abs)
	if err != nil {
		return "", err
	}
	return filepath.ToSlash(rel), nil
}
