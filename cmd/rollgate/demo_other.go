//go:build !linux

package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// newDemoCommand is a stub: the demo runs its cluster and controllers as
// Linux processes (kwok's binary runtime, /proc, process groups).
func newDemoCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "demo",
		Short: "Run a whole release on this machine (Linux only; see docs/demo.md)",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return errors.New("rollgate demo runs on Linux only: it starts a kwok cluster and Flux as Linux processes")
		},
	}
}
