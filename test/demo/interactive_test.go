package demo_test

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rollgate/rollgate/test/demo"
	"github.com/rollgate/rollgate/test/rig"
)

// TestInteractive runs the demo with --interactive as a user would: at the
// gate it must print the cluster's KUBECONFIG and commands that work there;
// the test runs the printed `rollgate get` and the printed cluster-only
// `rollgate approve`, and the release must then complete.
func TestInteractive(t *testing.T) {
	t.Parallel()
	bin := demo.BuildRollgate(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	out := &rig.Buffer{}
	done := make(chan error, 1)
	go func() { done <- demo.Run(ctx, demo.Options{Out: out, Rollgate: bin, Interactive: true}) }()
	ended := false
	defer func() {
		if !ended { // a failed check: tear the demo down before the test ends
			cancel()
			<-done
		}
		t.Logf("demo output:\n%s", out.String())
	}()

	var help string
	for help == "" {
		select {
		case err := <-done:
			ended = true
			t.Fatalf("the demo ended before waiting at the gate: %v", err)
		case <-time.After(250 * time.Millisecond):
		}
		if s := out.String(); strings.Contains(s, "waiting until") {
			i := strings.Index(s, "The release waits for you")
			if i < 0 {
				t.Fatal("the demo waits at the gate without saying how to approve")
			}
			help = s[i:]
		}
	}
	m := regexp.MustCompile(`export KUBECONFIG=(\S+)`).FindStringSubmatch(help)
	if m == nil {
		t.Fatalf("the demo waits at the gate without printing export KUBECONFIG=...")
	}
	kubeconfig := m[1]
	for _, want := range []string{bin + " get -n demo -w", bin + " approve demo/echoserver --repo "} {
		if !strings.Contains(help, want) {
			t.Errorf("the help at the gate does not show %q", want)
		}
	}
	rollgate := func(args ...string) string {
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("rollgate %s with the printed KUBECONFIG: %v\n%s", strings.Join(args, " "), err, b)
		}
		return string(b)
	}
	if got := rollgate("get", "-n", "demo"); !strings.Contains(got, "approval: merge branch rollgate/approve/demo/echoserver/") {
		t.Fatalf("rollgate get at the gate does not show the approval to merge:\n%s", got)
	}
	approve := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(bin) + ` (approve demo/echoserver)\s*$`).FindStringSubmatch(help)
	if approve == nil {
		t.Fatalf("the help at the gate does not show the cluster-only %s approve demo/echoserver", bin)
	}
	rollgate(strings.Fields(approve[1])...)
	err := <-done
	ended = true
	if err != nil {
		t.Fatalf("the demo failed after the approval in the cluster: %v", err)
	}
	if !strings.Contains(out.String(), "you approved step 1 in the cluster") {
		t.Errorf("the demo does not say the approval came from the cluster")
	}
}
