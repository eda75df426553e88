//go:build !linux

package proc

import "syscall"

// processAttr puts a child in its own process group.
func processAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
