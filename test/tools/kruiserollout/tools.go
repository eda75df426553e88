//go:build tools

// Package kruiserollout pins OpenKruise Rollout, which the side-by-side
// benchmark (test/bench, BenchmarkSideBySide) runs as a local process next
// to rollgate on the same kwok cluster; test/tools/kruiserollout.mk builds
// it into bin/kruiserollout/kruise-rollout with its CRDs in
// bin/kruiserollout/crds/. It is a module of its own so its dependency set
// (controller-runtime v0.14, client-go v0.26) never moves rollgate's pins.
package kruiserollout

import (
	_ "github.com/openkruise/rollouts"
)
