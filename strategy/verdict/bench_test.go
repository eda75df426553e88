package verdict

import (
	"testing"
	"time"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

func BenchmarkCompile(b *testing.B) {
	for b.Loop() {
		if _, err := Compile("result.all(x, x < 0.05) && result.max() < 0.1"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkJudge(b *testing.B) {
	c, err := CompileMetric(&v1alpha1.Metric{SuccessCondition: "result[0] < 0.05", FailureCondition: "result[0] > 0.1"})
	if err != nil {
		b.Fatal(err)
	}
	v := List([]float64{0.07})
	now := time.Now()
	for b.Loop() {
		Judge(c, v, nil, now)
	}
}
