//go:build tools

// Package argocd pins Argo CD, whose application-controller, repo-server
// and API server the Argo CD tests run as local processes (test/argocd),
// built from the Go module proxy; test/tools/argocd.mk builds the one
// binary into bin/argocd/. The replace block of go.mod is Argo CD's own
// (a required module's replace lines do not apply, so `go install
// ...@version` cannot build it).
package argocd

import (
	_ "github.com/argoproj/argo-cd/v3/cmd"
)
