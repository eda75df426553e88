package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksNoTestPackage checks that the shipped binary links none of the
// test platform (test/...): the demo, which needs it, is cmd/rollgate-demo.
func TestLinksNoTestPackage(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	var linked []string
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "github.com/rollgate/rollgate/test/") {
			linked = append(linked, pkg)
		}
	}
	if len(linked) > 0 {
		t.Errorf("cmd/rollgate links test packages (move what needs them to cmd/rollgate-demo):\n  %s", strings.Join(linked, "\n  "))
	}
}
