package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/rollgate/rollgate/luascripts"
)

func newLuaCommand() *cobra.Command {
	lua := &cobra.Command{
		Use:   "lua",
		Short: "Work with traffic-routing Lua scripts",
	}
	lua.AddCommand(&cobra.Command{
		Use:   "test <dir>",
		Short: "Run golden test cases against traffic-routing Lua scripts",
		Long: `Run the test cases in <dir> the way rollgate runs scripts in the cluster
(same sandbox, same inputs). <dir> holds scripts named as ConfigMap keys would
name them (<Kind>.<group>.lua, or ingress.<classType>.lua), which override the
built-in scripts, and case files with rollout:, original: and expected: (one
expected object per step). See luascripts/README.md for the format.

Prints one line per passing case and a diff per failing step. A built-in
that also exists in Go (the Istio VirtualService and DestinationRule) runs
in both versions on every step, and the step fails when they differ.
Exit codes: 0 all passed, 1 a step failed, or the directory cannot be read
or holds no case file; 2 bad usage.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			failed, err := luascripts.RunCases(args[0], nil, cmd.OutOrStdout())
			if err != nil {
				return err
			}
			if failed > 0 {
				return fmt.Errorf("%d step(s) failed", failed)
			}
			return nil
		},
	})
	return lua
}
