package rollout

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// judgeShare judges a wait on a share of a set of clusters
// (spec.fleet.waitFor[].clusters and atLeast): open when at least that
// many clusters of the set released as far as the wait asks, each judged
// as a wait on that one cluster. It stays closed when the set is empty
// (it never opens on nothing), and when a release of the same images
// failed in any cluster of the set, however many others released: a
// failure upstream holds every downstream wave.
func (u upstream) judgeShare() judgement {
	w := u.wait
	name := upstreamName(w, u.ro)
	set := u.members()
	who := fmt.Sprintf("%s: %s", waitName(w), name)
	if len(set) == 0 {
		return judgement{why: fmt.Sprintf("%s: no cluster of the set has a status file of it on the status branch (%s); "+
			"the wait holds until one has: check the names and patterns", who, u.clustersThere())}
	}
	need := len(set)
	if w.AtLeast != nil {
		// Validated at admission: a count >= 1 or "1%".."100%".
		n, err := intstr.GetScaledValueFromIntOrPercent(w.AtLeast, len(set), true)
		if err != nil {
			return judgement{why: fmt.Sprintf("%s: atLeast %s: %v", who, w.AtLeast, err)}
		}
		need = n
	}
	if need > len(set) {
		return judgement{why: fmt.Sprintf("%s: at least %d clusters must release it, but the set has only %d (%s); "+
			"lower atLeast or add clusters", who, need, len(set), listed(set))}
	}
	open, closed, ends := 0, []string(nil), []time.Time(nil)
	for _, c := range set {
		v := u.judgeOne(c)
		switch {
		case v.failed:
			return judgement{why: fmt.Sprintf("%s: a release in the set failed: %s", waitName(w), v.why)}
		case v.open:
			open++
		default:
			closed = append(closed, v.why)
			if !v.until.IsZero() {
				ends = append(ends, v.until)
			}
		}
	}
	if open >= need {
		return judgement{open: true}
	}
	what := "released " + strings.Join(u.images, ",")
	if w.Step != nil {
		what = fmt.Sprintf("reached step %d of %s", *w.Step, strings.Join(u.images, ","))
	}
	v := judgement{why: fmt.Sprintf("%s: %d of %d clusters %s, at least %d needed (atLeast %s): %s", who, open, len(set), what,
		need, atLeastText(w), briefly(closed))}
	// The bakes under way end one after the other: the wait opens by
	// itself when enough of them have ended.
	slices.SortFunc(ends, time.Time.Compare)
	if open+len(ends) >= need {
		v.until = ends[need-open-1]
	}
	return v
}

// members is the set of clusters of a share: the names it lists, and the
// clusters its patterns match that have a status file of the upstream
// Rollout, without this Rollout's own cluster; sorted.
func (u upstream) members() []string {
	name := upstreamName(u.wait, u.ro)
	own, _, _ := strings.Cut(u.self, "/")
	var set []string
	add := func(c string) {
		if c != own && !slices.Contains(set, c) {
			set = append(set, c)
		}
	}
	for _, p := range u.wait.Clusters {
		if !strings.Contains(p, "*") {
			add(p)
			continue
		}
		for k := range u.states {
			if c, n, _ := strings.Cut(k, "/"); n == name && matchCluster(p, c) {
				add(c)
			}
		}
	}
	slices.Sort(set)
	return set
}

// clustersThere lists the clusters with a status file on the status
// branch, for a message.
func (u upstream) clustersThere() string {
	var clusters []string
	for k := range u.states {
		if c, _, _ := strings.Cut(k, "/"); !slices.Contains(clusters, c) {
			clusters = append(clusters, c)
		}
	}
	if len(clusters) == 0 {
		return "no cluster wrote one yet"
	}
	return "the clusters there are " + listed(clusters)
}

// matchCluster reports whether a cluster name matches a pattern of
// spec.fleet.waitFor[].clusters ("*" stands for any characters).
func matchCluster(pattern, cluster string) bool {
	ok, err := path.Match(pattern, cluster)
	return err == nil && ok
}

// waitName names the upstream clusters of a wait for a message:
// "cluster staging", or "clusters prod-eu-*, prod-us".
func waitName(w v1alpha1.FleetWait) string {
	if len(w.Clusters) > 0 {
		return "clusters " + strings.Join(w.Clusters, ", ")
	}
	return "cluster " + w.Cluster
}

// atLeastText is a share's atLeast as written, "all" when unset.
func atLeastText(w v1alpha1.FleetWait) string {
	if w.AtLeast == nil {
		return "all"
	}
	return w.AtLeast.String()
}

// briefly joins the reasons of the clusters that hold a share, at most
// three and how many more.
func briefly(why []string) string {
	if len(why) > 3 {
		return fmt.Sprintf("%s; and %d more", strings.Join(why[:3], "; "), len(why)-3)
	}
	return strings.Join(why, "; ")
}
