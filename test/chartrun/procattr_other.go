//go:build !linux

package chartrun

import "syscall"

// processAttr puts the controller in its own process group (Stop signals
// the group).
func processAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
