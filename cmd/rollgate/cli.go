package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/cmd/internal/kubeconfig"
	"github.com/rollgate/rollgate/reconciler"
)

// clusterFlags select the cluster and namespace, as kubectl does.
type clusterFlags struct {
	kubeconfig string
	context    string
	namespace  string
}

func (f *clusterFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "Path to the kubeconfig file (default $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&f.context, "context", "", "kubeconfig context to use")
	fs.StringVarP(&f.namespace, "namespace", "n", "", "Namespace (default: the context's)")
}

func (f *clusterFlags) client() (client.Client, string, error) {
	cc := kubeconfig.Loader(f.kubeconfig, f.context)
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, "", kubeconfig.Explain(err)
	}
	if f.namespace != "" {
		ns = f.namespace
	}
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", kubeconfig.Explain(err)
	}
	scheme, err := reconciler.NewScheme()
	if err != nil {
		return nil, "", err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	return c, ns, err
}

// getRollout reads one Rollout, named "name" or "namespace/name".
func getRollout(ctx context.Context, c client.Client, ns, ref string) (*v1alpha1.Rollout, error) {
	if n, name, ok := strings.Cut(ref, "/"); ok {
		ns, ref = n, name
	}
	ro := &v1alpha1.Rollout{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref}, ro); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, notFoundError{fmt.Errorf("Rollout %s/%s not found", ns, ref)}
		}
		return nil, err
	}
	return ro, nil
}

func newGetCommand() *cobra.Command {
	f := &clusterFlags{}
	var output string
	var watch, all bool
	cmd := &cobra.Command{
		Use:     "get [name]",
		Aliases: []string{"list"},
		Short:   "Show Rollouts in the cluster: step, state, traffic, old/new pods, what each waits for",
		Long: `Show Rollouts in the cluster as a table (or -o yaml|json): the step, its state,
the traffic sent to the new revision, ready/total pods of the old and the new
revision, and what the release waits for. --watch redraws every 2 seconds.

Exit codes: 0 ok, 1 error, 2 bad usage, 3 the named Rollout does not exist.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			c, ns, err := f.client()
			if err != nil {
				return err
			}
			if all {
				ns = ""
			}
			show := func() error { return showRollouts(cmd.Context(), cmd.OutOrStdout(), c, ns, args, output) }
			if !watch {
				return show()
			}
			for {
				if err := show(); err != nil {
					return err
				}
				select {
				case <-cmd.Context().Done():
					return nil
				case <-time.After(2 * time.Second):
				}
				fmt.Fprintln(cmd.OutOrStdout())
			}
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().StringVarP(&output, "output", "o", "table", "Output format: table, yaml or json")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "Print again every 2 seconds until interrupted")
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "List Rollouts of every namespace")
	return cmd
}

func showRollouts(ctx context.Context, w io.Writer, c client.Client, ns string, args []string, output string) error {
	var items []v1alpha1.Rollout
	if len(args) == 1 {
		ro, err := getRollout(ctx, c, ns, args[0])
		if err != nil {
			return err
		}
		items = []v1alpha1.Rollout{*ro}
	} else {
		var list v1alpha1.RolloutList
		if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}
		items = list.Items
	}
	switch output {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(items)
	case "yaml":
		b, err := yaml.Marshal(items)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tPHASE\tSTEP\tSTATE\tTRAFFIC\tOLD PODS\tNEW PODS\tWAITING FOR")
	for i := range items {
		ro := &items[i]
		s := ro.Status
		step := "-"
		if s.StepCount > 0 {
			step = fmt.Sprintf("%d/%d", s.CurrentStepIndex, s.StepCount)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d/%d\t%d/%d\t%s\n", ro.Namespace, ro.Name, dash(string(s.Phase)), step,
			dash(string(s.CurrentStepState)), dash(s.Traffic), s.StableReadyReplicas, s.StableReplicas,
			s.CanaryReadyReplicas, s.CanaryReplicas, waitingForCluster(ro))
	}
	return tw.Flush()
}

// checkOutput rejects an -o that showRollouts cannot print.
func checkOutput(output string) error {
	switch output {
	case "table", "", "yaml", "json":
		return nil
	}
	return usageError{fmt.Errorf("-o %q: use table, yaml or json", output)}
}

func waitingForCluster(ro *v1alpha1.Rollout) string {
	if a := ro.Status.AwaitingApproval; a != nil {
		switch {
		case a.PullRequestURL != "":
			return "approval: merge " + a.PullRequestURL
		case a.Branch != "":
			return "approval: merge branch " + a.Branch
		}
		step := fmt.Sprintf("step %d", a.Step)
		if a.Attempt > 1 {
			step += fmt.Sprintf(", attempt %d", a.Attempt)
		}
		return fmt.Sprintf("approval of %s (rollgate approve %s/%s)", step, ro.Namespace, ro.Name)
	}
	if conditions.IsStalled(ro) {
		return "a fix: " + conditions.GetMessage(ro, v1alpha1.StalledCondition)
	}
	return "-"
}
