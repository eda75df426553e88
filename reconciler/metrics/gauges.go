package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// gauges is what the per-Rollout gauges export of one Rollout: the fields
// of its status they read, kept in memo. A GaugeVec would keep a series
// object per label set instead, nine for each Rollout (six of them the
// phases), about a hundred times the memory of these few numbers; at
// 10,000 Rollouts that was several kilobytes of each idle Rollout's heap.
// The series are made when Prometheus scrapes (rolloutGauges.Collect).
type gauges struct {
	set                 bool
	phase               v1alpha1.RolloutPhase
	step, steps, weight int32
	// since is the Unix time the waiting gate opened; waiting says a gate
	// waits.
	since   int64
	waiting bool
}

func gaugesOf(s *v1alpha1.RolloutStatus) gauges {
	g := gauges{set: true, phase: s.Phase, step: s.CurrentStepIndex, steps: s.StepCount, weight: s.CanaryWeight}
	if g.phase == "" {
		g.phase = v1alpha1.PhaseInitial
	}
	if a := s.AwaitingApproval; a != nil {
		g.since, g.waiting = a.Since.Unix(), true
	}
	return g
}

// rolloutGauges is the collector of the per-Rollout gauges: the phase,
// step, step count, canary weight and the time a gate opened, of every
// Rollout SetRollout was told about.
type rolloutGauges struct {
	m                                   *Metrics
	phase, step, steps, weight, waiting *prometheus.Desc
}

func newRolloutGauges(m *Metrics) *rolloutGauges {
	desc := func(name, help string, more ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, append([]string{"namespace", "name"}, more...), nil)
	}
	return &rolloutGauges{
		m:      m,
		phase:  desc("rollout_phase", "1 for the current phase of a Rollout (status.phase), 0 for the other phases.", "phase"),
		step:   desc("rollout_step", "Current step of a Rollout's release, 1-based (status.currentStepIndex); 0 before the first release."),
		steps:  desc("rollout_steps", "Number of steps of a Rollout's current or last release (status.stepCount)."),
		weight: desc("rollout_canary_weight", "Percentage (0-100) of traffic routed to the canary revision (status.canaryWeight)."),
		waiting: desc("rollout_awaiting_approval_since_timestamp_seconds",
			"Unix time since when a Rollout's gate waits for approval (status.awaitingApproval.since); absent when no gate waits."),
	}
}

func (c *rolloutGauges) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.phase, c.step, c.steps, c.weight, c.waiting} {
		ch <- d
	}
}

// Collect sends every Rollout's gauges: all six phase series (as
// kube-state-metrics does), step, steps and weight, and the gate's time
// while one waits.
func (c *rolloutGauges) Collect(ch chan<- prometheus.Metric) {
	// Copied first: the reconciles that report to Metrics do not wait for
	// the scrape to be sent.
	type entry struct {
		key types.NamespacedName
		g   gauges
	}
	c.m.mu.Lock()
	all := make([]entry, 0, len(c.m.rollouts))
	for key, mem := range c.m.rollouts {
		if mem.gauges.set {
			all = append(all, entry{key, mem.gauges})
		}
	}
	c.m.mu.Unlock()
	phaseLabel := func(p v1alpha1.RolloutPhase) *dto.LabelPair {
		return &dto.LabelPair{Name: proto.String("phase"), Value: proto.String(string(p))}
	}
	var phasePairs []*dto.LabelPair
	for _, p := range phases() {
		phasePairs = append(phasePairs, phaseLabel(p))
	}
	nameLabel, namespaceLabel := proto.String("name"), proto.String("namespace")
	for _, e := range all {
		g := e.g
		// The label pairs of one Rollout are made once and shared by its
		// series (sorted by name, as a Metric's must be): a scrape of
		// 10,000 Rollouts makes 95,000 series.
		name := &dto.LabelPair{Name: nameLabel, Value: proto.String(e.key.Name)}
		ns := &dto.LabelPair{Name: namespaceLabel, Value: proto.String(e.key.Namespace)}
		labels := []*dto.LabelPair{name, ns}
		for i, p := range phases() {
			v := 0.0
			if p == g.phase {
				v = 1
			}
			ch <- gauge{c.phase, v, []*dto.LabelPair{name, ns, phasePairs[i]}}
		}
		ch <- gauge{c.step, float64(g.step), labels}
		ch <- gauge{c.steps, float64(g.steps), labels}
		ch <- gauge{c.weight, float64(g.weight), labels}
		if g.waiting {
			ch <- gauge{c.waiting, float64(g.since), labels}
		}
	}
}

// gauge is one series of a scrape. Its label pairs may be shared with
// other series: nothing writes to them.
type gauge struct {
	desc   *prometheus.Desc
	value  float64
	labels []*dto.LabelPair
}

func (g gauge) Desc() *prometheus.Desc { return g.desc }

func (g gauge) Write(out *dto.Metric) error {
	out.Label, out.Gauge = g.labels, &dto.Gauge{Value: proto.Float64(g.value)}
	return nil
}
