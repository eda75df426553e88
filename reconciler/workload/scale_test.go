package workload

import (
	"reflect"
	"testing"
)

func TestPlanScale(t *testing.T) {
	tests := []struct {
		name                  string
		rss                   []replicaSet // other..., new, stable
		replicas, surge, unav int32
		want                  []int32
	}{
		{
			name:     "first batch surges the new ReplicaSet up to the canary count",
			rss:      []replicaSet{{Spec: 0, Target: 2}, {Spec: 10, Available: 10, Target: 8}},
			replicas: 10, surge: 3, unav: 2,
			want: []int32{2, 8},
		},
		{
			name:     "surge room limits the scale-up; old pods go within the budget",
			rss:      []replicaSet{{Spec: 0, Target: 5}, {Spec: 10, Available: 10, Target: 5}},
			replicas: 10, surge: 1, unav: 1,
			want: []int32{1, 9},
		},
		{
			name:     "no budget while new pods are not available: only the unavailable old pod goes",
			rss:      []replicaSet{{Spec: 2, Available: 0, Target: 2}, {Spec: 10, Available: 9, Target: 8}},
			replicas: 10, surge: 3, unav: 1,
			want: []int32{2, 9},
		},
		{
			name:     "new pods available: old scales down",
			rss:      []replicaSet{{Spec: 2, Available: 2, Target: 2}, {Spec: 10, Available: 10, Target: 8}},
			replicas: 10, surge: 3, unav: 0,
			want: []int32{2, 8},
		},
		{
			name:     "maxUnavailable 0 and surge 1 converge one pod at a time",
			rss:      []replicaSet{{Spec: 1, Available: 1, Target: 5}, {Spec: 10, Available: 10, Target: 5}},
			replicas: 10, surge: 1, unav: 0,
			want: []int32{1, 9},
		},
		{
			name:     "unavailable old pods are removed for free",
			rss:      []replicaSet{{Spec: 2, Available: 0, Target: 2}, {Spec: 10, Available: 7, Target: 8}},
			replicas: 10, surge: 2, unav: 0,
			want: []int32{2, 8},
		},
		{
			name:     "abandoned canary goes first, then stable",
			rss:      []replicaSet{{Spec: 3, Available: 3, Target: 0}, {Spec: 0, Target: 3}, {Spec: 7, Available: 7, Target: 7}},
			replicas: 10, surge: 3, unav: 2,
			want: []int32{1, 3, 7},
		},
		{
			name:     "rollback: stable surges back, canary goes within the budget",
			rss:      []replicaSet{{Spec: 5, Available: 5, Target: 0}, {Spec: 5, Available: 5, Target: 10}},
			replicas: 10, surge: 3, unav: 0,
			want: []int32{5, 8},
		},
		{
			name:     "rollback: once stable pods are available the canary goes, stable waits for room",
			rss:      []replicaSet{{Spec: 5, Available: 5, Target: 0}, {Spec: 8, Available: 8, Target: 10}},
			replicas: 10, surge: 3, unav: 0,
			want: []int32{2, 8},
		},
		{
			name:     "an old pod above its ReplicaSet's spec is going: it leaves no budget",
			rss:      []replicaSet{{Spec: 1, Available: 1, Target: 3}, {Spec: 3, Available: 4, Target: 2}},
			replicas: 5, surge: 0, unav: 1,
			want: []int32{2, 3},
		},
		{
			name:     "done: nothing moves",
			rss:      []replicaSet{{Spec: 5, Available: 5, Target: 5}, {Spec: 5, Available: 5, Target: 5}},
			replicas: 10, surge: 3, unav: 2,
			want: []int32{5, 5},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := planScale(tt.rss, tt.replicas, tt.surge, tt.unav)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("planScale = %v, want %v", got, tt.want)
			}
		})
	}
}
