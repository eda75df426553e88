package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// Exit codes that scripts can rely on.
const (
	exitOK       = 0
	exitError    = 1 // any failure not listed below
	exitUsage    = 2 // bad usage: an unknown command or flag, bad arguments or flag values
	exitNotFound = 3 // the named object does not exist
)

// usageError marks an error caused by bad flags or arguments.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// notFoundError marks an error caused by a missing object.
type notFoundError struct{ err error }

func (e notFoundError) Error() string { return e.err.Error() }
func (e notFoundError) Unwrap() error { return e.err }

func exitCode(err error) int {
	var u usageError
	var n notFoundError
	var f releaseFailed
	var t timedOut
	var inv invalidSpec
	var nc notConverted
	switch {
	case errors.As(err, &inv):
		return exitInvalid
	case errors.As(err, &nc):
		return exitNotConverted
	case errors.As(err, &f):
		return exitReleaseFailed
	case errors.As(err, &t):
		return exitTimeout
	case err == nil:
		return exitOK
	case errors.As(err, &u):
		return exitUsage
	case errors.As(err, &n):
		return exitNotFound
	default:
		return exitError
	}
}

// markUsageErrors makes unknown commands, bad flags and bad argument
// counts exit with exitUsage, on every command.
func markUsageErrors(c *cobra.Command) {
	c.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	if !c.Runnable() && c.HasSubCommands() {
		// A group (rollgate, rollgate lua): cobra would print its help
		// and exit 0 on an unknown subcommand of a group below the root.
		c.Args = cobra.ArbitraryArgs
		c.RunE = unknownCommand
	}
	if args := c.Args; args != nil {
		c.Args = func(cmd *cobra.Command, a []string) error {
			if err := args(cmd, a); err != nil {
				return usageError{err}
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		markUsageErrors(sub)
	}
}

// unknownCommand runs a group of commands: without arguments it prints
// the group's help; with any, it names the unknown command.
func unknownCommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return cmd.Help()
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's default, applied where it suggests itself
	}
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	}
	return usageError{errors.New(msg)}
}
