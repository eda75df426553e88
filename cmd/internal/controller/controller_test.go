package controller

import (
	"errors"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestWebhookTimeoutSeconds: --webhook-timeout-seconds takes the API
// server's range, 1 to 30, and reaches the reconciler's options; any
// other value is a usage error naming the flag and the range, found
// before the controller looks for a cluster.
func TestWebhookTimeoutSeconds(t *testing.T) {
	parse := func(t *testing.T, args ...string) *Flags {
		t.Helper()
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		f := &Flags{}
		f.Register(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return f
	}
	for _, c := range []struct {
		arg  string
		want int32
	}{{"", 10}, {"1", 1}, {"25", 25}, {"30", 30}} {
		var args []string
		if c.arg != "" {
			args = []string{"--webhook-timeout-seconds", c.arg}
		}
		f := parse(t, args...)
		if err := f.validate(); err != nil {
			t.Errorf("--webhook-timeout-seconds %q: %v", c.arg, err)
		}
		if got := f.options().WebhookTimeoutSeconds; got != c.want {
			t.Errorf("--webhook-timeout-seconds %q: options carry %d, want %d", c.arg, got, c.want)
		}
	}
	for _, arg := range []string{"0", "-5", "31", "600"} {
		err := Run(parse(t, "--webhook-timeout-seconds", arg, "--kubeconfig", "/nonexistent"))
		if !errors.As(err, &UsageError{}) {
			t.Errorf("--webhook-timeout-seconds %s: got %v, want a usage error", arg, err)
			continue
		}
		for _, want := range []string{"--webhook-timeout-seconds " + arg, "1 to 30"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("--webhook-timeout-seconds %s: error %q does not say %q", arg, err, want)
			}
		}
	}
}
