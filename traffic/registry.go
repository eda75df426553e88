package traffic

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// Target is what a Factory builds a router from: one trafficRoutings entry
// of a Rollout.
type Target struct {
	// Client reads and writes the routing objects.
	Client client.Client
	// Rollout owns the objects rollgate creates; routers read its name,
	// namespace and UID only.
	Rollout *v1alpha1.Rollout
	// Ref is the trafficRoutings entry.
	Ref v1alpha1.TrafficRoutingRef
	// Options are the caller's options.
	Options Options
}

// Factory builds the router that moves the routes of one trafficRoutings
// entry (the Services are handled by the Router New returns, around it). It
// returns nil, nil when the entry is not of its kind.
type Factory func(t Target) (Router, error)

// Registry maps trafficRoutings entries to routers: the first Factory that
// returns a router for an entry wins. The zero value knows no router.
type Registry struct {
	factories []Factory
}

// NewRegistry returns a Registry trying factories in order.
func NewRegistry(factories ...Factory) Registry {
	return Registry{factories: append([]Factory(nil), factories...)}
}

// DefaultRegistry knows the built-in routers: Gateway API HTTPRoute,
// Ingress and custom resources through Lua.
func DefaultRegistry() Registry {
	return NewRegistry(NewGatewayRouter, NewIngressRouter, NewCustomRouter)
}

// With returns a Registry that tries factories before r's own, so a caller
// can add a router or replace a built-in one.
func (r Registry) With(factories ...Factory) Registry {
	return NewRegistry(append(append([]Factory(nil), factories...), r.factories...)...)
}

// New builds the Router of a Rollout with the default registry.
func New(c client.Client, ro *v1alpha1.Rollout, opts Options) (Router, error) {
	return DefaultRegistry().New(c, ro, opts)
}

// New builds the Router of a Rollout: for each trafficRoutings entry, the
// canary and stable Services around the entry's route router, with the
// entry's grace period after each change. A Rollout without trafficRoutings
// gets a Router that does nothing and is always done. Building reads
// nothing from the cluster; call it on every reconcile.
func (r Registry) New(c client.Client, ro *v1alpha1.Rollout, opts Options) (Router, error) {
	refs := ro.Spec.Strategy.TrafficRoutings()
	entries := make([]Router, 0, len(refs))
	for i, ref := range refs {
		if ref.Service == "" {
			return nil, fmt.Errorf("%w: trafficRoutings[%d].service is empty", ErrInvalid, i)
		}
		t := Target{Client: c, Rollout: ro, Ref: ref, Options: opts}
		routes, err := r.build(t)
		if err != nil {
			return nil, fmt.Errorf("trafficRoutings[%d]: %w", i, err)
		}
		entries = append(entries, &entry{
			svc:    &services{c: c, ro: ro, stable: ref.Service, opts: opts},
			routes: routes,
			grace:  ref.GracePeriod(),
			sticky: ref.StickyCookie(),
			opts:   opts,
		})
	}
	return Sequence(entries...), nil
}

func (r Registry) build(t Target) (Router, error) {
	for _, f := range r.factories {
		router, err := f(t)
		if err != nil {
			return nil, err
		}
		if router != nil {
			return router, nil
		}
	}
	return nil, fmt.Errorf("%w: no router handles this entry (set one of gateway, ingress or customNetworkRefs)", ErrInvalid)
}

// Sequence composes routers: EnsureRoutes runs them in order and stops at
// the first one not done; Restore runs them in reverse order. With no
// routers it is always done.
func Sequence(routers ...Router) Router {
	return sequence(append([]Router(nil), routers...))
}

type sequence []Router

func (s sequence) EnsureRoutes(ctx context.Context, d Desired) (bool, error) {
	for _, r := range s {
		if done, err := r.EnsureRoutes(ctx, d); err != nil || !done {
			return false, err
		}
	}
	return true, nil
}

func (s sequence) Restore(ctx context.Context) (bool, error) {
	for i := len(s) - 1; i >= 0; i-- {
		if done, err := s[i].Restore(ctx); err != nil || !done {
			return false, err
		}
	}
	return true, nil
}
