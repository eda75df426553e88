package validation

import admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

// specConditions are the match conditions of the Rollout and
// AnalysisTemplate webhooks: they validate the spec alone, so the API
// server calls them on a create, and on an update only when the spec
// changes and the object is not being deleted. Labels, annotations,
// finalizers (the controller's own, removed as a Rollout is deleted) and
// the status subresource never wait on them, with the controller up or
// down.
func specConditions() []admissionregistrationv1.MatchCondition {
	return []admissionregistrationv1.MatchCondition{{
		Name:       "creates-or-changes-the-spec",
		Expression: "request.operation == 'CREATE' || (!has(object.metadata.deletionTimestamp) && object.?spec != oldObject.?spec)",
	}}
}
