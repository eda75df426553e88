package kube

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rollgate/rollgate/test/rig"
)

// run runs f as a test body and returns what it failed with ("" if it
// passed).
var run = rig.Failure

func TestHoldsWatchesForTheWholeDuration(t *testing.T) {
	var looks atomic.Int32
	start := time.Now()
	if failed := run(func(tb testing.TB) {
		Holds(tb, 5*Poll, "still", func(context.Context) error { looks.Add(1); return nil })
	}); failed != "" {
		t.Fatalf("a check that always passes failed: %s", failed)
	}
	if took := time.Since(start); took < 5*Poll {
		t.Errorf("Holds returned after %s, before the %s it must watch", took, 5*Poll)
	}
	if n := looks.Load(); n < 2 {
		t.Errorf("Holds looked %d times in %s, want a look at the start and at the end at least", n, 5*Poll)
	}
}

// A move that comes back before the end is caught: a sleep followed by
// one look would not see it.
func TestHoldsCatchesAMoveThatComesBack(t *testing.T) {
	var looks atomic.Int32
	failed := run(func(tb testing.TB) {
		Holds(tb, 20*Poll, "the gate", func(context.Context) error {
			if looks.Add(1) == 3 {
				return errors.New("step 2")
			}
			return nil
		})
	})
	if !strings.Contains(failed, "the gate did not hold") || !strings.Contains(failed, "step 2") {
		t.Fatalf("failure %q, want it to name what moved and how", failed)
	}
	if n := looks.Load(); n != 3 {
		t.Errorf("Holds looked %d times, want it to stop at the first move (3)", n)
	}
}

func TestEventuallyFailsNamingWhat(t *testing.T) {
	failed := run(func(tb testing.TB) {
		Eventually(tb, 2*Poll, "v2 released", func(context.Context) (bool, error) { return false, nil })
	})
	if !strings.Contains(failed, "v2 released: not within") {
		t.Fatalf("failure %q, want it to name what did not happen", failed)
	}
	if failed := run(func(tb testing.TB) {
		Eventually(tb, 2*Poll, "at once", func(context.Context) (bool, error) { return true, nil })
	}); failed != "" {
		t.Fatalf("a condition that holds at once failed: %s", failed)
	}
}

func TestDecodeSkipsEmptyDocuments(t *testing.T) {
	objs := Decode(t, "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n---\n{\"apiVersion\": \"v1\", \"kind\": \"Secret\", \"metadata\": {\"name\": \"b\"}}\n")
	var got []string
	for _, o := range objs {
		got = append(got, o.GetKind()+"/"+o.GetName())
	}
	if strings.Join(got, ",") != "ConfigMap/a,Secret/b" {
		t.Fatalf("decoded %v, want ConfigMap/a and Secret/b", got)
	}
	if failed := run(func(tb testing.TB) { Decode(tb, "kind: [") }); !strings.Contains(failed, "decode") {
		t.Fatalf("bad YAML: failure %q, want a decode error", failed)
	}
}
