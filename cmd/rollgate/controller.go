package main

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/rollgate/rollgate/cmd/internal/controller"
)

// newControllerCommand runs the controller from the CLI, for a development
// cluster; the image and the chart run the smaller rollgate-controller
// binary, which has the same flags.
func newControllerCommand() *cobra.Command {
	f := &controller.Flags{}
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run the rollgate controller and its admission webhook",
		Long: `Run the rollgate controller: it watches Rollouts and the workloads they cover,
freezes new revisions at admission, releases them step by step, moves traffic,
runs analysis, and writes progress, approvals and reverts to Git.

In a cluster, install it with the Helm chart (charts/rollgate), which runs the
rollgate-controller binary of the image (the same flags, without the CLI). As a
local process next to a development cluster, pass --kubeconfig, --webhook-url
https://127.0.0.1:<port> and --webhook-bind-host 127.0.0.1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			err := controller.Run(f)
			if u := (controller.UsageError{}); errors.As(err, &u) {
				return usageError{err}
			}
			return err
		},
	}
	f.Register(cmd.Flags())
	return cmd
}
