//go:build linux

package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/rollgate/rollgate/test/demo"
)

func newDemoCommand() *cobra.Command {
	var opts demo.Options
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a whole release on this machine: kwok cluster, Git server, Flux, rollgate",
		Long: `Run rollgate's story on this machine, from a checkout with the tools built
(make demo): a simulated Kubernetes cluster (kwok), a Git server on loopback
holding an application, Flux's source-controller and kustomize-controller
applying it, and this binary as the rollgate controller. A developer bumps the
image in Git; Flux applies it; rollgate releases it step by step and pushes an
approval branch; the branch is merged (by you, with --interactive); the
release completes; and its status is read back from Git.

Everything runs on 127.0.0.1 and is torn down at the end or on Ctrl-C.
See docs/demo.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			opts.Out = cmd.OutOrStdout()
			err := demo.Run(ctx, opts)
			if errors.Is(err, context.Canceled) && ctx.Err() != nil {
				return errors.New("interrupted")
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&opts.Interactive, "interactive", false, "Wait for you to approve the first step (merge the approval branch, or rollgate approve) instead of merging it automatically")
	cmd.Flags().BoolVar(&opts.Keep, "keep", false, "After the release, keep everything running and print how to connect; Ctrl-C tears it down")
	cmd.Flags().DurationVar(&opts.ApprovalDelay, "approval-delay", 0, "How long the approval branch stays open before it is merged, without --interactive (default 3s)")
	return cmd
}
