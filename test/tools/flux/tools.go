//go:build tools

// Package flux pins the Flux controllers the demo runs as local processes
// (source-controller and kustomize-controller), built from the Go module
// proxy; test/tools/tools.mk builds them into bin/flux/.
package flux

import (
	_ "github.com/fluxcd/kustomize-controller"
	_ "github.com/fluxcd/source-controller"
)
