package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RolloutPhase is a one-word summary of a Rollout, for humans. Machines read
// the conditions.
// +kubebuilder:validation:Enum=Initial;Healthy;Progressing;Paused;Failed;Disabled
type RolloutPhase string

// Phases of a Rollout.
const (
	// PhaseInitial: the controller has not looked at the workload yet.
	PhaseInitial RolloutPhase = "Initial"
	// PhaseHealthy: no release is in progress; the workload runs one revision.
	PhaseHealthy RolloutPhase = "Healthy"
	// PhaseProgressing: a release is in progress (including waiting for approval).
	PhaseProgressing RolloutPhase = "Progressing"
	// PhasePaused: spec.strategy.paused holds the release.
	PhasePaused RolloutPhase = "Paused"
	// PhaseFailed: the release failed or was aborted and was rolled back.
	PhaseFailed RolloutPhase = "Failed"
	// PhaseDisabled: spec.disabled is true.
	PhaseDisabled RolloutPhase = "Disabled"
)

// StepState is where the current step is, using Kruise Rollout's names.
// +kubebuilder:validation:Enum=StepUpgrade;StepTrafficRouting;StepMetricsAnalysis;StepPaused;StepReady;Completed;RollingBack;RolledBack
type StepState string

// States of a step.
const (
	// StepUpgrade: bringing the step's number of new pods up and ready.
	StepUpgrade StepState = "StepUpgrade"
	// StepTrafficRouting: moving traffic to the step's share.
	StepTrafficRouting StepState = "StepTrafficRouting"
	// StepMetricsAnalysis: waiting for the step's analysis to finish.
	StepMetricsAnalysis StepState = "StepMetricsAnalysis"
	// StepPaused: waiting for a pause to end or for approval.
	StepPaused StepState = "StepPaused"
	// StepReady: the step is done; the next one starts.
	StepReady StepState = "StepReady"
	// StepCompleted: the last step is done and the release is finished.
	StepCompleted StepState = "Completed"
	// StepRollingBack: traffic and pods are returning to the stable revision.
	StepRollingBack StepState = "RollingBack"
	// StepRolledBack: the release ended by returning to the stable
	// revision (a revert in Git reached the workload); the step index
	// tells how far it had come.
	StepRolledBack StepState = "RolledBack"
)

// RolloutStatus is what the controller observed and did.
type RolloutStatus struct {
	// ObservedGeneration is the generation of the spec last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready, Reconciling and Stalled (kstatus), plus Progressing,
	// AwaitingApproval, TrafficShifted, Analysis and GitSynced.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Phase summarises the Rollout in one word.
	// +optional
	Phase RolloutPhase `json:"phase,omitempty"`

	// Message says, for a human, what is happening and what it waits for.
	// +optional
	Message string `json:"message,omitempty"`

	// StableRevision is the revision released before this release.
	// +optional
	StableRevision string `json:"stableRevision,omitempty"`

	// CanaryRevision is the revision being released.
	// +optional
	CanaryRevision string `json:"canaryRevision,omitempty"`

	// Attempt counts releases of the canary revision: 1 for the first,
	// then the attempt of each spec.retry. A gate of attempt 2 or later
	// opens only for an approval naming that attempt.
	// +optional
	Attempt int32 `json:"attempt,omitempty"`

	// CurrentStepIndex is the 1-based step in progress; 0 when no release
	// is in progress.
	// +optional
	CurrentStepIndex int32 `json:"currentStepIndex,omitempty"`

	// StepCount is the number of steps of the release.
	// +optional
	StepCount int32 `json:"stepCount,omitempty"`

	// CurrentStepState is the state of the current step.
	// +optional
	CurrentStepState StepState `json:"currentStepState,omitempty"`

	// StepStartedAt is when the current step state began (pause and
	// deadline clocks start here).
	// +optional
	StepStartedAt *metav1.Time `json:"stepStartedAt,omitempty"`

	// ReleaseStartedAt is when the release of the canary revision began.
	// +optional
	ReleaseStartedAt *metav1.Time `json:"releaseStartedAt,omitempty"`

	// Replicas is the workload's desired number of pods.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// StableReplicas is the number of pods of the stable revision.
	// +optional
	StableReplicas int32 `json:"stableReplicas,omitempty"`
	// StableReadyReplicas is the number of ready pods of the stable revision.
	// +optional
	StableReadyReplicas int32 `json:"stableReadyReplicas,omitempty"`
	// CanaryReplicas is the number of pods of the canary revision.
	// +optional
	CanaryReplicas int32 `json:"canaryReplicas,omitempty"`
	// CanaryReadyReplicas is the number of ready pods of the canary revision.
	// +optional
	CanaryReadyReplicas int32 `json:"canaryReadyReplicas,omitempty"`

	// CanaryWeight is the percentage of traffic routed to the canary.
	// +optional
	CanaryWeight int32 `json:"canaryWeight,omitempty"`
	// Traffic describes the traffic split for humans: "5%", or "matches".
	// +optional
	Traffic string `json:"traffic,omitempty"`

	// AwaitingApproval is set while a gate waits for approval.
	// +optional
	AwaitingApproval *ApprovalRequest `json:"awaitingApproval,omitempty"`

	// Queue is set while a new release waits for a place in a budget of
	// the Repository's release rules (docs/coordination.md).
	// +optional
	Queue *QueueStatus `json:"queue,omitempty"`

	// Analysis holds the latest results of running analyses (bounded).
	// +kubebuilder:validation:MaxItems=20
	// +listType=atomic
	// +optional
	Analysis []MetricResult `json:"analysis,omitempty"`

	// Hooks are the answers of the hooks of the point the release is at
	// (a step's after hooks and the next step's before hooks) and of its
	// onRollback hooks.
	// +kubebuilder:validation:MaxItems=20
	// +listType=atomic
	// +optional
	Hooks []HookStatus `json:"hooks,omitempty"`

	// Git says where progress was last written in Git.
	// +optional
	Git *GitStatus `json:"git,omitempty"`
}

