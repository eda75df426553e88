//go:build tools

// Package kbins pins the Kubernetes control-plane binaries that the test
// platform builds from the Go module proxy (kube-apiserver,
// kube-controller-manager, kube-scheduler, kubectl for the docs test, and
// kubelet and kube-proxy for the real node of test/realnode).
package kbins

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
