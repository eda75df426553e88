//go:build tools

// Package helmcontroller pins Flux's helm-controller, which the HelmRelease
// tests (test/helmrelease) run as a local process next to the source-controller
// of test/tools/flux; test/tools/helmcontroller.mk builds it into
// bin/flux/helm-controller. It is a module of its own so its dependency set
// (Helm v4, controller-runtime v0.24) never moves the pins of test/tools/flux.
package helmcontroller

import (
	_ "github.com/fluxcd/helm-controller"
)
