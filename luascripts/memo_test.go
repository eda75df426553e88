package luascripts

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"
)

// TestMemoAnswersRepeatedQuestions: a Runner with a Memo runs an Ingress
// script once per script and input, gives a copy of the kept result, runs
// again when the input or the script's source changes, never keeps an
// error, and forgets the least recently used result beyond memoSize.
func TestMemoAnswersRepeatedQuestions(t *testing.T) {
	ctx := context.Background()
	runs := 0
	r := Runner{Memo: NewMemo(), Observe: func(Script, time.Duration, error) { runs++ }}
	script := func(src string) Script {
		t.Helper()
		s, err := NewScript("lua.traffic.routing.ingress.test", src)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	weight := script(`local out = {}; out["w"] = obj.weight; out["c"] = obj.canaryService; return out`)
	in := IngressInput{Annotations: map[string]string{"a": "1"}, Weight: 20, CanaryService: "web-canary"}

	first, err := r.RunIngress(ctx, weight, in)
	if err != nil {
		t.Fatal(err)
	}
	first["w"] = "changed by the caller"
	again, err := r.RunIngress(ctx, weight, in)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"w": "20", "c": "web-canary"}; !maps.Equal(again, want) {
		t.Errorf("the same question again: %v, want %v (a copy, untouched by the caller)", again, want)
	}
	if runs != 1 {
		t.Errorf("the same question twice: %d runs, want 1", runs)
	}

	in.Weight = 40
	if got, _ := r.RunIngress(ctx, weight, in); got["w"] != "40" || runs != 2 {
		t.Errorf("another weight: %v after %d runs, want w=40 after 2", got, runs)
	}
	// The same key with another source (a ConfigMap override edited) is
	// another script.
	edited := script(`local out = {}; out["w"] = "edited " .. obj.weight; return out`)
	if got, _ := r.RunIngress(ctx, edited, in); got["w"] != "edited 40" || runs != 3 {
		t.Errorf("an edited script: %v after %d runs, want w=edited 40 after 3", got, runs)
	}

	failing := script(`error("no way", 0)`)
	for range 2 {
		if _, err := r.RunIngress(ctx, failing, in); err == nil {
			t.Fatal("a failing script: no error")
		}
	}
	if runs != 5 {
		t.Errorf("a failing script twice: %d runs in all, want 5 (errors are not kept)", runs)
	}

	// A question too long to keep runs every time.
	long := IngressInput{Annotations: map[string]string{"note": strings.Repeat("x", memoMaxInput)}, Weight: 20}
	before := runs
	for range 2 {
		if _, err := r.RunIngress(ctx, weight, long); err != nil {
			t.Fatal(err)
		}
	}
	if runs != before+2 {
		t.Errorf("a question over memoMaxInput twice: %d runs, want 2 (not kept)", runs-before)
	}

	// Bounded: memoSize other questions push the first one out.
	for i := range memoSize {
		if _, err := r.RunIngress(ctx, weight, IngressInput{Weight: int32(i), CanaryService: fmt.Sprint("svc-", i)}); err != nil {
			t.Fatal(err)
		}
	}
	before = runs
	in.Weight = 20
	if _, err := r.RunIngress(ctx, weight, in); err != nil || runs != before+1 {
		t.Errorf("the first question after %d others: %d runs, want 1 (forgotten)", memoSize, runs-before)
	}
	if n := r.Memo.cache.Len(); n != memoSize {
		t.Errorf("the memo holds %d results, want its bound %d", n, memoSize)
	}
}

// BenchmarkRunNginxMemo measures a repeated run of the built-in nginx
// dialect answered by a Memo (BenchmarkRunNginx runs it each time).
func BenchmarkRunNginxMemo(b *testing.B) {
	s, err := NewLibrary().ResolveIngress("nginx", nil)
	if err != nil {
		b.Fatal(err)
	}
	in := IngressInput{Annotations: map[string]string{"nginx.ingress.kubernetes.io/rewrite-target": "/"}, Weight: 20}
	r := Runner{Memo: NewMemo()}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.RunIngress(ctx, s, in); err != nil {
			b.Fatal(err)
		}
	}
}
