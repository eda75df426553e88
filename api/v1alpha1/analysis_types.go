package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// AnalysisTemplate defines metrics that decide whether a release may go on.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=at,categories=rollgate
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type AnalysisTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec AnalysisTemplateSpec `json:"spec"`
}

// AnalysisTemplateList is a list of AnalysisTemplates.
//
// +kubebuilder:object:root=true
type AnalysisTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AnalysisTemplate `json:"items"`
}

// AnalysisTemplateSpec lists arguments and metrics.
type AnalysisTemplateSpec struct {
	// Args are the template's parameters, referenced in queries as
	// {{args.<name>}}. An arg without value must be given by the Rollout.
	// +kubebuilder:validation:MaxItems=32
	// +listType=map
	// +listMapKey=name
	// +optional
	Args []TemplateArg `json:"args,omitempty"`

	// Metrics to measure. All must succeed.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=20
	// +listType=map
	// +listMapKey=name
	Metrics []Metric `json:"metrics"`
}

// TemplateArg is a parameter of an AnalysisTemplate.
type TemplateArg struct {
	// Name of the argument.
	// +kubebuilder:validation:Pattern=`^[a-zA-Z_][a-zA-Z0-9_-]*$`
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// Value is the default value.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Value *string `json:"value,omitempty"`
}

// Metric is one measurement repeated over time, with conditions deciding
// success or failure.
//
// +kubebuilder:validation:XValidation:rule="has(self.successCondition) || has(self.failureCondition)",message="a metric needs successCondition or failureCondition (CEL over result, e.g. \"result[0] >= 0.99\")"
type Metric struct {
	// Name of the metric.
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`

	// Interval between measurements.
	// +kubebuilder:default="1m"
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`

	// InitialDelay before the first measurement.
	// +optional
	InitialDelay *metav1.Duration `json:"initialDelay,omitempty"`

	// Count is how many measurements make a result. Unset: one for a step
	// analysis, unlimited for background analysis.
	// +kubebuilder:validation:Minimum=1
	// +optional
	Count *int32 `json:"count,omitempty"`

	// SuccessCondition is a CEL expression over `result` (a list of numbers
	// for vectors and scalars, of lists for matrices); true means success.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	SuccessCondition string `json:"successCondition,omitempty"`

	// FailureCondition is a CEL expression over `result`; true means failure.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	FailureCondition string `json:"failureCondition,omitempty"`

	// FailureLimit is how many failed measurements are tolerated.
	// +kubebuilder:validation:Minimum=0
	// +optional
	FailureLimit int32 `json:"failureLimit,omitempty"`

	// InconclusiveLimit is how many inconclusive measurements are tolerated
	// before the release waits for a human.
	// +kubebuilder:validation:Minimum=0
	// +optional
	InconclusiveLimit int32 `json:"inconclusiveLimit,omitempty"`

	// ConsecutiveErrorLimit is how many errors in a row (provider down,
	// empty result) are tolerated before the release fails safe.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:default=4
	// +optional
	ConsecutiveErrorLimit *int32 `json:"consecutiveErrorLimit,omitempty"`

	// DryRun records the metric but never fails the release.
	// +optional
	DryRun bool `json:"dryRun,omitempty"`

	// Provider says where the value comes from.
	Provider MetricProvider `json:"provider"`
}

// MetricProvider holds exactly one provider.
//
// +kubebuilder:validation:XValidation:rule="(has(self.prometheus) ? 1 : 0) + (has(self.web) ? 1 : 0) + (has(self.job) ? 1 : 0) == 1",message="a metric provider must set exactly one of prometheus, web or job"
type MetricProvider struct {
	// Prometheus queries a Prometheus-compatible HTTP API.
	// +optional
	Prometheus *PrometheusMetric `json:"prometheus,omitempty"`
	// Web fetches JSON over HTTP and picks a value by JSON path.
	// +optional
	Web *WebMetric `json:"web,omitempty"`
	// Job runs a Kubernetes Job for each measurement (a smoke or load
	// test against the canary): the result is [1] when the Job succeeds
	// and [0] when it fails, so a metric of this provider usually says
	// successCondition: "result[0] == 1".
	// +optional
	Job *JobMetric `json:"job,omitempty"`
}

