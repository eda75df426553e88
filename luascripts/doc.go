// Package luascripts runs the Lua scripts that translate a Rollout step into
// changes of a traffic resource: Ingress annotation dialects (nginx,
// higress, aliyun-alb, mse) and any custom resource named in a Rollout's
// customNetworkRefs (Istio VirtualService and DestinationRule, APISIX
// ApisixRoute, Traefik TraefikService, Contour HTTPProxy, SMI TrafficSplit,
// or a user script).
//
// It has three parts:
//
//   - A Library of scripts: the built-ins, embedded with go:embed, and
//     overrides from the controller's ConfigMap. Library.Resolve and
//     Library.ResolveIngress apply one precedence rule: a ConfigMap key
//     (lua.traffic.routing.<Kind>.<group> or
//     lua.traffic.routing.ingress.<classType>) always wins over the
//     built-in of the same key.
//   - A sandboxed Runner: each run gets a fresh Lua 5.1 state (or one from
//     a Pool, reset to what it was when built) with only the base (minus
//     code loading and environment functions), string, table and math
//     libraries, a time limit and resource limits (see Limits). A run
//     happens on the caller's goroutine and stops at the next instruction
//     when a limit is hit or the caller's context ends.
//     Runner.RunCustom and Runner.RunIngress return the script's result or
//     a *ScriptError naming the script and the line; on error the caller
//     leaves the resource untouched.
//   - Go implementations of some built-ins (the Istio VirtualService and
//     DestinationRule, native_istio.go), which Runner.RunCustom runs
//     instead of their Lua scripts on the inputs they handle, with the
//     same results and errors; other inputs and every ConfigMap override
//     run as Lua (see native.go).
//   - RunCases, the golden test runner behind `rollgate lua test <dir>`;
//     for a built-in with a Go implementation it runs both and requires
//     the same outcome.
//
// # Script contract
//
// The global obj has the shape Kruise Rollout gives its scripts, so that
// Kruise users' scripts run unchanged: what Kruise leaves out is nil. Custom
// resources (CustomInput):
//
//	obj.data                  {spec=..., labels=..., annotations=...} of the object
//	                          as it was before the release (steps are idempotent);
//	                          labels and annotations nil when empty
//	obj.canaryWeight          0-100, or -1 when the step routes by matches or
//	                          sets no traffic (matches take precedence)
//	obj.stableWeight          100-canaryWeight (101 for -1, as in Kruise)
//	obj.matches               nil, or a list of {path={type,value},
//	                          headers={{type,name,value}}, queryParams={{type,name,value}}};
//	                          types default as in the Gateway API (PathPrefix "/",
//	                          Exact); path, headers and queryParams nil when absent
//	obj.canaryService         the canary Service ("<service>-canary"; equal to
//	obj.stableService         stableService when there is none: use subsets)
//	obj.requestHeaderModifier nil or {set={{name,value}}, add={{name,value}}, remove={names}},
//	                          empty lists nil
//	obj.patchPodMetadata      nil or {labels={...}, annotations={...}}
//	obj.stableRevision        revision label values, and the label key
//	obj.canaryRevision        (pod-template-hash or controller-revision-hash)
//	obj.revisionLabelKey
//	obj.mirror                nil, or 1-100 at a mirror step (canaryWeight 0)
//	obj.stickyCookie          nil, or the cookie of trafficRoutings[].sticky
//
// and return {spec=..., labels=..., annotations=...}; spec is required,
// labels or annotations left out stay as they were. Ingress dialects
// (IngressInput) read obj.annotations, obj.weight (a string, "-1" without
// a weight), obj.matches, obj.canaryService, obj.stableService and
// obj.requestHeaderModifier, and return the canary Ingress's annotations
// (numbers and booleans become strings). Field names are exactly those of
// the Rollout YAML.
//
// Scripts also get print (captured, see Runner.Print), json.encode and
// json.decode (Kruise's module, written in Go under the limits) and a
// rollgate table: rollgate.array(t) and rollgate.object(t) mark a table as
// a JSON list or object, rollgate.copy(v) deep-copies keeping those marks,
// rollgate.null is the JSON null of list elements, rollgate.intersect and
// rollgate.covers reason about two conditions on one string (see
// StringCond), and withoutKeys, cookieMatch, stepConditions,
// headerAndCookie, canaryBy, canaryWeight and headerControl serve the
// canary-annotation Ingress dialects (see dialect.go and the README). The
// conversion rules between Go and Lua values (including
// empty tables) are described in convert.go and the README.
//
// # The routing guard
//
// RunCustom and RunIngress read the result of every script of a kind whose
// routing rules rollgate understands (guard.go) and refuse, with
// ErrMisroute, a result that would send to the canary requests matching
// none of the step's matches, beyond the step's weight.
package luascripts
