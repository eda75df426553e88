package chartrun

import "syscall"

// processAttr puts the controller in its own process group (Stop signals
// the group) and has the kernel kill it if the test binary dies without
// stopping it.
func processAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
