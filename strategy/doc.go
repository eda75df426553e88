// Package strategy plans releases: spec + observed state + now -> next
// action. It is pure: no client, no I/O, no clock, no package state. The
// reconciler observes, calls Decide, carries the Plan out and writes
// Plan.Status; the status is the planner's only memory, so a controller
// restarted at any instant derives the same decision again.
//
// # Calling it
//
// Each reconcile:
//
//	want := strategy.DesiredTraffic(&ro.Spec, &ro.Status)
//	obs.TrafficDone = routers.Ensure(want)   // Restore when want.Mode is Original
//	plan, err := strategy.Decide(&ro.Spec, &ro.Status, obs, now)
//	// err wraps ErrInvalidSpec: Stalled/InvalidSpec, no retry.
//	// Carry out plan.Workload (with CanaryReplicas, MaxUnavailable) and
//	// plan.Traffic, write plan.Status and plan.Conditions, record
//	// plan.Event if set, requeue after plan.RequeueAfter. Remove the
//	// finalizer once plan.Released.
//
// Observed.TrafficDone is the routers' answer for the traffic the input
// status asks for; the planner trusts it only while the next status asks
// for the same traffic, so a new traffic target is never taken as done.
//
// Write the next status before carrying out a plan that changes it. A
// controller that dies between the two then redoes the actions of the
// written status. Acting first is still safe (no gate is skipped, no step
// done twice), but a lost status write makes the next reconcile apply the
// older status's traffic again before moving on, and status writes that keep
// failing would make traffic flap.
//
// # The step machine
//
//	 new revision (template != stable, not the release in status)
//	   |
//	   v
//	+> StepUpgrade -----> StepTrafficRouting -> StepMetricsAnalysis -> StepPaused -------> StepReady -+
//	|  canary pods ready  routers done,         step analysis          timed pause over,              |
//	|  + availability     grace period over     Successful (or         or approval for                |
//	|  floor              (deadline counts)     approved if            (revision, step)               |
//	|  (deadline counts)                        Inconclusive)                                         |
//	+---------------------------- next step (index+1) <------------- more steps? ---------------------+
//	                                                                      | after the last step
//	                                                                      v
//	      Completed: traffic Original, then workload released; Healthy when all pods run the new revision
//	      (traffic all on the canary: Promoted, then workload released, then stable = canary and Original; Healthy)
//
//	abort / analysis Failed or Error / progress deadline, at any step:
//	      RollingBack, phase Failed: traffic Stable, then no canary pods (workload stays frozen at stable)
//	template back at the stable revision (revert in Git), also after a failure:
//	      RollingBack, phase Progressing: traffic Stable, workload released, traffic Original -> Healthy, RolledBack
//
// Within one call the machine advances as long as the conditions hold with
// the same observation, but it stops at any new traffic target and on
// entering an analysis, whose results the reconciler has yet to produce.
//
// # Decisions
//
// Gates. A gate is a gate: a step with a pause and no duration waits for an
// approval even when it is the last step at 100% (Kruise lets that one pass).
// Only an approval naming the canary revision, status.attempt and the
// current 1-based step opens it; approvals may be merged ahead of time. One
// approval opens every gate of its step (a manual pause and an inconclusive
// analysis). An approval without attempt names attempt 1, so after
// spec.retry the approvals of earlier attempts count for nothing and every
// gate of the new attempt waits for a new approval.
//
// Replicas. A percentage of the workload's replicas rounds up, so at least
// one pod for any step of 1% or more, and never exceeds the workload; a step
// without replicas follows its traffic percentage. Steps resolving to fewer
// pods than the step before (mixed numbers and percentages) are a SpecError.
// The planner never asks for fewer canary pods than already run: scaling the
// workload up re-resolves percentages upward at once, scaling it down keeps
// the canary pods that run (up to the workload's size).
//
// Traffic. Before the first step that sets traffic all traffic goes to the
// stable revision (Stable), so new pods take no requests until their step
// routes some; a step that sets no traffic keeps the previous step's. While
// a step's pods come up, the previous step's traffic stays.
//
// Availability. StepUpgrade ends when the canary revision has the step's
// number of ready pods and the ready pods of all revisions number at least
// replicas - MaxUnavailable (failureThreshold rounded down, else the
// workload's maxUnavailable); unready new pods are never waved through.
//
// Progress deadline. It counts only in StepUpgrade and in StepTrafficRouting
// while the routers have not confirmed; never in analysis, pauses, gates,
// grace periods, while held, or while finishing.
//
// Steps changed mid-release. The current step index is kept when it still
// exists; when the list became shorter the release continues at the new
// last step from StepUpgrade. Replicas do not go backwards (see above).
//
// Paused (spec.strategy.paused). Holds everything in place: no new release,
// no step, no promote, no retry, no clock (phase Paused, WorkloadKeep).
// Resuming restarts the current state's clock: the deadline counts afresh
// and a timed pause waits its full duration again. Safety is not held:
// abort, failed analysis and rollbacks go on while paused.
//
// Disabled (spec.disabled) and deletion. Both hand control back: the
// declared traffic is restored first, then the workload is released to its
// declared template (even a revision that failed, if Git still declares it)
// and a release in progress is cancelled. Phase Disabled with reason
// Disabled in both cases; Plan.Released says when the finalizer may go.
//
// Promote, abort, retry. spec.promote naming the canary revision skips the
// remaining steps and gates and finishes the release (held while paused,
// ignored after a failure). spec.abort naming it rolls back: phase Failed,
// reason Aborted, Stalled. spec.retry acts only on a failed release of its
// revision with an attempt above status.attempt, restarting from step 1; it
// waits while spec.abort still names the revision, which would abort the
// retry at once.
//
// Failure. Traffic moves to stable, then after the grace period the canary
// pods go; the workload stays frozen at the stable revision and traffic
// stays on stable until the revert in Git reaches the workload (a rollback
// by template, ending Healthy/RolledBack), a retry, or a new revision.
// Nothing else advances. Analysis Error counts as Failed. Background
// analysis fails the release at any step before Completed; an inconclusive
// background analysis gates the current step once its pause is over.
//
// Finishing. After the last step (or a promote) the declared routes come
// back first, the stable Service then reaching every pod, and the workload
// is released to update its remaining pods; the release is Healthy (Ready,
// reason Succeeded) when every pod runs the new revision with the
// availability floor holding, and stableRevision becomes the canary
// revision. When the step's traffic was all on the canary, the traffic is
// Promoted instead (the stable Service narrowed to the canary revision too)
// while the workload is released, so the old pods shut down with no request
// on them; once every pod runs the new revision, stableRevision becomes the
// canary revision, the declared routes come back (finishRelease), and then
// the release is Healthy. The status keeps the last step index and state
// Completed as the record of the release.
//
// Revisions. A release starts when the workload's template revision differs
// from the stable revision and from the release the status records; the
// stable revision is status.stableRevision, else the one the webhook
// recorded, else the template's. A new revision during a release restarts
// from step 1 against the same stable revision (continuous release).
//
// Times are stamped with second precision, as status stores them.
package strategy
