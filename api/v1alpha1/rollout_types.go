package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Rollout releases a new version of one workload in steps: a number of new
// pods, a share of traffic, optional analysis and an optional gate that a
// merged pull request opens.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=rg,categories=rollgate
// +kubebuilder:printcolumn:name="Step",type=integer,JSONPath=`.status.currentStepIndex`,description="Current step (1-based)"
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.currentStepState`,description="State of the current step"
// +kubebuilder:printcolumn:name="Traffic",type=string,JSONPath=`.status.traffic`,description="Traffic sent to the canary"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Message",type=string,priority=1,JSONPath=`.status.message`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Rollout struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   RolloutSpec   `json:"spec,omitempty"`
	Status RolloutStatus `json:"status,omitempty"`
}

// RolloutList is a list of Rollouts.
//
// +kubebuilder:object:root=true
type RolloutList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Rollout `json:"items"`
}

// RolloutSpec is the desired release behaviour for one workload.
//
// +kubebuilder:validation:XValidation:rule="!has(self.strategy.canary) || !has(self.strategy.canary.enableExtraWorkloadForCanary) || !self.strategy.canary.enableExtraWorkloadForCanary || self.workloadRef.kind == 'Deployment'",message="spec.strategy.canary.enableExtraWorkloadForCanary is only supported for workloadRef.kind Deployment: remove it, or point workloadRef at a Deployment"
// +kubebuilder:validation:XValidation:rule="!has(self.strategy.blueGreen) || self.workloadRef.kind == 'Deployment'",message="spec.strategy.blueGreen is only supported for workloadRef.kind Deployment: use spec.strategy.canary for a StatefulSet or DaemonSet"
// +kubebuilder:validation:XValidation:rule="!has(self.fleet) || has(self.git)",message="spec.fleet needs spec.git: the progress of other clusters is read from the status branch of spec.git.repository"
type RolloutSpec struct {
	// WorkloadRef names the workload this Rollout releases, in the Rollout's
	// namespace. It cannot be changed; create a new Rollout instead.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.workloadRef is immutable: delete and recreate the Rollout to release another workload"
	WorkloadRef WorkloadRef `json:"workloadRef"`

	// Strategy describes how a new revision is released.
	Strategy RolloutStrategy `json:"strategy"`

	// Disabled makes the Rollout ignore its workload: new revisions are
	// released by the workload's own controller, all at once.
	// +optional
	Disabled bool `json:"disabled,omitempty"`

	// OnDelete says what deleting this Rollout does to a release in
	// progress. Hold (the default) leaves the workload as it stands: the
	// pods already released keep the new revision, every other pod keeps
	// the stable one, and the workload stays held (the admission webhook
	// keeps its update strategy) until a Rollout names it again or it is
	// handed back with `rollgate handback`. HandBack gives the workload
	// back to its own controller, which then rolls the revision the
	// workload declares to every pod at once, approved or not. Traffic
	// goes back to what Git declares either way, and a Rollout deleted
	// with no release in progress hands its workload back in both cases.
	// +kubebuilder:validation:Enum=Hold;HandBack
	// +optional
	OnDelete OnDeletePolicy `json:"onDelete,omitempty"`

	// ProgressDeadlineSeconds is how long a step may wait for its pods to
	// become ready (or its traffic to be applied) before the release fails.
	// Time spent waiting for approval or in a pause does not count.
	// +kubebuilder:validation:XValidation:rule="self >= 1",message="must be at least 1: the seconds a step may wait for its pods and routes (default 600)"
	// +kubebuilder:default=600
	// +optional
	ProgressDeadlineSeconds *int32 `json:"progressDeadlineSeconds,omitempty"`

	// Approvals open manual gates. An approval counts only for the canary
	// revision, the attempt and the step it names, so an approval merged for
	// one release, or for an earlier attempt of it, never opens a gate of
	// another. Written by merging the approval pull request, by
	// `rollgate approve`, or by hand.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	// +optional
	Approvals []Approval `json:"approvals,omitempty"`

	// Abort stops the release of the named canary revision: traffic returns
	// to stable, the workload returns to the stable revision, and a revert is
	// proposed in Git.
	// +optional
	Abort *RevisionRequest `json:"abort,omitempty"`

	// Promote skips the remaining steps of the named canary revision and
	// releases it fully.
	// +optional
	Promote *RevisionRequest `json:"promote,omitempty"`

	// Retry restarts a failed or aborted release of a revision from step 1 as
	// the given attempt. It acts once: when status.attempt is lower than
	// retry.attempt.
	// +optional
	Retry *RetryRequest `json:"retry,omitempty"`

	// Git says where this Rollout's manifest lives in Git, so that approvals,
	// progress and reverts can be written there.
	// +optional
	Git *GitReference `json:"git,omitempty"`

	// Fleet makes releases of this Rollout wait for releases of the same
	// version in other clusters, read from the status files those
	// clusters' rollgate writes to the status branch of spec.git's
	// Repository. No central controller is involved: Git is the meeting
	// point.
	// +optional
	Fleet *FleetSpec `json:"fleet,omitempty"`

	// Group makes this Rollout a member of a lockstep group: the Rollouts
	// of this namespace naming the same group release as one. A step of a
	// release starts only when every member in release finished the step
	// before; the gates are the group's, approved once on one member (its
	// coordinator, see docs/coordination.md); a failure or abort of any
	// member rolls every member back. Members need the same number of
	// steps with gates at the same steps.
	// +optional
	Group *GroupReference `json:"group,omitempty"`
}

// GroupReference names the lockstep group of a Rollout.
type GroupReference struct {
	// Name of the group, shared by its members (Rollouts of one
	// namespace). A DNS label.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
}

// OnDeletePolicy is what deleting a Rollout does to a release in progress.
type OnDeletePolicy string

// Policies of spec.onDelete.
const (
	// OnDeleteHold leaves a workload held mid-release as it stands.
	OnDeleteHold OnDeletePolicy = "Hold"
	// OnDeleteHandBack gives the workload back to its own controller.
	OnDeleteHandBack OnDeletePolicy = "HandBack"
)

// FleetSpec lists the releases in other clusters this Rollout waits for.
type FleetSpec struct {
	// WaitFor names upstream Rollouts in other clusters, one cluster or a
	// share of a set of clusters per entry. Every entry must be met (the
	// upstream released the version this Rollout is about to release, the
	// same container images) before the step it guards starts. An upstream
	// release that failed or was rolled back holds this Rollout.
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=20
	WaitFor []FleetWait `json:"waitFor"`
}

// FleetWait is one upstream release this Rollout waits for, in one
// cluster (cluster) or in a share of a set of clusters (clusters, atLeast).
// +kubebuilder:validation:XValidation:rule="!(has(self.step) && has(self.bakeTime))",message="spec.fleet.waitFor[].bakeTime counts from the upstream release's completion: remove step, or bakeTime"
// +kubebuilder:validation:XValidation:rule="has(self.cluster) != has(self.clusters)",message="a spec.fleet.waitFor entry names one cluster (cluster) or a set of clusters (clusters, with atLeast): set exactly one of them"
// +kubebuilder:validation:XValidation:rule="!has(self.atLeast) || has(self.clusters)",message="spec.fleet.waitFor[].atLeast counts the clusters of clusters: name the set with clusters, or remove atLeast",fieldPath=".atLeast"
type FleetWait struct {
	// Cluster is the name the upstream cluster writes its status under:
	// spec.status.cluster of its Repository, which must share this
	// Rollout's Repository status branch (or status path).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	Cluster string `json:"cluster,omitempty"`
	// Clusters is a set of upstream clusters, of which atLeast must have
	// released: cluster names, or patterns where "*" stands for any
	// characters ("prod-eu-*"). A name is in the set whether or not it
	// wrote a status file; a pattern adds the clusters whose status file
	// of the upstream Rollout is on the status branch, except this
	// Rollout's own cluster.
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=50
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9*]([-a-z0-9*]*[a-z0-9*])?$`
	// +optional
	Clusters []string `json:"clusters,omitempty"`
	// AtLeast is how many clusters of clusters must have released: a
	// number, or a percentage of the set rounded up ("10%" of 25 clusters
	// is 3). Unset: all of them.
	//
	// Its rule lists the percentages rather than matching a regular
	// expression, which Kubernetes 1.30 estimates over its cost budget
	// inside the waitFor list (as for the steps' replicas).
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=4
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 1 : self in ['1%','2%','3%','4%','5%','6%','7%','8%','9%','10%','11%','12%','13%','14%','15%','16%','17%','18%','19%','20%','21%','22%','23%','24%','25%','26%','27%','28%','29%','30%','31%','32%','33%','34%','35%','36%','37%','38%','39%','40%','41%','42%','43%','44%','45%','46%','47%','48%','49%','50%','51%','52%','53%','54%','55%','56%','57%','58%','59%','60%','61%','62%','63%','64%','65%','66%','67%','68%','69%','70%','71%','72%','73%','74%','75%','76%','77%','78%','79%','80%','81%','82%','83%','84%','85%','86%','87%','88%','89%','90%','91%','92%','93%','94%','95%','96%','97%','98%','99%','100%']",message="atLeast must be a number of clusters (>= 1) or a percentage from \"1%\" to \"100%\", such as \"10%\""
	// +optional
	AtLeast *intstr.IntOrString `json:"atLeast,omitempty"`
	// Rollout is the upstream Rollout, "<name>" or "<namespace>/<name>";
	// by default the same namespace and name as this Rollout.
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-.a-z0-9]*[a-z0-9])?$`
	// +optional
	Rollout string `json:"rollout,omitempty"`
	// Step, when set, is enough: the upstream release of the same version
	// has reached this step (and has not failed). Unset, the upstream
	// release must be complete and Healthy.
	// +kubebuilder:validation:Minimum=1
	// +optional
	Step *int32 `json:"step,omitempty"`
	// BeforeStep is the step of this Rollout that waits: 1 (the default)
	// holds the whole release before any pod or traffic moves; a later
	// step lets the first steps run (for example a canary pod taking no
	// traffic) and holds before that step starts.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:default=1
	// +optional
	BeforeStep *int32 `json:"beforeStep,omitempty"`
	// BakeTime, when set, is how long the upstream release must have been
	// complete (Healthy with the same version) before this one goes on:
	// "prod waits 2h after staging released". It counts from the
	// completion time the upstream's controller wrote to its status file.
	// +optional
	BakeTime *metav1.Duration `json:"bakeTime,omitempty"`
}

// WorkloadRef identifies the workload a Rollout releases.
type WorkloadRef struct {
	// APIVersion of the workload. Only apps/v1 is supported.
	// +kubebuilder:validation:Enum=apps/v1
	APIVersion string `json:"apiVersion"`
	// Kind of the workload.
	// +kubebuilder:validation:Enum=Deployment;StatefulSet;DaemonSet
	Kind string `json:"kind"`
	// Name of the workload, in the Rollout's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// RolloutStrategy holds exactly one of canary or blueGreen.
//
// +kubebuilder:validation:XValidation:rule="has(self.canary) != has(self.blueGreen)",message="spec.strategy must set exactly one of canary or blueGreen"
type RolloutStrategy struct {
	// Paused holds the release where it is: no more pods, no traffic change,
	// until it is set back to false.
	// +optional
	Paused bool `json:"paused,omitempty"`

	// Canary releases new pods next to the old ones, batch by batch.
	// +optional
	Canary *CanaryStrategy `json:"canary,omitempty"`

	// BlueGreen brings up the new revision beside the old one and then
	// switches traffic to it step by step.
	// +optional
	BlueGreen *BlueGreenStrategy `json:"blueGreen,omitempty"`

	// OnRollback are hooks (HTTP calls or Jobs) run once when a release
	// fails or is aborted (each retried up to its retries); their answers
	// are recorded, never awaited: the rollback does not wait for them.
	// +kubebuilder:validation:MaxItems=4
	// +listType=map
	// +listMapKey=name
	// +optional
	OnRollback []Hook `json:"onRollback,omitempty"`
}

// CanaryStrategy releases a workload in batches of new pods with a growing
// share of traffic.
//
// +kubebuilder:validation:XValidation:rule="!self.steps.exists(s, has(s.traffic) || has(s.matches) || has(s.requestHeaderModifier)) || (has(self.trafficRoutings) && size(self.trafficRoutings) > 0)",message="spec.strategy.canary.steps set traffic, matches or requestHeaderModifier but spec.strategy.canary.trafficRoutings is empty: add a trafficRoutings entry or remove them from the steps"
// +kubebuilder:validation:XValidation:rule="!self.steps.exists(s, has(s.mirror)) || (has(self.trafficRoutings) && size(self.trafficRoutings) > 0)",message="spec.strategy.canary.steps set mirror but spec.strategy.canary.trafficRoutings is empty: add a trafficRoutings entry (a router copies the requests) or remove mirror from the steps"
// +kubebuilder:validation:XValidation:rule="self.steps.filter(s, has(s.replicas) && type(s.replicas) == int).map(s, int(s.replicas)).isSorted()",message="spec.strategy.canary.steps[].replicas must not decrease from one step to the next"
// +kubebuilder:validation:XValidation:rule="self.steps.filter(s, has(s.replicas) && type(s.replicas) == string).map(s, s.replicas).map(p, size(p) == 2 ? '00' + p : (size(p) == 3 ? '0' + p : p)).isSorted()",message="spec.strategy.canary.steps[].replicas percentages must not decrease from one step to the next"
type CanaryStrategy struct {
	// Steps of the release, in order. At least one.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=50
	// +listType=atomic
	Steps []CanaryStep `json:"steps"`

	// TrafficRoutings say how traffic reaches the workload. Needed when a
	// step sets traffic, matches or requestHeaderModifier.
	// +kubebuilder:validation:MaxItems=1
	// +listType=atomic
	// +optional
	TrafficRoutings []TrafficRoutingRef `json:"trafficRoutings,omitempty"`

	// FailureThreshold is how many (or what percentage of) pods may be
	// unavailable during a batch. Defaults to the workload's maxUnavailable.
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=8
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^(100|[1-9]?[0-9])%$')",message="failureThreshold must be a number of pods (>= 0) or a percentage from \"0%\" to \"100%\""
	// +optional
	FailureThreshold *intstr.IntOrString `json:"failureThreshold,omitempty"`

	// PatchPodTemplateMetadata adds labels and annotations to the pods of the
	// new revision (canary Deployment only, as in Kruise Rollout).
	// +optional
	PatchPodTemplateMetadata *PatchPodTemplateMetadata `json:"patchPodTemplateMetadata,omitempty"`

	// EnableExtraWorkloadForCanary releases a Deployment through a separate
	// canary Deployment owned by the Rollout instead of holding the
	// Deployment at a partition. Deployments only.
	// +optional
	EnableExtraWorkloadForCanary bool `json:"enableExtraWorkloadForCanary,omitempty"`

	// Analysis runs in the background for the whole release; a failure
	// aborts the release at any step.
	// +optional
	Analysis *RolloutAnalysis `json:"analysis,omitempty"`
}

// BlueGreenStrategy brings the new revision up beside the old one, then moves
// traffic to it step by step; the old pods stay until the last step.
//
// +kubebuilder:validation:XValidation:rule="!self.steps.exists(s, has(s.traffic) || has(s.matches) || has(s.requestHeaderModifier)) || (has(self.trafficRoutings) && size(self.trafficRoutings) > 0)",message="spec.strategy.blueGreen.steps set traffic, matches or requestHeaderModifier but spec.strategy.blueGreen.trafficRoutings is empty: add a trafficRoutings entry or remove them from the steps"
// +kubebuilder:validation:XValidation:rule="!self.steps.exists(s, has(s.mirror)) || (has(self.trafficRoutings) && size(self.trafficRoutings) > 0)",message="spec.strategy.blueGreen.steps set mirror but spec.strategy.blueGreen.trafficRoutings is empty: add a trafficRoutings entry (a router copies the requests) or remove mirror from the steps"
// +kubebuilder:validation:XValidation:rule="self.steps.filter(s, has(s.replicas) && type(s.replicas) == int).map(s, int(s.replicas)).isSorted()",message="spec.strategy.blueGreen.steps[].replicas must not decrease from one step to the next"
// +kubebuilder:validation:XValidation:rule="self.steps.filter(s, has(s.replicas) && type(s.replicas) == string).map(s, s.replicas).map(p, size(p) == 2 ? '00' + p : (size(p) == 3 ? '0' + p : p)).isSorted()",message="spec.strategy.blueGreen.steps[].replicas percentages must not decrease from one step to the next"
type BlueGreenStrategy struct {
	// Steps of the release, in order. At least one.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=50
	// +listType=atomic
	Steps []CanaryStep `json:"steps"`

	// TrafficRoutings say how traffic reaches the workload.
	// +kubebuilder:validation:MaxItems=1
	// +listType=atomic
	// +optional
	TrafficRoutings []TrafficRoutingRef `json:"trafficRoutings,omitempty"`

	// FailureThreshold is how many (or what percentage of) pods may be
	// unavailable during a batch.
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=8
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^(100|[1-9]?[0-9])%$')",message="failureThreshold must be a number of pods (>= 0) or a percentage from \"0%\" to \"100%\""
	// +optional
	FailureThreshold *intstr.IntOrString `json:"failureThreshold,omitempty"`

	// Analysis runs in the background for the whole release.
	// +optional
	Analysis *RolloutAnalysis `json:"analysis,omitempty"`
}

// CanaryStep is one step of a release: how many new pods, how much traffic,
// what to check and whether to wait.
//
// +kubebuilder:validation:XValidation:rule="!has(self.mirror) || (!has(self.traffic) && !has(self.matches) && !has(self.requestHeaderModifier))",message="a mirror step answers every request from the old revision: remove traffic, matches and requestHeaderModifier from a step that sets mirror (or move them to a step of their own)"
// +kubebuilder:validation:XValidation:rule="!has(self.mirror) || has(self.replicas)",message="a mirror step needs replicas: the number (or percentage) of new pods that receive the copies",fieldPath=".replicas"
// +kubebuilder:validation:XValidation:rule="has(self.replicas) || has(self.traffic)",message="each step needs replicas (a number or a percentage of the workload's replicas) or traffic (then replicas follow the traffic percentage)"
// +kubebuilder:validation:XValidation:rule="!has(self.replicas) || (type(self.replicas) == int ? self.replicas >= 1 : self.replicas in ['1%','2%','3%','4%','5%','6%','7%','8%','9%','10%','11%','12%','13%','14%','15%','16%','17%','18%','19%','20%','21%','22%','23%','24%','25%','26%','27%','28%','29%','30%','31%','32%','33%','34%','35%','36%','37%','38%','39%','40%','41%','42%','43%','44%','45%','46%','47%','48%','49%','50%','51%','52%','53%','54%','55%','56%','57%','58%','59%','60%','61%','62%','63%','64%','65%','66%','67%','68%','69%','70%','71%','72%','73%','74%','75%','76%','77%','78%','79%','80%','81%','82%','83%','84%','85%','86%','87%','88%','89%','90%','91%','92%','93%','94%','95%','96%','97%','98%','99%','100%'])",message="replicas must be a number of pods (>= 1) or a percentage from \"1%\" to \"100%\"",fieldPath=".replicas"
type CanaryStep struct {
	TrafficRoutingStrategy `json:",inline"`

	// Replicas is the number of new-revision pods at this step: an integer,
	// or a percentage of the workload's replicas (rounded up). It must not
	// decrease from one step to the next. Unset means the step's traffic
	// percentage.
	//
	// Checked by a rule of the step, which lists the percentages rather
	// than matching a regular expression: Kubernetes 1.30 estimates any CEL
	// rule on an int-or-string field inside the steps list, and a regular
	// expression on one from the step, over its cost budget and refuses
	// the CRD.
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=8
	// +optional
	Replicas *intstr.IntOrString `json:"replicas,omitempty"`

	// Pause makes the step wait after its pods and traffic are in place:
	// for a duration, or (with no duration) until the step is approved.
	// +optional
	Pause *RolloutPause `json:"pause,omitempty"`

	// Analysis checks metrics during this step; the step does not finish
	// until the analysis succeeds, and a failure aborts the release.
	// +optional
	Analysis *RolloutAnalysis `json:"analysis,omitempty"`

	// Hooks are HTTP calls before the step starts and after it is done.
	// +optional
	Hooks *StepHooks `json:"hooks,omitempty"`
}

// TrafficRoutingStrategy is the traffic part of a step.
type TrafficRoutingStrategy struct {
	// Traffic is the share of requests sent to the new revision, as a
	// percentage such as "5%".
	// +kubebuilder:validation:XValidation:rule="self.matches('^(100|[1-9]?[0-9])%$')",message="traffic must be a percentage from \"0%\" to \"100%\", such as \"5%\""
	// +kubebuilder:validation:MaxLength=4
	// +optional
	Traffic *string `json:"traffic,omitempty"`

	// Mirror copies this share of requests, as a percentage such as
	// "20%", to the new revision, while every response still comes from
	// the old one (a shadow step). The copies' answers are thrown away;
	// the new pods' own metrics show how they did. A mirror step sends no
	// live request to the new revision: it sets replicas, and neither
	// traffic, matches nor requestHeaderModifier. Routers that cannot
	// mirror refuse the step with a message naming this field.
	// +kubebuilder:validation:XValidation:rule="self.matches('^(100|[1-9][0-9]?)%$')",message="mirror must be a percentage from \"1%\" to \"100%\", such as \"20%\""
	// +kubebuilder:validation:MaxLength=4
	// +optional
	Mirror *string `json:"mirror,omitempty"`

	// RequestHeaderModifier changes the headers of requests routed to the
	// new revision (where the router supports it).
	// +optional
	RequestHeaderModifier *gatewayv1.HTTPHeaderFilter `json:"requestHeaderModifier,omitempty"`

	// Matches send requests that match any entry to the new revision (A/B
	// testing). When set together with traffic, matches take precedence.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	Matches []HttpRouteMatch `json:"matches,omitempty"`
}

// RolloutPause makes a step wait.
//
// +kubebuilder:validation:XValidation:rule="!has(self.duration) || type(self.duration) != int || self.duration >= 0",message="pause.duration must be a number of seconds (>= 0) or a duration such as \"90s\" or \"10m\"",fieldPath=".duration"
type RolloutPause struct {
	// Duration of the pause: seconds as an integer (as in Kruise Rollout) or
	// a duration string such as "90s" or "10m". Unset means wait for
	// approval.
	//
	// A duration is checked by the schema's pattern and a number by a rule
	// of the pause, for Kubernetes 1.30 (see CanaryStep.replicas).
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+([.][0-9]+)?(ms|s|m|h))+$`
	// +optional
	Duration *intstr.IntOrString `json:"duration,omitempty"`
}

