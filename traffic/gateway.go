package traffic

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// GatewayRouter shifts traffic by editing the rules of the user's Gateway
// API HTTPRoute (gateway.networking.k8s.io/v1) in place; HTTPRouteRules
// says how. The declared spec.rules are saved in the annotation
// rollgate.dev/original before the first change, every step is computed
// from them, and Restore writes them back exactly and removes the
// annotation.
//
// Done: a call is done when the route carries the computed rules and, if
// the route has status.parents, every parent reports Accepted=True for the
// route's current generation. A route without status.parents (no Gateway
// controller has looked at it) is done as soon as it is written. A parent
// reporting Accepted=False, or ResolvedRefs=False (a backend such as the
// canary Service it cannot resolve: its share of requests would fail), for
// the current generation is an error wrapping ErrRejected.
//
// GitOps: the HTTPRoute is declared in Git. With Argo CD, ignore its rules
// and the annotation during a release and set RespectIgnoreDifferences:
//
//	ignoreDifferences:
//	- group: gateway.networking.k8s.io
//	  kind: HTTPRoute
//	  name: <route>
//	  jsonPointers: [/spec/rules, /metadata/annotations/rollgate.dev~1original]
//
// If a GitOps sync writes the declared rules back mid-release (so no rule
// points at the canary Service any more), the live rules are taken as the
// new declaration: a rule changed in Git during a release is kept, and the
// next call re-asserts the step on top of it.
type GatewayRouter struct {
	c      client.Client
	ro     *v1alpha1.Rollout
	name   string
	stable string
	opts   Options
}

// NewGatewayRouter is the Factory of GatewayRouter: it returns nil for an
// entry without gateway.
func NewGatewayRouter(t Target) (Router, error) {
	if t.Ref.Gateway == nil {
		return nil, nil
	}
	name := ptr.Deref(t.Ref.Gateway.HTTPRouteName, "")
	if name == "" {
		return nil, fmt.Errorf("%w: gateway.httpRouteName is empty", ErrInvalid)
	}
	return &GatewayRouter{c: t.Client, ro: t.Rollout, name: name, stable: t.Ref.Service, opts: t.Options}, nil
}

// savedRules is the HTTPRoute's declared state in the annotation.
type savedRules struct {
	Rules []gatewayv1.HTTPRouteRule `json:"rules"`
}

func (g *GatewayRouter) key() types.NamespacedName {
	return types.NamespacedName{Namespace: g.ro.Namespace, Name: g.name}
}

// EnsureRoutes implements Router.
func (g *GatewayRouter) EnsureRoutes(ctx context.Context, d Desired) (bool, error) {
	if d.StableService == "" || d.CanaryService == "" {
		return false, fmt.Errorf("%w: stable and canary Service names are required", ErrInvalid)
	}
	route := &gatewayv1.HTTPRoute{}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := g.c.Get(ctx, g.key(), route); err != nil {
			return notFound(err, "HTTPRoute", g.ro.Namespace, g.name)
		}
		declared, err := g.declared(route, d.CanaryService)
		if err != nil {
			return err
		}
		want, err := HTTPRouteRules(declared, route.Namespace, d)
		if err != nil {
			return fmt.Errorf("HTTPRoute %s/%s: %w", route.Namespace, route.Name, err)
		}
		raw, err := json.Marshal(savedRules{Rules: declared})
		if err != nil {
			return err
		}
		if err := g.sessionsKept(ctx, route, want, d); err != nil {
			return err
		}
		held := heldFor(g.ro, g.opts, d)
		return g.write(ctx, route, want, string(raw), &held)
	})
	if err != nil {
		return false, err
	}
	return accepted(route)
}

// sessionsKept asks the API server (a dry run) whether it would store the
// sessionPersistence of a sticky step, before any weight moves: the
// HTTPRoute CRD of Gateway API's standard channel has no such field, and
// the API server drops it without a word.
func (g *GatewayRouter) sessionsKept(ctx context.Context, route *gatewayv1.HTTPRoute, rules []gatewayv1.HTTPRouteRule, d Desired) error {
	if d.StickyCookie == "" || d.CanaryWeight == 0 || len(d.Matches) > 0 {
		return nil
	}
	probe := route.DeepCopy()
	probe.Spec.Rules = rules
	if err := g.c.Patch(ctx, probe, client.MergeFrom(route), client.DryRunAll, g.opts.fieldOwner()); err != nil {
		return fmt.Errorf("dry run of HTTPRoute %s/%s: %w", route.Namespace, route.Name, err)
	}
	for _, r := range probe.Spec.Rules {
		if len(serviceRefs(r.BackendRefs, route.Namespace, d.CanaryService)) > 0 && r.SessionPersistence == nil {
			return fmt.Errorf("%w: sticky: HTTPRoute %s/%s would be stored without spec.rules[].sessionPersistence: this "+
				"cluster's HTTPRoute CRD has no such field (Gateway API's standard channel); install the experimental "+
				"channel's CRD, or remove sticky", ErrInvalid, route.Namespace, route.Name)
		}
	}
	return nil
}

