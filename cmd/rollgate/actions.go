package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/workload"
)

// action changes a Rollout's spec in the cluster. It returns a message, or
// an error when the Rollout is not in a state where the action applies.
type action func(ro *v1alpha1.Rollout) (string, error)

func newActionCommand(use, short, long string, act action, confirm bool) *cobra.Command {
	f := &clusterFlags{}
	var yes bool
	cmd := &cobra.Command{
		Use:   use + " [<namespace>/]<name>",
		Short: short,
		Long:  long + "\n\nExit codes: 0 ok, 1 error, 2 bad usage, 3 the Rollout does not exist.",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := f.client()
			if err != nil {
				return err
			}
			ro, err := getRollout(cmd.Context(), c, ns, args[0])
			if err != nil {
				return err
			}
			if confirm && !yes && !ask(cmd.InOrStdin(), cmd.OutOrStdout(), fmt.Sprintf("%s %s/%s? [y/N] ", use, ro.Namespace, ro.Name)) {
				return usageError{fmt.Errorf("not confirmed (pass --yes to skip the question)")}
			}
			return patchSpec(cmd.Context(), cmd.OutOrStdout(), c, ro, act)
		},
	}
	f.register(cmd.Flags())
	if confirm {
		cmd.Flags().BoolVarP(&yes, "yes", "y", false, "Do not ask for confirmation")
	}
	return cmd
}

func patchSpec(ctx context.Context, w io.Writer, c client.Client, ro *v1alpha1.Rollout, act action) error {
	base := ro.DeepCopy()
	msg, err := act(ro)
	if err != nil {
		return err
	}
	if err := c.Patch(ctx, ro, client.MergeFrom(base), client.FieldOwner("rollgate-cli")); err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s/%s: %s\n", ro.Namespace, ro.Name, msg)
	return err
}

func ask(in io.Reader, out io.Writer, q string) bool {
	fmt.Fprint(out, q)
	line, _ := bufio.NewReader(in).ReadString('\n')
	return strings.HasPrefix(strings.ToLower(strings.TrimSpace(line)), "y")
}

func approveAction(by string) action {
	return func(ro *v1alpha1.Rollout) (string, error) {
		a := ro.Status.AwaitingApproval
		if a == nil {
			return "", fmt.Errorf("Rollout %s/%s is not waiting for approval", ro.Namespace, ro.Name)
		}
		// The gate belongs to the attempt under way: after a retry, the
		// approvals of the failed attempt do not open it.
		attempt := max(a.Attempt, ro.Status.Attempt)
		rev := revisionOf(a.Revision, attempt)
		for _, x := range ro.Spec.Approvals {
			if x.Approves(a.Revision, attempt, a.Step) {
				return fmt.Sprintf("step %d of %s is already approved", a.Step, rev), nil
			}
		}
		approval := v1alpha1.Approval{Revision: a.Revision, Step: a.Step, ApprovedBy: by}
		if attempt > 1 {
			approval.Attempt = attempt
		}
		ro.Spec.Approvals = append(ro.Spec.Approvals, approval)
		return fmt.Sprintf("approved step %d of %s (in the cluster only: Git is not changed; prefer --repo)", a.Step, rev), nil
	}
}

func inRelease(ro *v1alpha1.Rollout) error {
	if ro.Status.CanaryRevision == "" || ro.Status.CanaryRevision == ro.Status.StableRevision {
		return fmt.Errorf("Rollout %s/%s has no release in progress", ro.Namespace, ro.Name)
	}
	return nil
}

func abortAction(ro *v1alpha1.Rollout) (string, error) {
	if err := inRelease(ro); err != nil {
		return "", err
	}
	ro.Spec.Abort = &v1alpha1.RevisionRequest{Revision: ro.Status.CanaryRevision, Reason: "rollgate abort"}
	return "aborting the release of revision " + ro.Status.CanaryRevision, nil
}

func retryAction(ro *v1alpha1.Rollout) (string, error) {
	if ro.Status.Phase != v1alpha1.PhaseFailed {
		return "", fmt.Errorf("Rollout %s/%s has not failed (phase %s): nothing to retry", ro.Namespace, ro.Name, dash(string(ro.Status.Phase)))
	}
	attempt := max(ro.Status.Attempt, 1) + 1
	ro.Spec.Abort = nil
	ro.Spec.Retry = &v1alpha1.RetryRequest{Revision: ro.Status.CanaryRevision, Attempt: attempt}
	return fmt.Sprintf("retrying revision %s as attempt %d", ro.Status.CanaryRevision, attempt), nil
}

func promoteAction(ro *v1alpha1.Rollout) (string, error) {
	if err := inRelease(ro); err != nil {
		return "", err
	}
	ro.Spec.Promote = &v1alpha1.RevisionRequest{Revision: ro.Status.CanaryRevision, Reason: "rollgate promote"}
	return "promoting revision " + ro.Status.CanaryRevision + ": the remaining steps are skipped", nil
}

func pauseAction(paused bool) action {
	return func(ro *v1alpha1.Rollout) (string, error) {
		ro.Spec.Strategy.Paused = paused
		if paused {
			return "paused", nil
		}
		return "resumed", nil
	}
}

