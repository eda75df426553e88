package webhook

import (
	"testing"
	"time"
)

// TestPace: a few repairs in a row are immediate, then they slow down to
// one a minute; a quiet spell starts over.
func TestPace(t *testing.T) {
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var p pace
	now := start
	var got []time.Duration
	for range 10 {
		wait := p.settle(now)
		got = append(got, wait)
		now = now.Add(wait + 50*time.Millisecond)
		p.repaired(now)
	}
	want := []time.Duration{0, 0, 0, 1 * time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second,
		16 * time.Second, 32 * time.Second, maxSettle}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("waits before repairs in a row = %v, want %v", got, want)
		}
	}
	if w := p.settle(now.Add(maxSettle)); w != maxSettle {
		t.Errorf("a change a minute after the last repair waits %s, want %s", w, maxSettle)
	}
	if w := p.settle(now.Add(quietAfter + time.Second)); w != 0 {
		t.Errorf("after a quiet spell: wait %s, want none", w)
	}
	p.repaired(now.Add(quietAfter + time.Second))
	if p.streak != 1 {
		t.Errorf("after a quiet spell: streak %d, want a new one", p.streak)
	}
}