// declared returns the route's declared rules: the saved ones while the
// live rules point at the canary Service, the live ones otherwise.
func (g *GatewayRouter) declared(route *gatewayv1.HTTPRoute, canary string) ([]gatewayv1.HTTPRouteRule, error) {
	raw, saved := route.Annotations[v1alpha1.AnnotationOriginal]
	if !referencesService(route.Spec.Rules, route.Namespace, canary) {
		return route.Spec.Rules, nil
	}
	if !saved {
		return nil, fmt.Errorf("%w: HTTPRoute %s/%s points at Service %q but has no %s annotation: "+
			"remove the canary backendRefs from it by hand", ErrInvalid, route.Namespace, route.Name, canary,
			v1alpha1.AnnotationOriginal)
	}
	var s savedRules
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		return nil, fmt.Errorf("%w: HTTPRoute %s/%s: annotation %s: %v",
			ErrInvalid, route.Namespace, route.Name, v1alpha1.AnnotationOriginal, err)
	}
	return s.Rules, nil
}

// write patches rules, the original annotation ("" removes it) and the
// held step (nil removes it) when they differ, with an optimistic lock.
// route holds the stored object after.
func (g *GatewayRouter) write(ctx context.Context, route *gatewayv1.HTTPRoute, rules []gatewayv1.HTTPRouteRule, original string, held *Held) error {
	labels, annotations := withHeld(route.Labels, route.Annotations, held)
	if original == "" {
		delete(annotations, v1alpha1.AnnotationOriginal)
	} else {
		annotations = withKey(annotations, v1alpha1.AnnotationOriginal, original)
	}
	if equality.Semantic.DeepEqual(route.Spec.Rules, rules) && mapsEqual(route.Labels, labels) &&
		mapsEqual(route.Annotations, annotations) {
		return nil
	}
	before := route.DeepCopy()
	route.Spec.Rules = rules
	route.Labels, route.Annotations = labels, annotations
	patch := client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})
	if err := g.c.Patch(ctx, route, patch, g.opts.fieldOwner()); err != nil {
		return fmt.Errorf("patch HTTPRoute %s/%s: %w", route.Namespace, route.Name, err)
	}
	return nil
}

// Restore implements Router: the declared rules go back and the annotation
// is removed. A route that lost its annotation but still points at the
// canary Service has the canary backendRefs and rules removed.
func (g *GatewayRouter) Restore(ctx context.Context) (bool, error) {
	canary := CanaryServiceName(g.stable)
	route := &gatewayv1.HTTPRoute{}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := g.c.Get(ctx, g.key(), route); err != nil {
			if apierrors.IsNotFound(err) {
				route = nil
				return nil
			}
			return fmt.Errorf("get HTTPRoute %s/%s: %w", g.ro.Namespace, g.name, err)
		}
		rules := route.Spec.Rules
		if referencesService(rules, route.Namespace, canary) {
			declared, err := g.declared(route, canary)
			if err != nil {
				declared = stripService(rules, route.Namespace, canary)
			}
			rules = declared
		}
		return g.write(ctx, route, rules, "", nil)
	})
	if err != nil || route == nil {
		return route == nil && err == nil, err
	}
	return accepted(route)
}

// stripService removes backendRefs to Service name, rules left with none,
// and filters mirroring to it; stable backendRefs set to weight 0 get
// weight 1 back.
func stripService(rules []gatewayv1.HTTPRouteRule, ns, name string) []gatewayv1.HTTPRouteRule {
	out := make([]gatewayv1.HTTPRouteRule, 0, len(rules))
	for _, r := range rules {
		r = *r.DeepCopy()
		r.Filters = slices.DeleteFunc(r.Filters, mirrorsTo(ns, name))
		if len(r.Filters) == 0 {
			r.Filters = nil
		}
		drop := serviceRefs(r.BackendRefs, ns, name)
		if len(drop) == 0 {
			out = append(out, r)
			continue
		}
		if len(drop) == len(r.BackendRefs) {
			continue
		}
		refs := make([]gatewayv1.HTTPBackendRef, 0, len(r.BackendRefs))
		for i, ref := range r.BackendRefs {
			if slices.Contains(drop, i) {
				continue
			}
			if ptr.Deref(ref.Weight, 1) == 0 {
				ref.Weight = ptr.To[int32](1)
			}
			refs = append(refs, ref)
		}
		r.BackendRefs = refs
		out = append(out, r)
	}
	return out
}

// accepted applies the done rule to a route as stored.
func accepted(route *gatewayv1.HTTPRoute) (bool, error) {
	for _, p := range route.Status.Parents {
		cond := meta.FindStatusCondition(p.Conditions, string(gatewayv1.RouteConditionAccepted))
		if cond == nil || cond.ObservedGeneration < route.Generation {
			return false, nil
		}
		if cond.Status != "True" {
			return false, fmt.Errorf("%w: HTTPRoute %s/%s: parent %s: %s: %s", ErrRejected,
				route.Namespace, route.Name, p.ParentRef.Name, cond.Reason, cond.Message)
		}
		refs := meta.FindStatusCondition(p.Conditions, string(gatewayv1.RouteConditionResolvedRefs))
		if refs != nil && refs.ObservedGeneration >= route.Generation && refs.Status == "False" {
			return false, fmt.Errorf("%w: HTTPRoute %s/%s: parent %s cannot resolve a backend: %s: %s", ErrRejected,
				route.Namespace, route.Name, p.ParentRef.Name, refs.Reason, refs.Message)
		}
	}
	return true, nil
}
