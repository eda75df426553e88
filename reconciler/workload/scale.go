package workload

// replicaSet is one ReplicaSet in a scaling plan.
type replicaSet struct {
	// Spec is its spec.replicas.
	Spec int32
	// Available is the number of its pods that are available.
	Available int32
	// Target is the number of replicas it should end with.
	Target int32
}

// planScale returns the next spec.replicas of each ReplicaSet on the way to
// its target, keeping both bounds of a rolling update at every instant:
//
//   - scale-ups (in slice order) only within the surge room: the sum of
//     spec.replicas never exceeds replicas + maxSurge;
//   - scale-downs (in slice order) first take pods that are not available
//     (the ReplicaSet controller deletes those first), then available ones
//     only while replicas - maxUnavailable pods stay available. Available
//     pods above a ReplicaSet's spec.replicas do not count: the ReplicaSet
//     controller is about to delete them (a scale-down it has not carried
//     out yet when the next call comes).
//
// Called again as pods become available, it converges on the targets.
// With maxSurge and maxUnavailable both 0 it cannot progress; callers
// guarantee maxSurge >= 1 in that case.
func planScale(rss []replicaSet, replicas, maxSurge, maxUnavailable int32) []int32 {
	out := make([]int32, len(rss))
	var total, avail int32
	for i, rs := range rss {
		out[i] = rs.Spec
		total += rs.Spec
		avail += min(rs.Available, rs.Spec)
	}
	room := replicas + maxSurge - total
	for i, rs := range rss {
		if out[i] < rs.Target && room > 0 {
			add := min(rs.Target-out[i], room)
			out[i] += add
			room -= add
		}
	}
	budget := max(avail-(replicas-maxUnavailable), 0)
	for i, rs := range rss {
		if out[i] <= rs.Target {
			continue
		}
		excess := out[i] - rs.Target
		free := min(excess, max(out[i]-rs.Available, 0))
		paid := min(excess-free, budget)
		out[i] -= free + paid
		budget -= paid
	}
	return out
}
