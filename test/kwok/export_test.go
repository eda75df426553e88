package kwok

import "context"

// Revive and DeadComponents expose revive and deadComponents to the
// package's external tests.
func (c *Cluster) Revive(ctx context.Context) error { return c.revive(ctx) }

func (c *Cluster) DeadComponents() []string { return c.deadComponents() }

// AwaitControllers exposes awaitControllers to the tests.
func (c *Cluster) AwaitControllers(ctx context.Context) error { return c.awaitControllers(ctx) }
