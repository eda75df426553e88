// Package traffic moves requests between the stable and the canary revision
// of a workload. It holds one contract, Router, and its implementations:
//
//   - the Services every release needs: a canary Service "<service>-canary"
//     owned by the Rollout, and the stable Service narrowed to the stable
//     revision while a release is in progress;
//   - Gateway API HTTPRoute (typed Go);
//   - Ingress, through a canary Ingress "<ingress>-canary" owned by the
//     Rollout whose annotations come from a Lua dialect script (nginx,
//     higress, aliyun-alb, mse, or a user script);
//   - any other resource (customNetworkRefs) through a Lua script chosen by
//     kind and group, such as an Istio VirtualService.
//
// New builds the Router for a Rollout from its trafficRoutings through a
// Registry of factories, so adding a router never edits the reconciler.
//
// Every router computes each step from the declared (original) state of the
// objects it edits, never from the previous step, so calls are idempotent
// and a restarted controller continues exactly where the last one stopped.
// The package never writes Rollout status or events: it returns values and
// wrapped errors, and the reconciler maps them to conditions.
//
// # Use
//
// Build the Router on every reconcile (it holds no state; the progress of
// a release lives in the cluster, on the objects themselves):
//
//	r, err := traffic.New(c, rollout, opts)
//	done, err := r.EnsureRoutes(ctx, desired) // each step, once its pods are ready
//	done, err := r.Restore(ctx)               // at the end, and last on rollback
//
// done=false with a nil error: requeue shortly (or on a watch of the
// routing objects). RetryAfter(err) reports a grace period: requeue after
// it. Any other error: ErrInvalid and ErrConflict need a spec or object
// change (Stalled), ErrScript a script or ConfigMap change, ErrRejected a
// Gateway change, ErrRouteNotFound the object; others are transient.
//
// On success call Restore before the workload replaces the remaining
// stable pods: it first restores the stable Service's selector (which then
// selects every pod), then the routes, then deletes the canary objects, so
// no step leaves a Service without pods. On rollback, while stable pods
// are ready, call EnsureRoutes with CanaryWeight 0 and no matches first
// (the canary gets no request at once), then roll the workload back, then
// Restore.
//
// # GitOps
//
// Objects rollgate creates (the canary Service and canary Ingress) carry a
// controller owner reference to the Rollout and none of the user's GitOps
// tracking metadata: Argo CD shows them as children of the Rollout and
// neither prunes nor diffs them; Flux does not know them.
//
// Objects declared in Git that a release must edit keep their declared
// state in the annotation rollgate.dev/original until the release ends:
// the stable Service (one selector key), the HTTPRoute (spec.rules) and
// custom resources (spec, labels, annotations). With Argo CD, ignore those
// fields and set RespectIgnoreDifferences=true, so neither the diff nor a
// self-heal sync undoes a step:
//
//	spec:
//	  syncPolicy:
//	    syncOptions: [RespectIgnoreDifferences=true]
//	  ignoreDifferences:
//	  - kind: Service
//	    name: <service>
//	    jsonPointers:
//	    - /spec/selector/rollgate.dev~1revision
//	    - /metadata/annotations/rollgate.dev~1original
//	  - group: gateway.networking.k8s.io
//	    kind: HTTPRoute
//	    name: <route>
//	    jsonPointers: [/spec/rules, /metadata/annotations/rollgate.dev~1original]
//	  - group: networking.istio.io      # each customNetworkRefs object
//	    kind: VirtualService
//	    name: <name>
//	    jsonPointers: [/spec, /metadata/annotations/rollgate.dev~1original]
//
// While a release holds them, those objects also carry the label
// LabelHeld and the step in the annotation AnnotationHeld (see Held).
// AdmitHTTPRoute, AdmitService and AdmitCustom put that step into any
// update of such an object by another writer, so an admission webhook
// (reconciler/routehook) stores a GitOps re-apply with the step already in
// it; what the update declares becomes the new declared state, so a change
// merged in Git during a release is kept at the end. Without the webhook,
// server-side apply keeps the annotations (keys another field manager
// owns) but takes back the stable Service's selector (an atomic map) and
// an HTTPRoute's rules (an atomic list); the next EnsureRoutes re-asserts
// the step, so the caller should also watch the objects it routes through.
package traffic

