package v1alpha1

// Condition types. Ready, Reconciling and Stalled follow kstatus, so that
// Flux, Argo CD and kubectl wait read a Rollout correctly.
const (
	// ReadyCondition is True when no release is in progress and the workload
	// runs the declared revision, or a release finished. It is absent while
	// a release is under way (its steps, timed pauses and gates), which
	// kstatus reads as Current: an applier's wait (Flux's health checks,
	// helm-controller's upgrade wait) is over once rollgate holds the new
	// revision, while `kubectl wait --for=condition=Ready` waits for the
	// whole release.
	ReadyCondition = "Ready"
	// ReconcilingCondition is True while the controller cannot take a new
	// revision over yet (a missing dependency), retries an error, or rolls
	// a failed release back; False while a release runs as planned.
	ReconcilingCondition = "Reconciling"
	// StalledCondition is True when the controller cannot progress without a
	// change to the spec (invalid spec, failed release).
	StalledCondition = "Stalled"
	// ProgressingCondition is True while a release moves forward.
	ProgressingCondition = "Progressing"
	// AwaitingApprovalCondition is True while a gate waits for approval.
	AwaitingApprovalCondition = "AwaitingApproval"
	// TrafficShiftedCondition is True when the routers carry the step's traffic.
	TrafficShiftedCondition = "TrafficShifted"
	// AnalysisCondition reports the outcome of metric analysis.
	AnalysisCondition = "Analysis"
	// GitSyncedCondition is True when the status branch holds the
	// Rollout's current progress (status.git.statusCommit names the commit
	// that wrote it) and Git could be read. False with reason GitPending
	// while that progress waits for the next write (within the status
	// window), with reason GitError when Git cannot be read or written.
	// A Rollout's own status changes make it False until written, so
	// `kubectl wait --for=condition=GitSynced` after a step returns once
	// Git says what the cluster says. It never affects Ready, Reconciling
	// or Stalled.
	GitSyncedCondition = "GitSynced"
	// ApprovalVerifiedCondition reports the last approval found in Git for
	// a waiting gate when the Repository restricts approvals
	// (spec.approvals): True when it counts (the message names the commit
	// and the key that signed it), False with reason ApprovalRejected when
	// it does not (the message names the commit and why). Absent when the
	// Repository does not restrict approvals.
	ApprovalVerifiedCondition = "ApprovalVerified"
)

