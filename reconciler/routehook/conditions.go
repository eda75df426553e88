package routehook

import (
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/traffic"
)

// conditions are the match conditions of the route webhook: the API server
// calls it for an update of a held object only when both hold, so every
// other write goes through while no controller replica answers.
//
// What the handler reads and writes, per kind: for a Service its
// spec.selector, for a Gateway API HTTPRoute its spec.rules, and for both
// rollgate's held label and its held and original annotations (see
// Handle and traffic.AdmitService, traffic.AdmitHTTPRoute). An update that
// changes none of them gets the answer the old object would get if written
// back, and the old object is what rollgate or the webhook last admitted:
// it passes unchanged. So a Service's ports, another label or annotation,
// a finalizer, never reach the webhook.
//
// Any other kind is shifted by a Lua script, which may read any part of
// the object (an Ingress's annotations, a vendor resource's spec): every
// update of it still reaches the webhook, except while the object is being
// deleted, and only when the old object carries rollgate's held
// annotation. rollgate writes the held label and annotation together; an
// object with the label alone copied it from another: the EndpointSlice
// and Endpoints controllers copy a Service's labels onto its slices. Those
// must never wait for rollgate: while no replica answered, the slices of
// a held Service could not follow its pods, and a gateway kept sending
// requests to pods that were gone (seen on the real node: 488 requests
// answered 404 in 3 s during a controller restart).
//
// An object being deleted cannot carry traffic into the future, and
// skipping it lets garbage collection and GitOps prunes remove their
// finalizers while rollgate is down.
func conditions() []admissionregistrationv1.MatchCondition {
	changed := func(path string) string {
		return "object." + path + " != oldObject." + path
	}
	own := strings.Join([]string{
		changed("metadata.?labels[?'" + traffic.LabelHeld + "']"),
		changed("metadata.?annotations[?'" + traffic.AnnotationHeld + "']"),
		changed("metadata.?annotations[?'" + v1alpha1.AnnotationOriginal + "']"),
	}, " || ")
	isService := "request.kind.group == '' && request.kind.kind == 'Service'"
	isRoute := "request.kind.group == '" + gatewayv1.GroupName + "' && request.kind.kind == 'HTTPRoute'"
	return []admissionregistrationv1.MatchCondition{{
		Name:       "not-being-deleted",
		Expression: "!has(object.metadata.deletionTimestamp)",
	}, {
		Name: "changes-what-rollgate-holds",
		Expression: "(" + isService + ") ? (" + changed("spec.?selector") + " || " + own + ") :\n" +
			"(" + isRoute + ") ? (" + changed("spec.?rules") + " || " + own + ") :\n" +
			"oldObject.metadata.?annotations[?'" + traffic.AnnotationHeld + "'].hasValue()",
	}}
}