import (
	"context"
	"errors"
	"fmt"
	"time"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// Desired is the traffic state one step of a release asks for.
type Desired struct {
	// CanaryWeight is the percentage (0-100) of requests sent to the canary
	// revision. It is ignored when Matches is set.
	CanaryWeight int32
	// Matches send the requests that match one entry to the canary
	// revision and all others to the stable one (A/B testing). As in the
	// API (and Kruise Rollout), matches take precedence over the weight.
	Matches []v1alpha1.HttpRouteMatch
	// RequestHeaderModifier changes the headers of requests sent to the
	// canary revision, where the router supports it.
	RequestHeaderModifier *gatewayv1.HTTPHeaderFilter
	// MirrorPercent (1-100) copies that share of requests to the canary
	// revision while the stable one answers every request (a mirror step:
	// CanaryWeight 0, no matches). Routers that cannot mirror return an
	// error wrapping ErrInvalid that names the step's mirror field.
	MirrorPercent int32
	// StickyCookie, when set, names the session cookie that keeps a client
	// on the revision it first got at a weighted step (trafficRoutings[]
	// .sticky). The Router that New returns fills it from its entry.
	StickyCookie string
	// StableService and CanaryService name the Services in front of the
	// stable and the canary pods. The Router that New returns fills both
	// from its trafficRoutings entry ("<service>" and "<service>-canary")
	// and ignores the caller's values; set them only when calling an
	// implementation directly.
	StableService, CanaryService string
	// StableRevision and CanaryRevision are the values of the revision
	// label (Options.RevisionLabel) on the pods of each revision. The canary
	// Service selects CanaryRevision. The stable Service is narrowed to
	// StableRevision; leave StableRevision empty when the stable pods do not
	// carry the label (they were created before rollgate labelled
	// templates), or narrowing would leave the stable Service without pods.
	StableRevision, CanaryRevision string
	// PatchPodMetadata is the metadata added to canary pods; routers whose
	// scripts select pods by label (such as an Istio DestinationRule
	// subset) read it.
	PatchPodMetadata *v1alpha1.PatchPodTemplateMetadata
}

// Router moves traffic for one Rollout.
//
// Both methods are idempotent and level-triggered: they read the cluster,
// compute the objects from the declared original state and write only what
// differs. done=false with a nil error means "call again": a change was made
// and has not been confirmed yet. A *WaitError (errors.Is(err, ErrWait))
// means the same but says how long to wait; it is not a failure.
type Router interface {
	// EnsureRoutes makes the routes carry d. It is computed from the
	// declared original every time, so repeating a call changes nothing.
	EnsureRoutes(ctx context.Context, d Desired) (done bool, err error)
	// Restore puts every object back to exactly what was declared and
	// removes the objects and annotations rollgate added.
	Restore(ctx context.Context) (done bool, err error)
}

// Errors the caller must tell apart. Errors returned by this package wrap
// one of them where it applies; others are transient (API errors) and worth
// a retry with backoff.
var (
	// ErrWait: the change is made; wait before the next call. The error is
	// a *WaitError carrying the duration.
	ErrWait = errors.New("waiting for traffic to settle")
	// ErrRouteNotFound: an object named by the Rollout (Service, HTTPRoute,
	// Ingress, custom resource) does not exist. The message names it.
	ErrRouteNotFound = errors.New("routing object not found")
	// ErrInvalid: the spec or the declared objects cannot be acted on (no
	// rule points at the stable Service, a name is too long, a script is
	// missing, too many rules). Retrying does not help; the spec or the
	// declared objects must change.
	ErrInvalid = errors.New("invalid traffic routing")
	// ErrConflict: an object rollgate would create already exists and is
	// not owned by this Rollout. rollgate never takes it over.
	ErrConflict = errors.New("object exists and is not owned by the rollout")
	// ErrRejected: the router's controller (a Gateway) rejected the change.
	ErrRejected = errors.New("routing change rejected")
	// ErrScript: a Lua script failed; the object was left untouched. The
	// message names the script and the line.
	ErrScript = errors.New("traffic script failed")
)

// WaitError says how long to wait before calling the Router again: the
// grace period after a traffic change (gracePeriodSeconds), so that proxies
// and clients settle before the next action.
type WaitError struct {
	// After is the remaining wait.
	After time.Duration
	// Reason says what was changed.
	Reason string
}

// Error implements error.
func (e *WaitError) Error() string {
	return fmt.Sprintf("%s: %s, %s left", ErrWait, e.Reason, e.After.Round(time.Millisecond))
}

// Is makes errors.Is(err, ErrWait) true.
func (e *WaitError) Is(target error) bool { return target == ErrWait }

// RetryAfter returns the wait a Router asked for, if err is a *WaitError.
func RetryAfter(err error) (time.Duration, bool) {
	var w *WaitError
	if errors.As(err, &w) {
		return w.After, true
	}
	return 0, false
}

// sendsToCanary reports whether d sends the canary any request: a weight,
// matches, or copies.
func (d Desired) sendsToCanary() bool {
	return d.CanaryWeight != 0 || len(d.Matches) > 0 || d.MirrorPercent > 0
}

// checkMirror refuses a mirror percentage outside 1-100 (0 is no mirror).
func (d Desired) checkMirror() error {
	if d.MirrorPercent < 0 || d.MirrorPercent > 100 {
		return fmt.Errorf("%w: mirror %d%% is not within 1-100", ErrInvalid, d.MirrorPercent)
	}
	return nil
}

// errNoMirror is the error of a router that cannot copy requests.
func errNoMirror(router string) error {
	return fmt.Errorf("%w: %s cannot copy requests to the canary: remove mirror from the step "+
		"(spec.strategy.*.steps[].mirror), or route through gateway (an HTTPRoute) or the built-in TraefikService script",
		ErrInvalid, router)
}

// CanaryServiceName is the name of the canary Service rollgate creates for
// a stable Service.
func CanaryServiceName(stable string) string { return stable + canarySuffix }

const canarySuffix = "-canary"
