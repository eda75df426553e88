package demo_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rollgate/rollgate/test/demo"
)

// TestDemo runs the whole demo as `make demo` does, against the rollgate
// binary built from this checkout, and checks that the release completed
// and that Git reports it Healthy.
func TestDemo(t *testing.T) {
	t.Parallel()
	bin := demo.BuildRollgate(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	var out bytes.Buffer
	err := demo.Run(ctx, demo.Options{Out: &out, Rollgate: bin, ApprovalDelay: time.Second})
	t.Logf("demo output:\n%s", out.String())
	if err != nil {
		t.Fatalf("the demo failed: %v", err)
	}
	for _, want := range []string{"Flux applied main@", "rollgate pushed the approval branch rollgate/approve/demo/echoserver/", "release complete"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output does not say %q", want)
		}
	}
	if phase := demo.GitStatusPhase(out.String()); phase != "Healthy" {
		t.Errorf("`rollgate status --repo` printed phase %q for demo/echoserver, want Healthy", phase)
	}
}
