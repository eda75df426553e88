package e2e

import (
	"context"
	"strings"
	"testing"
)

// TestBadAnalysisTemplateRefused: a condition that does not compile is
// refused at admission by the controller's validating webhook, with the
// field and the CEL error in the message.
func TestBadAnalysisTemplateRefused(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	u := w.Decode(`
apiVersion: rollgate.dev/v1alpha1
kind: AnalysisTemplate
metadata: {name: broken, namespace: demo}
spec:
  metrics:
  - name: error-rate
    successCondition: "result[0] <"
    provider:
      prometheus: {address: "http://prometheus:9090", query: "sum(rate(errors[1m]))"}
`)[0]
	err := w.C.Create(context.Background(), u)
	if err == nil || !strings.Contains(err.Error(), "spec.metrics[0].successCondition") {
		t.Fatalf("want the template refused naming spec.metrics[0].successCondition, got %v", err)
	}
	ok := w.Decode(`
apiVersion: rollgate.dev/v1alpha1
kind: AnalysisTemplate
metadata: {name: fine, namespace: demo}
spec:
  metrics:
  - name: error-rate
    successCondition: "result[0] < 0.05"
    provider:
      prometheus: {address: "http://prometheus:9090", query: "sum(rate(errors[1m]))"}
`)[0]
	if err := w.C.Create(context.Background(), ok); err != nil {
		t.Fatalf("a valid template was refused: %v", err)
	}
}
