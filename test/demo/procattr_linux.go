package demo

import "syscall"

// processAttr puts a child in its own process group and has the kernel kill
// it if the demo dies without stopping it (SIGKILL of the demo).
func processAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
