package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// Exit codes that scripts can rely on.
const (
	exitOK       = 0
	exitError    = 1 // any failure not listed below
	exitUsage    = 2 // bad flags or arguments
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
	switch {
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

// markUsageErrors makes bad flags and bad argument counts exit with
// exitUsage, on every command.
func markUsageErrors(c *cobra.Command) {
	c.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
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
