//go:build !linux

package flux

import "syscall"

// processAttr puts a controller in its own process group.
func processAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