// Condition reasons.
const (
	// ReasonInvalidSpec: the spec cannot be acted on; the message says why.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonWorkloadNotFound: the workload in spec.workloadRef does not exist.
	ReasonWorkloadNotFound = "WorkloadNotFound"
	// ReasonDependencyNotFound: an object or script a release needs (a
	// Service, route, Lua script or AnalysisTemplate the spec names) does
	// not exist; no release starts until it does.
	ReasonDependencyNotFound = "DependencyNotFound"
	// ReasonWaitingForFleet: spec.fleet.waitFor names a release in another
	// cluster that has not reached the point this step waits for, or
	// failed there; the message names the cluster and why.
	ReasonWaitingForFleet = "WaitingForFleet"
	// ReasonWaitingForHook: a hook of the step (before it starts, or
	// after it is done) has not answered yes yet.
	ReasonWaitingForHook = "WaitingForHook"
	// ReasonWaitingForFreeze: a freeze or a window of the Repository's
	// freezes file (spec.releaseRules) holds the start of the release or of
	// its next step; the message names it, and who merged a freeze.
	ReasonWaitingForFreeze = "WaitingForFreeze"
	// ReasonWaitingForBudget: a budget of the release rules has no place
	// for another release in flight; the release waits in its queue
	// (status.queue), first come first served.
	ReasonWaitingForBudget = "WaitingForBudget"
	// ReasonWaitingForGroup: a member of a lockstep group (spec.group)
	// finished its step and waits for the other members to finish theirs,
	// or waits at a gate the group's coordinator is approved at; the
	// message names the members it waits for.
	ReasonWaitingForGroup = "WaitingForGroup"
	// ReasonGroupFailed: another member of the lockstep group failed or
	// was aborted during this release, so this member rolls back too.
	ReasonGroupFailed = "GroupFailed"
	// ReasonIdle: no release is in progress.
	ReasonIdle = "Idle"
	// ReasonProgressing: a release is moving forward.
	ReasonProgressing = "Progressing"
	// ReasonWaitingForApproval: a gate waits for a merged approval.
	ReasonWaitingForApproval = "WaitingForApproval"
	// ReasonAnalysisInconclusive: analysis could not decide; a human must.
	ReasonAnalysisInconclusive = "AnalysisInconclusive"
	// ReasonPausing: a timed pause is running.
	ReasonPausing = "Pausing"
	// ReasonPaused: spec.strategy.paused holds the release.
	ReasonPaused = "Paused"
	// ReasonDisabled: spec.disabled is true.
	ReasonDisabled = "Disabled"
	// ReasonSucceeded: the release finished.
	ReasonSucceeded = "Succeeded"
	// ReasonRollingBack: the release is being undone.
	ReasonRollingBack = "RollingBack"
	// ReasonRolledBack: the release was undone because the workload's
	// template returned to the stable revision.
	ReasonRolledBack = "RolledBack"
	// ReasonAborted: spec.abort stopped the release.
	ReasonAborted = "Aborted"
	// ReasonAnalysisFailed: a metric failed its condition.
	ReasonAnalysisFailed = "AnalysisFailed"
	// ReasonHookFailed: a hook answered no for the last time.
	ReasonHookFailed = "HookFailed"
	// ReasonProgressDeadlineExceeded: a step did not become ready in time.
	ReasonProgressDeadlineExceeded = "ProgressDeadlineExceeded"
	// ReasonTrafficShifted: the routers carry the desired traffic.
	ReasonTrafficShifted = "TrafficShifted"
	// ReasonTrafficPending: a router has not confirmed the traffic yet.
	ReasonTrafficPending = "TrafficPending"
	// ReasonTrafficError: a router failed.
	ReasonTrafficError = "TrafficError"
	// ReasonGitSynced: the Rollout's current progress is in Git.
	ReasonGitSynced = "GitSynced"
	// ReasonGitPending: the Rollout's current progress is queued for the
	// status branch and is written at the end of the status window.
	ReasonGitPending = "GitPending"
	// ReasonGitError: Git could not be read or written; the release is not
	// blocked by status write-back failures, only gates are. On a
	// Repository: its last fetch or status write failed.
	ReasonGitError = "GitError"
	// ReasonApprovalVerified: the approval in Git passed the Repository's
	// checks (signature, merge).
	ReasonApprovalVerified = "ApprovalVerified"
	// ReasonApprovalRejected: an approval in Git was ignored: its commit is
	// unsigned, signed by an untrusted or expired key, or not a merge.
	ReasonApprovalRejected = "ApprovalRejected"
	// ReasonGitReachable: on a Repository, the last fetch of the tracked
	// branch and the last status write succeeded.
	ReasonGitReachable = "GitReachable"
)

// Labels and annotations rollgate puts on objects.
const (
	// LabelRolloutID on pods: the rollout id of the release that created them
	// (<rollout name>-<canary revision>).
	LabelRolloutID = "rollgate.dev/rollout-id"
	// LabelBatchID on pods: the 1-based step that created them.
	LabelBatchID = "rollgate.dev/batch-id"
	// LabelRevision on pods and canary objects: the rollgate revision of the
	// pod template.
	LabelRevision = "rollgate.dev/revision"
	// LabelControlled on workloads: a Rollout covers this workload, so the
	// admission webhook looks at its updates.
	LabelControlled = "rollgate.dev/controlled"
	// AnnotationControl on workloads: the release state the webhook
	// re-asserts (JSON), including the workload's declared settings to
	// restore at the end.
	AnnotationControl = "rollgate.dev/control"
	// AnnotationOriginal on routing objects: their declared state saved
	// before the first traffic change, restored at the end.
	AnnotationOriginal = "rollgate.dev/original"
)
