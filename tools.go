//go:build tools

// This file keeps module dependencies that later packages need pinned in
// go.mod while those packages are being written.
package tools

import (
	_ "github.com/fluxcd/pkg/runtime/conditions"
	_ "github.com/fluxcd/pkg/runtime/patch"
	_ "github.com/go-git/go-git/v5"
	_ "github.com/go-git/go-git/v5/plumbing/transport/http"
	_ "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	_ "github.com/google/cel-go/cel"
	_ "github.com/prometheus/client_golang/api"
	_ "github.com/prometheus/common/model"
	_ "github.com/spf13/cobra"
	_ "github.com/yuin/gopher-lua"
	_ "k8s.io/apiserver/pkg/cel"
	_ "sigs.k8s.io/controller-runtime"
	_ "sigs.k8s.io/controller-runtime/pkg/envtest"
	_ "sigs.k8s.io/gateway-api/apis/v1"
	_ "sigs.k8s.io/kustomize/kyaml/yaml"
)
