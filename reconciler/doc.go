// Package reconciler wires rollgate's manager (NewManager, Setup): the
// scheme, the cache, leader election and shards, and the controllers and
// webhooks of its packages. The Rollout controller is reconciler/rollout;
// Git, and the Repository controller, are reconciler/gitsource (the only
// package that fetches, pools clones, verifies approvals and wakes
// gates). The admission webhooks that hold workloads and check routes
// live in reconciler/webhook, reconciler/routehook and
// reconciler/validation.
package reconciler
