package demo_test

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rollgate/rollgate/test/demo"
	"github.com/rollgate/rollgate/test/repo"
)

// TestDemo runs the whole demo as `make demo` does, against the rollgate
// binary built from this checkout, and checks that the release completed
// and that Git reports it Healthy.
func TestDemo(t *testing.T) {
	bin := buildRollgate(t)
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
	if phase := gitStatusPhase(out.String()); phase != "Healthy" {
		t.Errorf("`rollgate status --repo` printed phase %q for demo/echoserver, want Healthy", phase)
	}
}

// buildRollgate builds cmd/rollgate into a temporary folder, so the test
// runs the code of this checkout even without `make build`.
func buildRollgate(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "rollgate")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/rollgate")
	cmd.Dir = repo.Root()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/rollgate: %v\n%s", err, out)
	}
	return bin
}

// gitStatusPhase returns the PHASE column of demo/echoserver in the table
// `rollgate status --repo` printed.
func gitStatusPhase(out string) string {
	_, status, _ := strings.Cut(out, "rollgate status --repo")
	for _, line := range strings.Split(status, "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == demo.Namespace && f[1] == demo.App {
			return f[2]
		}
	}
	return ""
}
