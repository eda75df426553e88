package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StepHooks are HTTP calls at the edges of a step.
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

// Hook is an HTTP call rollgate makes at a point of a release: a POST of a
// JSON document saying where the release stands (HookPayload).
type Hook struct {
	// Name of the hook, unique among the hooks of its list.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// URL to POST to; may use the placeholders of an analysis query
	// ({{rollout.namespace}}, {{rollout.canaryRevision}}, ...).
	// +kubebuilder:validation:Pattern=`^https?://`
	// +kubebuilder:validation:MaxLength=2048
	URL string `json:"url"`
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
	// Retries after a no, for a hook that is not a confirm hook.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10
	// +kubebuilder:default=2
	// +optional
	Retries *int32 `json:"retries,omitempty"`
	// Interval between two calls of the hook.
	// +kubebuilder:default="10s"
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`
	// Timeout of one call; a call that times out is a no.
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
	// body, or the error.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Message string `json:"message,omitempty"`
}
