//go:build tools

// Package kbinsoldest pins the kube-apiserver of the oldest Kubernetes
// minor rollgate promises (docs/install.md): the API tests run their CRD
// schemas, CEL rules and admission webhooks' matchConditions against it
// beside the current one (`make tools-k8s-oldest`, into bin/k8s-oldest/).
package kbinsoldest

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
