// Command rollgate is the rollgate controller and its command-line client.
//
// One binary holds every subcommand: `rollgate controller` runs the
// controller; the other subcommands are the CLI (also usable as
// `kubectl rollgate` through the kubectl-rollgate name). The commands only
// parse flags and wire packages together; the logic lives in the packages.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(exitCode(err))
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "rollgate",
		Short: "Progressive delivery for GitOps clusters, with Git as the source of truth",
		Long: `rollgate releases a new version of a Deployment, StatefulSet or DaemonSet in
batches, shifts traffic step by step, checks metrics, and keeps Git the source
of truth: approvals are merged pull requests, progress is written to Git, and a
failed release is reverted in Git.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newControllerCommand())
	root.AddCommand(newVersionCommand())
	root.AddCommand(newDemoCommand())
	addCLICommands(root)
	root.AddCommand(newLuaCommand())
	markUsageErrors(root)
	return root
}