// JobMetric is a Job run for each measurement of a Job check, or for
// each ask of a Job hook.
type JobMetric struct {
	// Spec is the Job's spec (batch/v1 JobSpec). Every string in it may use
	// the placeholders of a Prometheus query ({{rollout.canaryService}},
	// {{rollout.step}}, and {{args.x}} in a Job check, ...). rollgate sets what it must: restartPolicy Never
	// when unset, backoffLimit 0 when unset (a failed try is a failed
	// measurement), activeDeadlineSeconds 600 when unset (a Job that runs
	// longer fails), and ttlSecondsAfterFinished 3600 when unset. Keep the
	// pod's labels off the Rollout's Service selectors.
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	Spec runtime.RawExtension `json:"spec"`
}

// PrometheusMetric is a PromQL query.
type PrometheusMetric struct {
	// Address of the Prometheus server, such as http://prometheus.monitoring:9090.
	// +kubebuilder:validation:Pattern=`^https?://`
	// +kubebuilder:validation:MaxLength=2048
	Address string `json:"address"`
	// Query in PromQL; may use {{args.x}}, {{rollout.namespace}},
	// {{rollout.canaryRevision}}, {{rollout.stableRevision}},
	// {{rollout.canaryService}}, {{rollout.stableService}}.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=8192
	Query string `json:"query"`
	// Range makes it a range query over the last Range.Duration.
	// +optional
	Range *PrometheusRange `json:"range,omitempty"`
	// Timeout of one query.
	// +kubebuilder:default="30s"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// Headers sent with each query.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	Headers []HTTPHeader `json:"headers,omitempty"`
	// SecretRef names a Secret in the template's namespace with `token`
	// (bearer) or `username` and `password` (basic auth), and optionally
	// `ca.crt` (PEM CAs trusted for the server, besides the system roots)
	// and `tls.crt` with `tls.key` (a PEM client certificate and its key,
	// for mutual TLS; both or neither).
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`
	// InsecureSkipVerify disables TLS verification. Avoid.
	// +optional
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`
}

// PrometheusRange is the window of a range query.
type PrometheusRange struct {
	// Duration of the window, ending now.
	Duration metav1.Duration `json:"duration"`
	// Step between points.
	Step metav1.Duration `json:"step"`
}

// WebMetric fetches a JSON document.
type WebMetric struct {
	// URL to GET; may use the same placeholders as a Prometheus query.
	// +kubebuilder:validation:Pattern=`^https?://`
	// +kubebuilder:validation:MaxLength=2048
	URL string `json:"url"`
	// JSONPath picks the value, such as {.data.successRate}.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	JSONPath string `json:"jsonPath"`
	// Timeout of one request.
	// +kubebuilder:default="30s"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// Headers sent with each request.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	Headers []HTTPHeader `json:"headers,omitempty"`
	// SecretRef names a Secret with the keys of a Prometheus metric's
	// secretRef: `token` or `username`/`password`, and optionally `ca.crt`
	// and `tls.crt` with `tls.key`.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`
}

// HTTPHeader is a header name and value. Authorization, Host and
// User-Agent may be set; the other headers that the HTTP client manages
// itself (Content-Type, Content-Length, Connection, Accept-Encoding, ...)
// are refused at admission.
// +kubebuilder:validation:XValidation:rule="!(self.name.lowerAscii() in ['content-encoding', 'content-length', 'content-type', 'connection', 'keep-alive', 'proxy-authenticate', 'proxy-authorization', 'www-authenticate', 'accept-encoding', 'transfer-encoding', 'x-prometheus-remote-write-version', 'x-prometheus-remote-read-version', 'x-prometheus-scrape-timeout-seconds', 'x-amz-date', 'x-amz-security-token', 'x-amz-content-sha256'])",message="header name is managed by the HTTP client and cannot be set: remove it (credentials go in secretRef; Authorization, Host and User-Agent are allowed)"
type HTTPHeader struct {
	// Name of the header.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name"`
	// Value of the header.
	// +kubebuilder:validation:MaxLength=4096
	Value string `json:"value"`
}

// LocalObjectReference names an object in the same namespace.
type LocalObjectReference struct {
	// Name of the object.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}
