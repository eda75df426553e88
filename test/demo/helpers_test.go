package demo

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rollgate/rollgate/test/repo"
)

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
		if len(f) >= 3 && f[0] == Namespace && f[1] == App {
			return f[2]
		}
	}
	return ""
}
