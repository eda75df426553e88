// Command rollgate is rollgate's command-line client (also usable as
// `kubectl rollgate` through the kubectl-rollgate name). `rollgate
// controller` runs the controller next to a development cluster; the image
// and the chart run cmd/rollgate-controller, the same controller without
// the CLI. The commands only parse flags and wire packages together; the
// logic lives in the packages.
//
// The binary links no test code: the local demo is cmd/rollgate-demo, and
// TestLinksNoTestPackage guards that.
package main

import (
	"errors"
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

// newDemoMovedCommand answers `rollgate demo`, which older docs name: the
// demo is its own binary now, so that this one links no test code.
func newDemoMovedCommand() *cobra.Command {
	return &cobra.Command{
		Use:                "demo",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(*cobra.Command, []string) error {
			return usageError{errors.New("the demo is a binary of its own: run `make demo`, or bin/rollgate-demo after `make demo` has built it (docs/demo.md)")}
		},
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
	root.AddCommand(newDemoMovedCommand())
	addCLICommands(root)
	root.AddCommand(newHistoryCommand())
	root.AddCommand(newDashboardCommand())
	root.AddCommand(newLuaCommand())
	root.AddCommand(newPlanCommand())
	root.AddCommand(newConvertCommand())
	markUsageErrors(root)
	return root
}
