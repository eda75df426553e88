//go:build tools

// Package argorollouts pins Argo Rollouts, which the side-by-side benchmark
// (test/bench, BenchmarkSideBySide) runs as a local process next to
// rollgate and OpenKruise Rollout on the same kwok cluster;
// test/tools/argorollouts.mk builds its controller into
// bin/argorollouts/rollouts-controller with its CRDs in
// bin/argorollouts/crds/. It is a module of its own so its dependency set
// never moves rollgate's pins, and it needs a newer Go than rollgate's:
// argorollouts.mk builds it with GOTOOLCHAIN set for that one command.
package argorollouts

import (
	_ "github.com/argoproj/argo-rollouts/cmd/rollouts-controller"
)
