// Package validation holds rollgate's validating admission webhooks for its
// own kinds: AnalysisTemplates whose conditions must compile, and Rollouts
// that must not name a workload another Rollout already releases. The
// webhook package serves and registers them.
package validation
