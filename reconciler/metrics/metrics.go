// Package metrics holds rollgate's Prometheus metrics: the state of each
// Rollout (phase, step, traffic, a gate waiting), what its releases did
// (step durations, results, approval waits, analysis measurements), and the
// latency of the Git and Lua work behind them.
//
// The reconciler is the only caller: it hands over a Rollout's status after
// each reconcile and the status transition the planner made, and it passes
// the observers of this package to gitsync and traffic through their
// options, so neither of them knows about Prometheus. A nil *Metrics records
// nothing, so a reconciler built without metrics works unchanged.
//
// controller-runtime already exports the reconcile loop
// (controller_runtime_reconcile_*{controller="rollout"}), the work queue and
// the admission webhooks (controller_runtime_webhook_*); this package does
// not repeat them.
package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// Namespace prefixes every metric of this package.
const Namespace = "rollgate"

// Results of a release (label result of rollgate_releases_total).
const (
	// ResultCompleted: the last step passed and the workload runs the new
	// revision.
	ResultCompleted = "completed"
	// ResultFailed: analysis failed or the progress deadline passed; the
	// release was rolled back.
	ResultFailed = "failed"
	// ResultAborted: a person stopped the release: spec.abort, the
	// workload's template reverted to the stable revision, spec.disabled,
	// or the Rollout deleted.
	ResultAborted = "aborted"
	// ResultSuperseded: a newer revision replaced the one being released.
	ResultSuperseded = "superseded"
)

// Outcomes of a step (label outcome of rollgate_rollout_step_duration_seconds).
const (
	// OutcomeCompleted: the release moved on to the next step, or finished.
	OutcomeCompleted = "completed"
	// OutcomeAborted: the release ended during the step (failed, aborted,
	// superseded).
	OutcomeAborted = "aborted"
)

// Sources of an approval (label source of rollgate_approval_wait_seconds).
const (
	// SourceGit: the approval was read from the tracked Git branch before
	// the GitOps tool applied it.
	SourceGit = "git"
	// SourceCluster: the approval was in the Rollout's spec.approvals in
	// the cluster (applied by the GitOps tool, or `rollgate approve`).
	SourceCluster = "cluster"
)

// Sources of a wakeup besides the kinds of the watched objects (label
// source of rollgate_rollout_wakeups_total).
const (
	// SourceSpec: the Rollout's own spec changed (an approval, an abort, a
	// pause, a retry).
	SourceSpec = "Rollout"
	// SourceGroup: a member of the Rollout's lockstep group moved.
	SourceGroup = "group"
)

// Results of a Git exchange or a Lua run (label result).
const (
	ResultSuccess = "success"
	ResultError   = "error"
	// ResultRejected: a push lost a race with another writer (retried).
	ResultRejected = "rejected"
	// ResultTimeout and ResultLimit: a Lua script went over its time or
	// another resource limit.
	ResultTimeout = "timeout"
	ResultLimit   = "limit"
)

// phases are the values of the phase label, every one exported per Rollout.
func phases() []v1alpha1.RolloutPhase {
	return []v1alpha1.RolloutPhase{
		v1alpha1.PhaseInitial, v1alpha1.PhaseHealthy, v1alpha1.PhaseProgressing,
		v1alpha1.PhasePaused, v1alpha1.PhaseFailed, v1alpha1.PhaseDisabled,
	}
}

// Metrics holds rollgate's collectors and what it remembers of each
// Rollout to observe every transition once. Build it with New; it is safe
// for concurrent use. A nil *Metrics records nothing.
type Metrics struct {
	gauges       *rolloutGauges
	stepDuration *prometheus.HistogramVec
	releases     *prometheus.CounterVec
	approvalWait *prometheus.HistogramVec
	measurements *prometheus.CounterVec
	git          *prometheus.HistogramVec
	lua          *prometheus.HistogramVec
	wakeups      *prometheus.CounterVec

	mu       sync.Mutex
	rollouts map[types.NamespacedName]*memo
}

