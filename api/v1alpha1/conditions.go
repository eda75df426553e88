package v1alpha1

// Condition types. Ready, Reconciling and Stalled follow kstatus, so that
// Flux, Argo CD and kubectl wait read a Rollout correctly.
const (
	// ReadyCondition is True when no release is in progress and the workload
	// runs the declared revision, or a release finished.
	ReadyCondition = "Ready"
	// ReconcilingCondition is True while the controller works towards the
	// spec (including a release in progress).
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
	// GitSyncedCondition is True while Git can be read and written: the
	// latest progress is queued and reaches the status branch within the
	// status window; False names the Git error.
	GitSyncedCondition = "GitSynced"
)

// Condition reasons.
const (
	// ReasonInvalidSpec: the spec cannot be acted on; the message says why.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonWorkloadNotFound: the workload in spec.workloadRef does not exist.
	ReasonWorkloadNotFound = "WorkloadNotFound"
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
	// ReasonProgressDeadlineExceeded: a step did not become ready in time.
	ReasonProgressDeadlineExceeded = "ProgressDeadlineExceeded"
	// ReasonTrafficShifted: the routers carry the desired traffic.
	ReasonTrafficShifted = "TrafficShifted"
	// ReasonTrafficPending: a router has not confirmed the traffic yet.
	ReasonTrafficPending = "TrafficPending"
	// ReasonTrafficError: a router failed.
	ReasonTrafficError = "TrafficError"
	// ReasonGitSynced: progress is in Git.
	ReasonGitSynced = "GitSynced"
	// ReasonGitError: Git could not be read or written; the release is not
	// blocked by status write-back failures, only gates are.
	ReasonGitError = "GitError"
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
