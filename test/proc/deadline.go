package proc

import (
	"context"
	"time"
)

// TestContext is a context that ends at t's deadline when t has one (a
// *testing.T under go test -timeout), so that what a test starts gives up
// before go test kills the binary; cancel releases it.
func TestContext(t any) (ctx context.Context, cancel context.CancelFunc) {
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if deadline, ok := d.Deadline(); ok {
			return context.WithDeadline(context.Background(), deadline)
		}
	}
	return context.WithCancel(context.Background())
}
