package rig

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// Interval is how often the waits of this file look.
const Interval = 250 * time.Millisecond

// Wait looks at cond at once and then every Interval until it holds, and
// returns how long that took. It returns an error naming what, limit and
// cond's last word when limit passes first or ctx ends, and at once when
// cond returns an error (a process it depends on died, say). It is the one
// polling loop of the cluster tests: every other wait here is Wait in
// another shape.
func Wait(ctx context.Context, limit time.Duration, what string, cond func(ctx context.Context) (ok bool, last string, err error)) (time.Duration, error) {
	return WaitEvery(ctx, Interval, limit, what, cond)
}

// WaitEvery is Wait looking every every: for a benchmark whose looks load
// the API server it measures.
func WaitEvery(ctx context.Context, every, limit time.Duration, what string, cond func(ctx context.Context) (ok bool, last string, err error)) (time.Duration, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	last := "not looked yet"
	for {
		ok, why, err := cond(ctx)
		if why != "" {
			last = why
		}
		if err != nil {
			return time.Since(start), fmt.Errorf("%s: %w (last: %s)", what, err, last)
		}
		if ok {
			return time.Since(start), nil
		}
		select {
		case <-ctx.Done():
			return time.Since(start), fmt.Errorf("%s: not within %s (%v); last: %s", what, limit, context.Cause(ctx), last)
		case <-time.After(every):
		}
	}
}

// Eventually waits (see Wait) until cond holds, logs how long that took,
// and fails the test when limit passes first or cond returns an error.
func Eventually(t testing.TB, limit time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	took, err := Wait(context.Background(), limit, what, func(ctx context.Context) (bool, string, error) {
		ok, err := cond(ctx)
		return ok, "", err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: after %s", what, took.Round(time.Millisecond))
}

// Until is Eventually for a cond that says what it last saw, which the
// failure quotes; it also ends when ctx does.
func Until(t testing.TB, ctx context.Context, limit time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	took, err := Wait(ctx, limit, what, func(context.Context) (bool, string, error) {
		ok, last := cond()
		return ok, last, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: after %s", what, took.Round(time.Millisecond))
}

// Holds is the negative of Eventually: "nothing moves for d". It checks
// at once and then every Interval until d has passed, and fails the test
// at the first look where check returns an error. A fixed sleep followed
// by one look would miss a move that came back before the look; this sees
// every state that lasted longer than Interval.
func Holds(t testing.TB, d time.Duration, what string, check func(ctx context.Context) error) {
	t.Helper()
	ctx := context.Background()
	end := time.Now().Add(d)
	for {
		if err := check(ctx); err != nil {
			t.Fatalf("%s did not hold for %s: %v", what, d, err)
		}
		if !time.Now().Before(end) {
			return
		}
		time.Sleep(min(Interval, time.Until(end)))
	}
}
