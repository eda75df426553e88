package rig

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TryApply server-side applies obj as fieldManager with force, as Apply
// does, applying again after a transient error for ApplyRetryFor; it
// returns the API server's refusal instead of failing the test, for the
// stories that count refusals (a GitOps tool meets them too, and stops
// applying what else it holds).
func TryApply(ctx context.Context, c client.Client, obj *unstructured.Unstructured, fieldManager string) error {
	obj.SetManagedFields(nil)
	obj.SetResourceVersion("")
	deadline := time.Now().Add(ApplyRetryFor)
	for {
		err := c.Patch(ctx, obj, client.Apply, client.FieldOwner(fieldManager), client.ForceOwnership)
		if err == nil || !transient(err) || time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("apply %s %s: %w", obj.GetKind(), obj.GetName(), err)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
