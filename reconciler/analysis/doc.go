// Package analysis takes metric measurements for a Rollout: it talks to
// Prometheus and to JSON web endpoints, expands query placeholders, and
// runs the measurement state machine of strategy/verdict over the
// metrics of a Rollout's AnalysisTemplates.
//
// The reconciler calls Runner.Run once per reconcile while an analysis is
// active; Run takes only the measurements that are due, returns the updated
// status.analysis entries, the aggregated outcome and when to come back.
// HTTP clients are built with prometheus/common's config package.
// Credentials come from Secrets the caller reads; they are sent only to the
// configured origin and never appear in errors or measurement messages.
package analysis
