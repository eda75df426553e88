// Command rollgate-controller is the rollgate controller alone: the binary
// of the image and the Helm chart. It has the flags of `rollgate
// controller` and none of the CLI, and links no package that executes
// text/template, so that the linker can drop the methods nothing calls: a
// smaller binary, and fewer of its pages resident
// (docs/benchmarks-history.md, P5, runs A to J).
// TestControllerBinaryKeepsMethodDeadCode guards that.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/pflag"

	"github.com/rollgate/rollgate/cmd/internal/controller"
)

// Exit codes, as the CLI's (docs/cli.md).
const (
	exitError = 1
	exitUsage = 2
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := pflag.NewFlagSet("rollgate-controller", pflag.ContinueOnError)
	fs.SortFlags = false
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: rollgate-controller [flags]\n\nThe rollgate controller and its admission webhook (the CLI's `rollgate controller`).\n\nFlags:\n%s", fs.FlagUsages())
	}
	f := &controller.Flags{}
	f.Register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "Error:", err)
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "Error: unexpected argument %q: rollgate-controller takes flags only (run rollgate-controller --help)\n", fs.Arg(0))
		return exitUsage
	}
	if err := controller.Run(f); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		if errors.As(err, &controller.UsageError{}) {
			return exitUsage
		}
		return exitError
	}
	return 0
}