func newApproveCommand() *cobra.Command {
	cf := &clusterFlags{}
	cmd := &cobra.Command{
		Use:   "approve <namespace/name>",
		Short: "Approve the step a Rollout waits at: in Git (--repo) or in the cluster",
		Long: `Approve the manual gate a Rollout waits at.

With --repo, the approval is written to Git, where it belongs: by default an
approval branch rollgate/approve/<ns>/<name>/<revision>-step-<n> is pushed for
you to merge (as a pull request, for review), or with --direct it is committed
straight to the tracked branch. The gate is read from rollgate's status files
in Git, so no cluster access is needed.

After spec.retry, the approval names the attempt (status.attempt) and the
branch is rollgate/approve/<ns>/<name>/<revision>-attempt-<k>-step-<n>: the
approvals of a failed attempt do not open the gates of the next one.

Without --repo, spec.approvals is patched in the cluster. Use that only when
Git cannot be reached: the approval is not recorded in Git.

Exit codes: 0 ok, 1 error, 2 bad usage, 3 no such Rollout (or no status in Git).`,
		Args: cobra.ExactArgs(1),
	}
	gf, branch, direct, by := newGitApproveFlags(cmd)
	cf.register(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if gf.repo != "" {
			ctx, cancel := context.WithTimeout(cmd.Context(), gf.timeout)
			defer cancel()
			return approveInGit(ctx, cmd.OutOrStdout(), gf, args[0], *branch, *direct, *by)
		}
		c, ns, err := cf.client()
		if err != nil {
			return err
		}
		ro, err := getRollout(cmd.Context(), c, ns, args[0])
		if err != nil {
			return err
		}
		return patchSpec(cmd.Context(), cmd.OutOrStdout(), c, ro, approveAction(*by))
	}
	return cmd
}

// newHandBackCommand is `rollgate handback <kind>/<name>`: a workload
// left held by a Rollout deleted mid-release goes back to its own
// controller.
func newHandBackCommand() *cobra.Command {
	f := &clusterFlags{}
	var yes bool
	cmd := &cobra.Command{
		Use:   "handback <kind>/<name>",
		Short: "Give a workload left held by a deleted Rollout back to its own controller",
		Long: "A Rollout deleted mid-release (spec.onDelete Hold, the default) leaves its workload held as it stands. " +
			"handback restores the update strategy Git declares and removes rollgate's annotation and label: the " +
			"workload's own controller then rolls the revision it declares to every pod at once, approved or not. " +
			"To continue the release step by step instead, apply the Rollout again.\n\n" +
			"Exit codes: 0 ok, 1 error, 2 bad usage, 3 the workload does not exist.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, name, ok := strings.Cut(args[0], "/")
			if !ok || name == "" {
				return usageError{fmt.Errorf("%q: name the workload as <kind>/<name>, such as deployment/echoserver", args[0])}
			}
			kinds := map[string]string{"deployment": "Deployment", "deploy": "Deployment", "statefulset": "StatefulSet", "sts": "StatefulSet", "daemonset": "DaemonSet", "ds": "DaemonSet"}
			k, ok := kinds[strings.ToLower(kind)]
			if !ok {
				return usageError{fmt.Errorf("kind %q: use deployment, statefulset or daemonset", kind)}
			}
			c, ns, err := f.client()
			if err != nil {
				return err
			}
			if !yes && !ask(cmd.InOrStdin(), cmd.OutOrStdout(), fmt.Sprintf("hand %s %s/%s back (every pod moves to its declared revision)? [y/N] ", k, ns, name)) {
				return usageError{fmt.Errorf("not confirmed (pass --yes to skip the question)")}
			}
			msg, err := workload.HandBack(cmd.Context(), c, ns, k, name)
			if apierrors.IsNotFound(err) {
				return notFoundError{fmt.Errorf("%s %s/%s not found", k, ns, name)}
			}
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), msg)
			return err
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "Do not ask for confirmation")
	return cmd
}

func addCLICommands(root *cobra.Command) {
	root.AddCommand(newGetCommand(), newWaitCommand(), newGitStatusCommand(), newApproveCommand(), newHandBackCommand(),
		newActionCommand("pause", "Hold a Rollout where it is (spec.strategy.paused=true)", "Hold the release: no more pods move and traffic stays where it is until resume.", pauseAction(true), false),
		newActionCommand("resume", "Let a paused Rollout continue (spec.strategy.paused=false)", "Let a paused release continue.", pauseAction(false), false),
		newActionCommand("abort", "Stop the release in progress and roll back (spec.abort)", "Stop the release of the current canary revision: traffic returns to the stable revision, the workload returns to the stable revision, and a revert is proposed in Git.", abortAction, true),
		newActionCommand("retry", "Restart a failed release from step 1 (spec.retry)", "Restart a failed or aborted release of the same revision from step 1, as a new attempt.", retryAction, false),
		newActionCommand("promote", "Skip the remaining steps and release fully (spec.promote)", "Skip the remaining steps of the release in progress, gates included, and release the new revision to every pod.", promoteAction, true),
	)
}
