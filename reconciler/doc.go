// Package reconciler holds rollgate's controllers: the Rollout reconciler,
// which observes a workload, asks the pure strategy package for the next
// action and carries it out through the workload adapters
// (reconciler/workload), the traffic routers (traffic) and Git (gitsync);
// the Repository reconciler, which reports whether Git can be read and
// written; and the admission webhook that freezes workloads
// (reconciler/webhook).
//
// It is the only package that writes Rollout and Repository status,
// conditions and events. The packages it calls return values and wrapped errors; the
// reconciler maps them to condition reasons from api/v1alpha1.
package reconciler
