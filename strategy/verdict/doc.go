// Package verdict is the pure part of metric analysis (the verdicts): it compiles the CEL
// success and failure conditions of an AnalysisTemplate, judges one measured
// value, advances each metric's recorded history (status.analysis) by one
// measurement, says when the next measurement is due, and folds all metrics
// into one outcome for the reconciler.
//
// Nothing here performs I/O or reads the clock: the caller passes `now` and
// the value a provider measured. The providers (Prometheus, web) live in
// reconciler/analysis.
//
// The rules, in short:
//
//   - A measurement is Failed when failureCondition is true, otherwise
//     Successful when successCondition is true. When successCondition is
//     false it is Failed if it is the only condition and Inconclusive if a
//     failureCondition is also set. When only failureCondition is set and it
//     is false, the measurement is Successful.
//   - An empty result, a NaN, a provider error or a condition that cannot be
//     evaluated is an Error, never a pass.
//   - A metric is Failed once Failed > failureLimit, Error once
//     ConsecutiveErrors > consecutiveErrorLimit (default 4), Inconclusive
//     once Inconclusive > inconclusiveLimit, and Successful once it has
//     count decided (non-error) measurements. Otherwise it is Running.
//   - A dry-run metric is recorded but never fails or blocks the outcome.
package verdict
