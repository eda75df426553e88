package luascripts

import (
	"context"
	"testing"
)

func BenchmarkZZEmptyPooled(b *testing.B) {
	s, _ := NewScript("empty", "return {}")
	r := Runner{Pool: NewPool(1)}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.RunIngress(ctx, s, IngressInput{}); err != nil {
			b.Fatal(err)
		}
	}
}
