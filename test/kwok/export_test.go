package kwok

import "context"

// Revive and DeadComponents expose revive and deadComponents to the
// package's external tests.
func (c *Cluster) Revive(ctx context.Context) error { return c.revive(ctx) }

func (c *Cluster) DeadComponents() []string { return c.deadComponents() }

// AwaitControllers exposes awaitControllers to the tests.
func (c *Cluster) AwaitControllers(ctx context.Context) error { return c.awaitControllers(ctx) }

// PID is the recorded process id of the named component, 0 when none.
func (c *Cluster) PID(name string) int {
	for _, cp := range c.components() {
		if cp.name == name {
			return cp.pid
		}
	}
	return 0
}
