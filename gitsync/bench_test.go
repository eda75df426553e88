package gitsync_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/rollgate/rollgate/gitsync"
	"github.com/rollgate/rollgate/test/gitserver"
)

// benchWriter returns a Writer on a fresh repository, with n rollouts
// already flushed once.
func benchWriter(b *testing.B, n int) *gitsync.Writer {
	b.Helper()
	srv := gitserver.Start(b, gitserver.Options{})
	url, err := srv.CreateRepo("app", map[string]string{"a": "a\n"})
	if err != nil {
		b.Fatal(err)
	}
	repo := openRepo(b, gitsync.Options{URL: url})
	w, err := gitsync.NewWriter(repo, gitsync.WriterOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for i := range n {
		w.Enqueue(state(fmt.Sprintf("team-%d", i%10), fmt.Sprintf("app-%03d", i), 1))
	}
	if _, err := w.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	return w
}

// BenchmarkFlush200All rewrites all 200 status files per flush (one commit).
func BenchmarkFlush200All(b *testing.B) {
	w := benchWriter(b, 200)
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		for i := range 200 {
			w.Enqueue(state(fmt.Sprintf("team-%d", i%10), fmt.Sprintf("app-%03d", i), 2+it%2))
		}
		res, err := w.Flush(context.Background())
		if err != nil || len(res.Changed) != 200 {
			b.Fatalf("flush = %+v, %v", res, err)
		}
	}
}

// BenchmarkFlush200One changes one of 200 rollouts per flush: the common
// steady state.
func BenchmarkFlush200One(b *testing.B) {
	w := benchWriter(b, 200)
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		w.Enqueue(state("team-0", "app-000", 2+it%2))
		res, err := w.Flush(context.Background())
		if err != nil || len(res.Changed) != 1 {
			b.Fatalf("flush = %+v, %v", res, err)
		}
	}
}

// BenchmarkFlush200None flushes identical states: no commit, one fetch.
func BenchmarkFlush200None(b *testing.B) {
	w := benchWriter(b, 200)
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		w.Enqueue(state("team-0", "app-000", 1))
		res, err := w.Flush(context.Background())
		if err != nil || len(res.Changed) != 0 {
			b.Fatalf("flush = %+v, %v", res, err)
		}
	}
}

// BenchmarkFlush1000All rewrites all 1,000 status files per flush (one
// commit), with no other writer: one fetch-build-push cycle of P3.
func BenchmarkFlush1000All(b *testing.B) {
	w := benchWriter(b, 1000)
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		for i := range 1000 {
			w.Enqueue(state(fmt.Sprintf("team-%d", i%10), fmt.Sprintf("app-%03d", i), 2+it%2))
		}
		res, err := w.Flush(context.Background())
		if err != nil || len(res.Changed) != 1000 {
			b.Fatalf("flush = %+v, %v", res, err)
		}
	}
}
