package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StepHooks are the hooks at the edges of a step: HTTP calls or Jobs.
type StepHooks struct {
	// Before are called, in order, when the step is about to start, before
	// its pods or traffic move; the step starts once every one answered
	// yes. A hook that keeps answering no (after its retries) fails the
	// release; a confirm hook holds the step until it answers yes.
	// +kubebuilder:validation:MaxItems=4
	// +listType=map
	// +listMapKey=name
	// +optional
	Before []Hook `json:"before,omitempty"`
	// After are called, in order, once the step is done (its analysis
	// passed, its pause over, its gate approved), before the next step or
	// the completion, with the same rules as Before.
	// +kubebuilder:validation:MaxItems=4
	// +listType=map
	// +listMapKey=name
	// +optional
	After []Hook `json:"after,omitempty"`
}

// Hook is a question rollgate asks at a point of a release: an HTTP call
// (url: a POST of a JSON document saying where the release stands,
// HookPayload) or a Kubernetes Job (job: yes when the Job succeeds).
//
// +kubebuilder:validation:XValidation:rule="has(self.url) != has(self.job)",message="a hook sets exactly one of url (an HTTP call) or job (a Kubernetes Job)"
// +kubebuilder:validation:XValidation:rule="!has(self.job) || !has(self.confirm) || !self.confirm",message="confirm is for url hooks: a Job hook answers once per Job; to wait for a person, use a url hook or a gate"
// +kubebuilder:validation:XValidation:rule="!has(self.job) || !(has(self.successCondition) || has(self.headers) || has(self.secretRef))",message="successCondition, headers and secretRef are for url hooks: a Job hook's answer is whether its Job succeeded; remove them or use url"
type Hook struct {
	// Name of the hook, unique among the hooks of its list.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// URL to POST to; may use the placeholders of an analysis query
	// ({{rollout.namespace}}, {{rollout.canaryRevision}}, ...).
	// +kubebuilder:validation:Pattern=`^https?://`
	// +kubebuilder:validation:MaxLength=2048
	// +optional
	URL string `json:"url,omitempty"`
	// Job runs a Kubernetes Job for each ask, in the Rollout's namespace
	// and owned by it, with the shape and defaults of a Job check's
	// (spec: a batch/v1 JobSpec whose strings may use the {{rollout.*}}
	// placeholders); the answer is yes when the Job succeeds, no when it
	// fails, runs past its activeDeadlineSeconds or its pod cannot start.
	// timeout does not apply: the Job's deadline bounds it.
	// +optional
	Job *JobMetric `json:"job,omitempty"`
	// Confirm makes the hook a question asked until answered yes, every
	// interval, with no limit: the step waits (Flagger's confirm hooks).
	// Otherwise a hook is asked retries+1 times, interval apart, and a
	// last no fails the release.
	// +optional
	Confirm bool `json:"confirm,omitempty"`
	// SuccessCondition is a CEL expression over `status` (the HTTP status
	// code, an int) and `body` (the answer: its JSON decoded, or the text
	// when it is not JSON); true means yes. Unset: a 2xx status is yes.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	SuccessCondition string `json:"successCondition,omitempty"`
	// Retries after a no, for a hook that is not a confirm hook; for a
	// Job hook, how many more Jobs run after one that failed.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10
	// +kubebuilder:default=2
	// +optional
	Retries *int32 `json:"retries,omitempty"`
	// Interval between two calls of the hook; for a Job hook, from the
	// end of a failed Job to the start of the next.
	// +kubebuilder:default="10s"
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`
	// Timeout of one call of a url hook; a call that times out is a no.
	// +kubebuilder:default="10s"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// Headers sent with each call.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	Headers []HTTPHeader `json:"headers,omitempty"`
	// SecretRef names a Secret with the keys of a web metric's secretRef:
	// `token` or `username`/`password`, and optionally `ca.crt` and
	// `tls.crt` with `tls.key`.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`
}

// HookPoint is where in a release a hook is called.
type HookPoint string

// Points of a release where hooks are called.
const (
	// HookBefore is a step's before hooks.
	HookBefore HookPoint = "Before"
	// HookAfter is a step's after hooks.
	HookAfter HookPoint = "After"
	// HookRollback is spec.strategy.onRollback.
	HookRollback HookPoint = "Rollback"
)

// HookStatus is what the calls of one hook of the current release
// answered.
type HookStatus struct {
	// Name of the hook; Point and Step where it is declared (Step 0 for
	// onRollback).
	Name  string    `json:"name"`
	Point HookPoint `json:"point"`
	// +optional
	Step int32 `json:"step,omitempty"`
	// Revision and Attempt of the release the calls were for.
	Revision string `json:"revision"`
	// +optional
	Attempt int32 `json:"attempt,omitempty"`
	// Phase: Running while the hook has not answered yes (and may be asked
	// again), Successful once it did, Failed once it answered no for the
	// last time.
	// +kubebuilder:validation:Enum=Running;Successful;Failed
	Phase string `json:"phase"`
	// Calls made so far.
	Calls int32 `json:"calls"`
	// LastCall is when the hook was last called.
	// +optional
	LastCall *metav1.Time `json:"lastCall,omitempty"`
	// Message is the last answer: the status code and the start of the
	// body, or the error; for a Job hook, the Job's outcome with the last
	// lines of its log.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Message string `json:"message,omitempty"`
	// Job is the Job of a Job hook's ask under way; empty once it
	// answered.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Job string `json:"job,omitempty"`
}