// PatchPodTemplateMetadata holds labels and annotations to add to new pods.
type PatchPodTemplateMetadata struct {
	// Labels to add.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// Annotations to add.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// RolloutAnalysis references AnalysisTemplates to run.
type RolloutAnalysis struct {
	// Templates are names of AnalysisTemplates in the Rollout's namespace.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=10
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	// +listType=atomic
	Templates []string `json:"templates"`
	// Args fill the templates' arguments.
	// +kubebuilder:validation:MaxItems=32
	// +listType=map
	// +listMapKey=name
	// +optional
	Args []AnalysisArg `json:"args,omitempty"`
}

// AnalysisArg is a named value passed to an AnalysisTemplate.
type AnalysisArg struct {
	// Name of the argument.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// Value of the argument.
	// +kubebuilder:validation:MaxLength=1024
	Value string `json:"value"`
}

// Approval opens the manual gate of one step of one attempt to release a
// canary revision.
type Approval struct {
	// Revision is the canary revision (status.canaryRevision) approved.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Revision string `json:"revision"`
	// Step is the 1-based step number whose gate is opened.
	// +kubebuilder:validation:XValidation:rule="self >= 1",message="steps are numbered from 1: set the step whose gate this approval opens"
	// +kubebuilder:validation:Maximum=50
	Step int32 `json:"step"`
	// Attempt is the release attempt (status.attempt) approved; unset means
	// attempt 1. After spec.retry, the approvals of earlier attempts no
	// longer open a gate: each attempt is approved anew.
	// +kubebuilder:validation:XValidation:rule="self >= 1",message="attempts are numbered from 1: leave it unset for the first attempt"
	// +optional
	Attempt int32 `json:"attempt,omitempty"`
	// ApprovedBy records who approved, for the audit trail.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	ApprovedBy string `json:"approvedBy,omitempty"`
}

// Approves reports whether a opens the gate of step in the given attempt
// to release revision. An unset attempt means attempt 1, in the approval
// and in the status alike.
func (a Approval) Approves(revision string, attempt, step int32) bool {
	return a.Revision == revision && a.Step == step && max(a.Attempt, 1) == max(attempt, 1)
}

// RevisionRequest is a human request about the release of one revision.
type RevisionRequest struct {
	// Revision is the canary revision the request is about.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Revision string `json:"revision"`
	// Reason is recorded in events, status and Git.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Reason string `json:"reason,omitempty"`
}

// RetryRequest restarts the release of a revision.
type RetryRequest struct {
	// Revision to release again.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Revision string `json:"revision"`
	// Attempt number to run; must be greater than status.attempt to act.
	// +kubebuilder:validation:XValidation:rule="self >= 2",message="must be 2 or more: set status.attempt + 1 to release the failed revision again"
	Attempt int32 `json:"attempt"`
}

// GitReference says where a Rollout's manifest lives in Git.
type GitReference struct {
	// Repository is the name of a Repository object in the Rollout's
	// namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Repository string `json:"repository"`
	// Branch overrides the Repository's branch for this Rollout.
	// +kubebuilder:validation:MaxLength=255
	// +optional
	Branch string `json:"branch,omitempty"`
	// Path of the file holding this Rollout, relative to the repository root.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.contains('..') && (self.endsWith('.yaml') || self.endsWith('.yml'))",message="spec.git.path must be a relative path to a .yaml or .yml file inside the repository, without '..'"
	Path string `json:"path"`
}
