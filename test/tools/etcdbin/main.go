// Command etcd is the etcd server built from the Go module proxy at the
// version Kubernetes itself is built against (go.mod pins it). Debian's
// etcd-server 3.4.23 is too old for kube-apiserver 1.36: it lacks
// RequestWatchProgress (etcd >= 3.4.31 / 3.5.13), so every watch-list
// request of client-go >= 0.35 fails and informers fall back to relisting,
// seeing changes seconds late.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
