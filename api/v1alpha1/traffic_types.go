package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// HttpRouteMatch selects requests for the new revision. Conditions inside one
// match are ANDed; the matches of a step are ORed.
//
// +kubebuilder:validation:XValidation:rule="has(self.path) || (has(self.headers) && size(self.headers) > 0) || (has(self.queryParams) && size(self.queryParams) > 0)",message="a match needs at least one of path, headers or queryParams"
type HttpRouteMatch struct { //nolint:revive // the name follows Kruise Rollout
	// Path matches the request path.
	// +optional
	Path *gatewayv1.HTTPPathMatch `json:"path,omitempty"`

	// Headers match request headers. A header named "Cookie" with a
	// RegularExpression value is how a cookie is matched; Ingress dialects
	// that support cookies natively translate it.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	Headers []gatewayv1.HTTPHeaderMatch `json:"headers,omitempty"`

	// QueryParams match query parameters.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	QueryParams []gatewayv1.HTTPQueryParamMatch `json:"queryParams,omitempty"`
}

// TrafficRoutingRef says how traffic reaches the workload: the Service in
// front of it and exactly one kind of router.
//
// +kubebuilder:validation:XValidation:rule="[has(self.ingress), has(self.gateway), has(self.customNetworkRefs) && size(self.customNetworkRefs) > 0].filter(x, x).size() == 1",message="a trafficRoutings entry must set exactly one of ingress, gateway or customNetworkRefs"
type TrafficRoutingRef struct {
	// Service is the stable Service in front of the workload. At most 56
	// characters, so that the canary Service "<service>-canary" fits in 63.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=56
	Service string `json:"service"`

	// GracePeriodSeconds to wait after each traffic change before the next
	// action, so that routers and clients settle.
	// +kubebuilder:validation:XValidation:rule="self >= 0",message="must be 0 or more: the seconds to wait after each traffic change"
	// +kubebuilder:validation:Maximum=3600
	// +kubebuilder:default=3
	// +optional
	GracePeriodSeconds *int32 `json:"gracePeriodSeconds,omitempty"`

	// Ingress routes through a canary Ingress that rollgate owns, beside the
	// user's Ingress.
	// +optional
	Ingress *IngressTrafficRouting `json:"ingress,omitempty"`

	// Gateway routes through a Gateway API HTTPRoute.
	// +optional
	Gateway *GatewayTrafficRouting `json:"gateway,omitempty"`

	// CustomNetworkRefs route through any resource with a Lua script
	// (built in, or from the controller's ConfigMap).
	// +kubebuilder:validation:MaxItems=8
	// +listType=atomic
	// +optional
	CustomNetworkRefs []ObjectRef `json:"customNetworkRefs,omitempty"`

	// Verify measures, from the data plane's own metrics, the share of
	// requests the canary actually received at each step that sets a
	// traffic weight, and holds the step until it is within tolerance of
	// the declared weight; the step fails (and the release rolls back, as
	// after a failed analysis) when too many measurements are outside it.
	// +optional
	Verify *TrafficVerification `json:"verify,omitempty"`

	// Sticky keeps each client on the revision it first got while a step
	// splits requests by weight, with a session cookie the data plane sets.
	// Routers that cannot keep sessions refuse the release with a message
	// naming this field.
	// +optional
	Sticky *StickySessions `json:"sticky,omitempty"`
}

// StickySessions names the session cookie that keeps a client on one
// revision.
type StickySessions struct {
	// CookieName is the name of the cookie.
	// +kubebuilder:default=rollgate-sticky
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_.-]+$`
	// +optional
	CookieName string `json:"cookieName,omitempty"`
}

// StickyCookie returns the session cookie's name, or "" when the entry is
// not sticky.
func (r TrafficRoutingRef) StickyCookie() string {
	switch {
	case r.Sticky == nil:
		return ""
	case r.Sticky.CookieName == "":
		return "rollgate-sticky"
	}
	return r.Sticky.CookieName
}

// TrafficVerification is a Prometheus query answering the percentage (0 to
// 100) of requests the canary received, as the data plane counted them
// (for example Traefik's traefik_service_requests_total by service). The
// query may use the {{rollout.<field>}} placeholders of AnalysisTemplates
// (namespace, name, canaryService, stableService, canaryRevision,
// stableRevision). It runs as a metric of the step's analysis, named
// "traffic-share" in status.analysis.
type TrafficVerification struct {
	// Prometheus is where and what to query; the query answers the
	// canary's share in percent.
	Prometheus PrometheusMetric `json:"prometheus"`
	// Tolerance is how many percentage points the measured share may be
	// from the declared weight.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=50
	// +kubebuilder:default=5
	// +optional
	Tolerance *int32 `json:"tolerance,omitempty"`
	// InitialDelay before the first measurement once the step's traffic is
	// applied: at least the rate window of the query, so that the
	// measurement covers the step's traffic only.
	// +kubebuilder:default="30s"
	// +optional
	InitialDelay *metav1.Duration `json:"initialDelay,omitempty"`
	// Interval between measurements.
	// +kubebuilder:default="10s"
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`
	// Count is how many measurements the step takes.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +kubebuilder:default=3
	// +optional
	Count *int32 `json:"count,omitempty"`
	// FailureLimit is how many measurements may be outside the tolerance;
	// one more fails the step.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +kubebuilder:default=1
	// +optional
	FailureLimit *int32 `json:"failureLimit,omitempty"`
}

// IngressTrafficRouting names the user's Ingress and the controller dialect.
type IngressTrafficRouting struct {
	// ClassType selects the annotation dialect (a Lua script):
	// nginx, higress, aliyun-alb, mse, or a user-provided one.
	// +kubebuilder:default=nginx
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	// +optional
	ClassType string `json:"classType,omitempty"`
	// Name of the user's Ingress.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// GatewayTrafficRouting names an HTTPRoute.
type GatewayTrafficRouting struct {
	// HTTPRouteName is the HTTPRoute whose rules point at the stable Service.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	HTTPRouteName *string `json:"httpRouteName"`
}

// GracePeriod returns gracePeriodSeconds as a duration (3s when unset).
func (r TrafficRoutingRef) GracePeriod() time.Duration {
	if r.GracePeriodSeconds == nil {
		return 3 * time.Second
	}
	return time.Duration(*r.GracePeriodSeconds) * time.Second
}

// ObjectRef names an object in the Rollout's namespace.
type ObjectRef struct {
	// APIVersion of the object, such as networking.istio.io/v1.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	APIVersion string `json:"apiVersion"`
	// Kind of the object, such as VirtualService.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind"`
	// Name of the object.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}
