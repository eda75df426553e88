// Package rollout is rollgate's Rollout controller. It observes a
// workload, asks the pure strategy package for the next action and
// carries it out through the workload adapters (reconciler/workload), the
// traffic routers (traffic) and Git, which it reads and writes only
// through the Repository its spec.git names (reconciler/gitsource: the
// only package that fetches, pools clones, verifies approvals, wakes
// gates and runs the Repository controller). Package reconciler wires it
// into the manager.
//
// It is the only package that writes Rollout status, conditions and
// events. The packages it calls return values and wrapped errors; the
// reconciler maps them to condition reasons from api/v1alpha1.
package rollout
