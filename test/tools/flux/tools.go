//go:build tools

// Package flux pins the Flux controllers the demo and its tests run as local
// processes (source-controller, kustomize-controller and
// notification-controller), built from the Go module proxy;
// test/tools/tools.mk builds them into bin/flux/.
package flux

import (
	_ "github.com/fluxcd/kustomize-controller"
	_ "github.com/fluxcd/notification-controller"
	_ "github.com/fluxcd/source-controller"
)
