package proc

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"
)

// Lock takes an exclusive flock on path (created if missing), waiting
// until it is free or ctx ends. The lock belongs to the returned file: it
// is released by closing the file, or by the kernel when the process
// exits, so a test that dies leaves no stale lock behind. Test packages
// run as separate processes under `go test ./...`; a lock file is how
// they share something the machine has only one of.
func Lock(ctx context.Context, path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("%s is held by another process: %w", path, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
