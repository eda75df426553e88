//go:build !linux

// Command rollgate-demo runs rollgate's whole story on this machine; it
// needs Linux (see docs/demo.md).
package main

import (
	"fmt"
	"os"
)

// main fails: the demo runs its cluster and controllers as Linux processes
// (kwok's binary runtime, /proc, process groups).
func main() {
	fmt.Fprintln(os.Stderr, "Error: rollgate-demo runs on Linux only: it starts a kwok cluster and Flux as Linux processes")
	os.Exit(1)
}
