package proc

import "syscall"

// processAttr puts a child in its own process group and has the kernel
// kill it if its parent dies without stopping it.
func processAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
