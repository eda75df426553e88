//go:build linux

// Command rollgate-demo runs rollgate's whole story on this machine (make
// demo): a kwok cluster, a Git server on loopback, Flux, and the rollgate
// binary as the controller. It is a binary of its own so that the shipped
// rollgate binary does not link the test platform it is built from
// (test/demo, test/kwok, test/gitserver, test/flux).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/rollgate/rollgate/test/demo"
)

// Exit codes, the same as rollgate's (docs/cli.md).
const (
	exitError = 1
	exitUsage = 2
)

// usageError marks bad flags or arguments.
type usageError struct{ error }

func main() {
	if err := newCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		if errors.As(err, new(usageError)) {
			os.Exit(exitUsage)
		}
		os.Exit(exitError)
	}
}

func newCommand() *cobra.Command {
	var opts demo.Options
	cmd := &cobra.Command{
		Use:   "rollgate-demo",
		Short: "Run a whole release on this machine: kwok cluster, Git server, Flux, rollgate",
		Long: `Run rollgate's story on this machine, from a checkout with the tools built
(make demo): a simulated Kubernetes cluster (kwok), a Git server on loopback
holding an application, Flux's source-controller and kustomize-controller
applying it, and the rollgate binary as the controller. A developer bumps the
image in Git; Flux applies it; rollgate releases it step by step and pushes an
approval branch; the branch is merged (by you, with --interactive); the
release completes; and its status is read back from Git.

Everything runs on 127.0.0.1 and is torn down at the end or on Ctrl-C.
See docs/demo.md.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
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
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	args := cmd.Args
	cmd.Args = func(c *cobra.Command, a []string) error {
		if err := args(c, a); err != nil {
			return usageError{err}
		}
		return nil
	}
	cmd.Flags().BoolVar(&opts.Interactive, "interactive", false, "Wait for you to approve the first step (merge the approval branch, or rollgate approve) instead of merging it automatically")
	cmd.Flags().BoolVar(&opts.Keep, "keep", false, "After the release, keep everything running and print how to connect; Ctrl-C tears it down")
	cmd.Flags().DurationVar(&opts.ApprovalDelay, "approval-delay", 0, "How long the approval branch stays open before it is merged, without --interactive (default 3s)")
	cmd.Flags().StringVar(&opts.Rollgate, "rollgate", "", "The rollgate binary run as the controller and the CLI (default: rollgate next to this binary, else bin/rollgate of the checkout)")
	return cmd
}
