// Command pause is the pod sandbox ("pause") image of the real node: it
// holds the pod's namespaces open, reaps any orphaned child it inherits as
// PID 1, and exits 0 on SIGTERM or SIGINT. It is a static Go binary, so the
// image needs no libc.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
