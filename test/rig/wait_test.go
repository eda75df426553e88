package rig

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestHoldsWatchesForTheWholeDuration(t *testing.T) {
	var looks atomic.Int32
	start := time.Now()
	if failed := Failure(func(tb testing.TB) {
		Holds(tb, 5*Interval, "still", func(context.Context) error { looks.Add(1); return nil })
	}); failed != "" {
		t.Fatalf("a check that always passes failed: %s", failed)
	}
	if took := time.Since(start); took < 5*Interval {
		t.Errorf("Holds returned after %s, before the %s it must watch", took, 5*Interval)
	}
	if n := looks.Load(); n < 2 {
		t.Errorf("Holds looked %d times in %s, want a look at the start and at the end at least", n, 5*Interval)
	}
}

// A move that comes back before the end is caught: a sleep followed by
// one look would not see it.
func TestHoldsCatchesAMoveThatComesBack(t *testing.T) {
	var looks atomic.Int32
	failed := Failure(func(tb testing.TB) {
		Holds(tb, 20*Interval, "the gate", func(context.Context) error {
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
	failed := Failure(func(tb testing.TB) {
		Eventually(tb, 2*Interval, "v2 released", func(context.Context) (bool, error) { return false, nil })
	})
	if !strings.Contains(failed, "v2 released: not within") {
		t.Fatalf("failure %q, want it to name what did not happen", failed)
	}
	if failed := Failure(func(tb testing.TB) {
		Eventually(tb, 2*Interval, "at once", func(context.Context) (bool, error) { return true, nil })
	}); failed != "" {
		t.Fatalf("a condition that holds at once failed: %s", failed)
	}
}

func TestUntilFailsWithWhatAndTheLastWord(t *testing.T) {
	looks := 0
	failed := Failure(func(tb testing.TB) {
		Until(tb, context.Background(), 3*Interval, "v2 released", func() (bool, string) {
			looks++
			return false, fmt.Sprintf("look %d", looks)
		})
	})
	if !strings.Contains(failed, "v2 released: not within") || !strings.Contains(failed, fmt.Sprintf("last: look %d", looks)) {
		t.Fatalf("failure %q, want it to name what did not happen and the last look (%d)", failed, looks)
	}
	if failed := Failure(func(tb testing.TB) {
		Until(tb, context.Background(), Interval, "at once", func() (bool, string) { return true, "" })
	}); failed != "" {
		t.Fatalf("a condition that holds at once failed: %s", failed)
	}
}

func TestWaitStopsAtTheFirstError(t *testing.T) {
	looks := 0
	died := errors.New("controller exited")
	_, err := Wait(context.Background(), 10*Interval, "healthy", func(context.Context) (bool, string, error) {
		looks++
		if looks == 2 {
			return false, "", died
		}
		return false, "progressing", nil
	})
	if !errors.Is(err, died) || looks != 2 || !strings.Contains(err.Error(), "last: progressing") {
		t.Fatalf("Wait: %v after %d looks, want the error at the second look with the last word", err, looks)
	}
}
