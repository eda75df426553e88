package argocd_test

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// acceptRoutes plays the part of a Gateway controller for the app's
// HTTPRoute until the test ends: whenever the route's generation is not the
// one its status was written for, it accepts the route for its parent
// Gateway (Accepted and ResolvedRefs True at that generation), as a Gateway
// controller does after each change. Argo CD's built-in HTTPRoute health
// check reads that status (docs/getting-started-argocd.md, section 1).
func (a *app) acceptRoutes() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	a.t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			a.acceptRoute(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
}

func (a *app) acceptRoute(ctx context.Context) {
	var route gatewayv1.HTTPRoute
	if err := a.e.c.Get(ctx, client.ObjectKey{Namespace: a.name, Name: "echoserver"}, &route); err != nil {
		return
	}
	gen := route.Generation
	if len(route.Status.Parents) == 1 && len(route.Status.Parents[0].Conditions) > 0 &&
		route.Status.Parents[0].Conditions[0].ObservedGeneration == gen {
		return
	}
	now := metav1.Now()
	cond := func(t string) metav1.Condition {
		return metav1.Condition{Type: t, Status: metav1.ConditionTrue, Reason: t, ObservedGeneration: gen, LastTransitionTime: now}
	}
	route.Status.Parents = []gatewayv1.RouteParentStatus{{
		ParentRef:      gatewayv1.ParentReference{Name: "public"},
		ControllerName: "rollgate.dev/test-gateway",
		Conditions:     []metav1.Condition{cond("Accepted"), cond("ResolvedRefs")},
	}}
	_ = a.e.c.Status().Update(ctx, &route)
}