// New creates the collectors and registers them with reg (cmd/rollgate
// passes controller-runtime's metrics.Registry, served on the metrics
// endpoint).
func New(reg prometheus.Registerer) (*Metrics, error) {
	// rollout labels the series of one Rollout, plus more labels.
	rollout := func(more ...string) []string { return append([]string{"namespace", "name"}, more...) }
	m := &Metrics{
		stepDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "rollout_step_duration_seconds",
			Help:    "Time from the start of a release step to its end (gates and pauses included), by how the step ended.",
			Buckets: []float64{15, 30, 60, 120, 300, 600, 1800, 3600, 3 * 3600, 12 * 3600, 48 * 3600},
		}, rollout("outcome")),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "releases_total",
			Help: "Releases that ended, by result: completed, failed, aborted, superseded.",
		}, rollout("result")),
		approvalWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "approval_wait_seconds",
			Help:    "Time a gate waited from opening to the approval being seen, by where the approval was seen first. Observed once per approved gate.",
			Buckets: []float64{10, 60, 300, 900, 1800, 3600, 2 * 3600, 4 * 3600, 8 * 3600, 24 * 3600, 72 * 3600},
		}, []string{"source"}),
		measurements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "analysis_measurements_total",
			Help: "Analysis measurements taken, by AnalysisTemplate, metric and phase (Successful, Failed, Inconclusive, Error).",
		}, rollout("template", "metric", "phase")),
		git: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "git_operation_duration_seconds",
			Help:    "Duration of exchanges with a Git remote (operation list, fetch, push) by Repository and result (success, error, rejected).",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"namespace", "repository", "operation", "result"}),
		lua: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "lua_evaluation_duration_seconds",
			Help:    "Duration of Lua traffic script runs by script (ConfigMap key) and result (success, error, timeout, limit).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"script", "result"}),
		wakeups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "rollout_wakeups_total",
			Help: "Rollouts queued for a reconcile by a watch event, by the kind of object whose event queued them (Pod, ReplicaSet, Deployment, Service, ...; Rollout: its spec changed; group: a member of its lockstep group moved).",
		}, []string{"source"}),
		rollouts: map[types.NamespacedName]*memo{},
	}
	m.gauges = newRolloutGauges(m)
	for _, c := range m.collectors() {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		m.gauges, m.stepDuration,
		m.releases, m.approvalWait, m.measurements, m.git, m.lua, m.wakeups,
	}
}

// perRollout are the vectors whose series belong to one Rollout.
func (m *Metrics) perRollout() []interface {
	DeletePartialMatch(prometheus.Labels) int
} {
	return []interface {
		DeletePartialMatch(prometheus.Labels) int
	}{m.stepDuration, m.releases, m.measurements}
}

// SetRollout sets the gauges of a Rollout from its status: phase, step,
// step count, canary weight, and the time its gate opened while one waits.
func (m *Metrics) SetRollout(ro *v1alpha1.Rollout) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.memoOf(types.NamespacedName{Namespace: ro.Namespace, Name: ro.Name}).gauges = gaugesOf(&ro.Status)
}

// memoOf is what is remembered of key, made on first use; m.mu is held.
func (m *Metrics) memoOf(key types.NamespacedName) *memo {
	mem := m.rollouts[key]
	if mem == nil {
		mem = &memo{}
		m.rollouts[key] = mem
	}
	return mem
}

// Woken counts n Rollouts queued by a watch event of source.
func (m *Metrics) Woken(source string, n int) {
	if m == nil || n == 0 {
		return
	}
	m.wakeups.WithLabelValues(source).Add(float64(n))
}

// Forget removes every series of a deleted Rollout and what was remembered
// of it.
func (m *Metrics) Forget(namespace, name string) {
	if m == nil {
		return
	}
	labels := prometheus.Labels{"namespace": namespace, "name": name}
	for _, v := range m.perRollout() {
		v.DeletePartialMatch(labels)
	}
	m.mu.Lock()
	delete(m.rollouts, types.NamespacedName{Namespace: namespace, Name: name})
	m.mu.Unlock()
}