// QueueStatus is a release's place in the queue of a budget.
type QueueStatus struct {
	// Budget names the budget (the name in the release rules file).
	Budget string `json:"budget"`
	// Position is the release's place among those waiting (1: next).
	Position int32 `json:"position"`
	// Since is when the release began to wait: the queue is first come,
	// first served.
	Since metav1.Time `json:"since"`
}

// ApprovalRequest describes a gate waiting for approval.
type ApprovalRequest struct {
	// Revision the approval must name.
	Revision string `json:"revision"`
	// Step the approval must name (1-based).
	Step int32 `json:"step"`
	// Attempt the approval must name, set from the second attempt on
	// (status.attempt after spec.retry); unset means attempt 1.
	// +optional
	Attempt int32 `json:"attempt,omitempty"`
	// Since when the gate waits.
	Since metav1.Time `json:"since"`
	// Branch in Git whose merge approves the step.
	// +optional
	Branch string `json:"branch,omitempty"`
	// PullRequestURL of the approval pull request, where a forge is configured.
	// +optional
	PullRequestURL string `json:"pullRequestURL,omitempty"`
	// Reason for the gate: "Manual" (a pause without duration) or
	// "Inconclusive" (analysis could not decide).
	// +optional
	Reason string `json:"reason,omitempty"`
}

// MetricResult is the recent history of one metric of an analysis.
type MetricResult struct {
	// Template is the AnalysisTemplate name.
	Template string `json:"template"`
	// Metric is the metric name inside the template.
	Metric string `json:"metric"`
	// Step is the step the analysis belongs to; 0 for background analysis.
	// +optional
	Step int32 `json:"step,omitempty"`
	// Phase of the metric: Running, Successful, Failed, Inconclusive, Error.
	Phase string `json:"phase"`
	// Counts of measurements by outcome.
	// +optional
	Successful int32 `json:"successful,omitempty"`
	// +optional
	Failed int32 `json:"failed,omitempty"`
	// +optional
	Inconclusive int32 `json:"inconclusive,omitempty"`
	// +optional
	Errors int32 `json:"errors,omitempty"`
	// ConsecutiveErrors since the last good measurement.
	// +optional
	ConsecutiveErrors int32 `json:"consecutiveErrors,omitempty"`
	// Measurements are the last few measurements, newest last (at most 10).
	// +kubebuilder:validation:MaxItems=10
	// +listType=atomic
	// +optional
	Measurements []Measurement `json:"measurements,omitempty"`
}

// Measurement is one evaluation of a metric.
type Measurement struct {
	// Phase: Successful, Failed, Inconclusive or Error.
	Phase string `json:"phase"`
	// Value as returned by the provider, rendered as text.
	// +optional
	Value string `json:"value,omitempty"`
	// Message explains an error or which condition decided.
	// +optional
	Message string `json:"message,omitempty"`
	// At is when the measurement was taken.
	At metav1.Time `json:"at"`
}

// GitStatus says what was last written to and read from Git.
type GitStatus struct {
	// ObservedCommit is the head of the tracked branch last read.
	// +optional
	ObservedCommit string `json:"observedCommit,omitempty"`
	// StatusBranch is where progress files are written.
	// +optional
	StatusBranch string `json:"statusBranch,omitempty"`
	// StatusCommit is the status commit that wrote this Rollout's progress:
	// its current progress while GitSynced is True, the previous one while
	// GitSynced is False.
	// +optional
	StatusCommit string `json:"statusCommit,omitempty"`
	// LastWriteTime is when StatusCommit was written.
	// +optional
	LastWriteTime *metav1.Time `json:"lastWriteTime,omitempty"`
	// RevertBranch holds the proposed revert after a failed release.
	// +optional
	RevertBranch string `json:"revertBranch,omitempty"`
	// RevertPullRequestURL of the revert pull request, where a forge is configured.
	// +optional
	RevertPullRequestURL string `json:"revertPullRequestURL,omitempty"`
	// GateStatus is the commit status last set on the pull request of the
	// latest gate, where a forge is configured: pending while the gate
	// waits, success once its step is rolled out, failure when the release
	// is rolled back or superseded.
	// +optional
	GateStatus *GateStatus `json:"gateStatus,omitempty"`
}

// GateStatus is the commit status set on a gate's approval pull request.
type GateStatus struct {
	// Branch is the approval branch, the pull request's head.
	Branch string `json:"branch"`
	// Revision and Step of the gate.
	Revision string `json:"revision"`
	Step     int32  `json:"step"`
	// State set: pending, success or failure.
	// +kubebuilder:validation:Enum=pending;success;failure
	State string `json:"state"`
}

// GetConditions returns the status conditions (for fluxcd/pkg/runtime).
func (in *Rollout) GetConditions() []metav1.Condition { return in.Status.Conditions }

// SetConditions sets the status conditions (for fluxcd/pkg/runtime).
func (in *Rollout) SetConditions(c []metav1.Condition) { in.Status.Conditions = c }
