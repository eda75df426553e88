// Package bench measures rollgate at scale on a real control plane: a kwok
// cluster (kube-apiserver, controller-manager, scheduler, fake kubelets)
// with the rollgate controller and its admission webhook running
// in-process, exactly as the end-to-end tests run them.
//
// It holds benchmarks only: `make bench` (go test -run '^$' -bench .)
// runs them and prints the numbers; `make test` compiles them and runs
// nothing. docs/benchmarks.md records the numbers and how to reproduce them.
package bench
