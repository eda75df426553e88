package verdict

import (
	"errors"
	"fmt"
	"testing"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

func steps(rs []v1alpha1.MetricResult) string {
	s := ""
	for _, r := range rs {
		s += fmt.Sprintf("%s@%d ", r.Metric, r.Step)
	}
	return s
}

func TestMergeResults(t *testing.T) {
	status := []v1alpha1.MetricResult{{Metric: "bg", Step: 0}, {Metric: "old", Step: 1}, {Metric: "cur", Step: 2, Successful: 1}}
	for _, tc := range []struct {
		name string
		step int32
		run  []v1alpha1.MetricResult
		want string
	}{
		{"step replaces itself and drops earlier steps", 2, []v1alpha1.MetricResult{{Metric: "cur", Step: 2, Successful: 2}}, "bg@0 cur@2 "},
		{"background keeps step entries", 0, []v1alpha1.MetricResult{{Metric: "bg", Step: 0, Successful: 9}}, "old@1 cur@2 bg@0 "},
		{"next step", 3, []v1alpha1.MetricResult{{Metric: "new", Step: 3}}, "bg@0 new@3 "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := MergeResults(status, tc.step, tc.run)
			if err != nil || steps(got) != tc.want {
				t.Fatalf("MergeResults = %s, %v; want %s", steps(got), err, tc.want)
			}
		})
	}
	big := make([]v1alpha1.MetricResult, MaxResults)
	got, err := MergeResults(status, 2, big)
	if !errors.Is(err, ErrTooManyResults) || len(got) != len(status) {
		t.Fatalf("overflow: %d results, %v; want ErrTooManyResults and status unchanged", len(got), err)
	}
}
