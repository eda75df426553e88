package gitsource

import (
	"time"

	"github.com/rollgate/rollgate/reconciler/metrics"
)

// Options configure the Git source. The controller's reconciler.Options
// fill them.
type Options struct {
	// Concurrent is the number of Repositories reconciled in parallel.
	Concurrent int
	// PushAddr is the listen address of the push-webhook endpoint; "" or
	// "0" disables it.
	PushAddr string
	// DefaultInterval is the fetch interval when a Repository sets none.
	DefaultInterval time.Duration
	// StatusBranch is the status branch when a Repository sets none.
	StatusBranch string
	// StatusWindow is the coalescing window when a Repository sets none.
	StatusWindow time.Duration
	// InsecureHTTP allows credentials over http:// (tests, in-cluster Git
	// servers).
	InsecureHTTP bool
	// Now reads the clock; nil means time.Now. Tests inject a clock.
	Now func() time.Time
	// Metrics records the Git metrics; nil records none.
	Metrics *metrics.Metrics
	// Lease is this process's leader election Lease: the status writers
	// write under the epoch read from it (gitsync.Fence). Nil without
	// leader election: epoch 0, no fencing.
	Lease *Lease
	// CollectInterval is how often each status writer removes the files
	// of deleted Rollouts; 0 means gitsync.DefaultCollectInterval.
	CollectInterval time.Duration
}

func (o Options) now() time.Time {
	if o.Now != nil {
		return o.Now()
	}
	return time.Now()
}
