package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/workload"
	"github.com/rollgate/rollgate/test/rig"
)

// The release of every workload kind, told the same way: given a running
// workload and its Rollout, when Flux applies a new image, then step 1 runs
// one new pod and holds at a manual gate until spec.approvals opens it,
// step 2 runs half the pods and pauses for a second, step 3 runs them all,
// and the workload is handed back to its own controller as Git declares
// it. A revert in Git at the gate rolls back without a batch; a newer image
// at the gate restarts the release at step 1.

// workloadKind is one way a Rollout releases a workload.
type workloadKind struct {
	name   string // subtest name
	kind   string // spec.workloadRef.kind
	canary bool   // spec.strategy.canary.enableExtraWorkloadForCanary
	// replicas is the number of pods: spec.replicas, or for a DaemonSet
	// one per kwok node.
	replicas int32
	// maxUnavailable is the workload's declared maxUnavailable resolved
	// against replicas: ready pods never number fewer than replicas minus
	// it.
	maxUnavailable int32
	// surge is how many old pods beyond replicas minus the new ones may
	// still run when a batch is done: the partition-style Deployment
	// scales the new ReplicaSet up first (within maxSurge) and the old
	// one down behind it.
	surge int32
	// maxPods, where set, is the most live pods at any instant: a
	// StatefulSet or a held DaemonSet replaces a pod only once it is gone.
	// (A Deployment's bound is on its ReplicaSets' spec.replicas; pods
	// lag behind it.)
	maxPods int32
}

var (
	partitionKind   = workloadKind{name: "partition", kind: "Deployment", replicas: 5, maxUnavailable: 1, surge: 2}
	canaryKind      = workloadKind{name: "canary", kind: "Deployment", canary: true, replicas: 5, maxUnavailable: 1}
	statefulSetKind = workloadKind{name: "statefulset", kind: "StatefulSet", replicas: 5, maxUnavailable: 1, maxPods: 5}
	daemonSetKind   = workloadKind{name: "daemonset", kind: "DaemonSet", replicas: 3, maxUnavailable: 1, maxPods: 3}
)

// The images of the stories: kwok runs any.
const (
	webV1 = "web:1"
	webV2 = "web:2"
	webV3 = "web:3"
)

func TestWorkloadDeploymentPartition(t *testing.T) { kindStories(t, partitionKind) }
func TestWorkloadDeploymentCanary(t *testing.T)    { kindStories(t, canaryKind) }
func TestWorkloadStatefulSet(t *testing.T)         { kindStories(t, statefulSetKind) }
func TestWorkloadDaemonSet(t *testing.T)           { kindStories(t, daemonSetKind) }

// kindStories runs the three stories of one kind one after another, each
// in a world (namespace and controller) of its own.
func kindStories(t *testing.T, k workloadKind) {
	t.Parallel()
	t.Run("release", func(t *testing.T) { kindReleaseStory(newKindStory(t, k)) })
	t.Run("rollback", func(t *testing.T) { kindRollbackStory(newKindStory(t, k)) })
	t.Run("continuous", func(t *testing.T) { kindContinuousStory(newKindStory(t, k)) })
}

// The steps of every story: one pod behind a manual gate, half the pods
// for a second, then all of them.
const kindSteps = `
      - replicas: 1
        pause: {}
      - replicas: "50%"
        pause: {duration: 1}
      - replicas: "100%"`

// kindStory is one workload, its Rollout and the subtest telling their story.
type kindStory struct {
	*world
	t  *testing.T
	k  workloadKind
	ns string
	// steps are the Rollout's steps (YAML list items) and extra more of
	// its canary strategy (failureThreshold).
	steps, extra string
	// strategy overrides a Deployment's declared spec.strategy (YAML).
	strategy string
	// declared is the workload's update settings before any release, as
	// Git declares them (after API defaulting).
	declared workloadSettings
}

// newKindStory gives a subtest a world of its own (newWorld): the
// workload lives in its namespace.
func newKindStory(t *testing.T, k workloadKind) *kindStory {
	w := newWorld(t)
	return &kindStory{world: w, t: t, k: k, ns: w.NS, steps: kindSteps}
}

// until waits until cond holds, failing with cond's last explanation after
// timeout (see rig.Until).
func (s *kindStory) until(timeout time.Duration, what string, cond func() (bool, string)) {
	s.t.Helper()
	s.untilEvery(rig.Interval, timeout, what, cond)
}

// untilEvery is until looking every interval.
func (s *kindStory) untilEvery(interval, timeout time.Duration, what string, cond func() (bool, string)) {
	s.t.Helper()
	took, err := rig.WaitEvery(context.Background(), interval, timeout, what, func(context.Context) (bool, string, error) {
		ok, why := cond()
		return ok, why, nil
	})
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Logf("%s: after %s", what, took.Round(time.Millisecond))
}

// targets are the new pods each step of kindSteps asks for.
func (s *kindStory) targets() []int32 {
	r := s.k.replicas
	return []int32{1, (r + 1) / 2, r}
}

func (s *kindStory) floor() int32 { return s.k.replicas - s.k.maxUnavailable }

// workloadYAML is the workload as Git declares it, running image. Every
// kind declares its update settings explicitly, so that "restored" means
// restored to what Git says.
func (s *kindStory) workloadYAML(image string) string {
	pod := fmt.Sprintf(`
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      tolerations: [{operator: Exists}]
      containers:
      - name: web
        image: %s`, image)
	head := fmt.Sprintf("apiVersion: apps/v1\nkind: %s\nmetadata: {name: web, namespace: %s}\nspec:", s.k.kind, s.NS)
	switch s.k.kind {
	case "Deployment":
		strategy := s.strategy
		if strategy == "" {
			strategy = "{type: RollingUpdate, rollingUpdate: {maxSurge: 2, maxUnavailable: 1}}"
		}
		return fmt.Sprintf("%s\n  replicas: %d\n  strategy: %s%s\n", head, s.k.replicas, strategy, pod)
	case "StatefulSet":
		return fmt.Sprintf("%s\n  replicas: %d\n  serviceName: web\n  updateStrategy: {type: RollingUpdate, rollingUpdate: {partition: 0}}%s\n",
			head, s.k.replicas, pod)
	default:
		return fmt.Sprintf("%s\n  updateStrategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: 1}}%s\n", head, pod)
	}
}

// rolloutYAML is the Rollout as Git declares it, with approvals appended
// as spec.approvals items.
func (s *kindStory) rolloutYAML(approvals ...string) string {
	strategy := strings.TrimPrefix(s.extra, "\n")
	if s.k.canary {
		strategy += "\n      enableExtraWorkloadForCanary: true"
	}
	strategy = strings.TrimPrefix(strategy+"\n      steps:"+s.steps, "\n")
	return rig.Rollout{Name: "web", Namespace: s.NS, Kind: s.k.kind, Strategy: strategy, WithoutTraffic: true,
		Approvals: approvals}.YAML()
}

// approvalItem is a spec.approvals item for step of revision rev.
func approvalItem(rev string, step int) string {
	return fmt.Sprintf("{revision: %s, step: %d, approvedBy: e2e}", rev, step)
}

// given applies the workload at v1 and its Rollout and waits until every
// pod runs, the Rollout is Healthy and the workload is covered by the
// webhook. It records the declared update settings.
func (s *kindStory) given() {
	s.t.Helper()
	s.ApplyYAML(s.workloadYAML(webV1))
	s.ApplyYAML(s.rolloutYAML())
	s.until(90*time.Second, "v1 running everywhere and the Rollout healthy", func() (bool, string) {
		ro, pods := s.Rollout(s.NS, "web"), s.census("")
		covered := s.workload().GetLabels()[v1alpha1.LabelControlled] != ""
		return pods.count(webV1) == allReady(s.k.replicas) && conditions.IsReady(ro) && ro.Status.Phase == v1alpha1.PhaseHealthy && covered,
			fmt.Sprintf("%s, pods %v, covered %t", releasePosition(&ro.Status), pods, covered)
	})
	s.declared = settingsOf(s.workload())
}

// workload reads the workload.
func (s *kindStory) workload() client.Object {
	var obj client.Object
	switch s.k.kind {
	case "Deployment":
		obj = &appsv1.Deployment{}
	case "StatefulSet":
		obj = &appsv1.StatefulSet{}
	default:
		obj = &appsv1.DaemonSet{}
	}
	if err := s.C.Get(context.Background(), client.ObjectKey{Namespace: s.NS, Name: "web"}, obj); err != nil {
		s.t.Fatal(err)
	}
	return obj
}

// workloadSettings are the fields a release overrides.
type workloadSettings struct {
	Paused   bool
	Strategy any
}

func settingsOf(obj client.Object) workloadSettings {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return workloadSettings{Paused: o.Spec.Paused, Strategy: o.Spec.Strategy}
	case *appsv1.StatefulSet:
		return workloadSettings{Strategy: o.Spec.UpdateStrategy}
	case *appsv1.DaemonSet:
		return workloadSettings{Strategy: o.Spec.UpdateStrategy}
	}
	return workloadSettings{}
}

// released says why the workload is not (yet) back with its own
// controller as Git declares it, or "" when it is: no control annotation,
// the declared update settings, no canary Deployment.
func (s *kindStory) released() string {
	obj := s.workload()
	if _, ok := obj.GetAnnotations()[v1alpha1.AnnotationControl]; ok {
		return "the workload still carries " + v1alpha1.AnnotationControl
	}
	if got := settingsOf(obj); !equality.Semantic.DeepEqual(got, s.declared) {
		return fmt.Sprintf("update settings %+v, declared %+v", got, s.declared)
	}
	if n := len(s.canaryDeployments()); n > 0 {
		return fmt.Sprintf("%d canary Deployments left", n)
	}
	return ""
}

func (s *kindStory) canaryDeployments() []appsv1.Deployment {
	var list appsv1.DeploymentList
	if err := s.C.List(context.Background(), &list, client.InNamespace(s.NS), client.MatchingLabels{workload.LabelCanaryOf: "web"}); err != nil {
		s.t.Fatal(err)
	}
	return list.Items
}

// livePod is one live pod of the workload.
type livePod struct {
	name, image string
	ready       bool
	labels      map[string]string
}

// podCensus is the workload's pods that are not terminating.
type podCensus []livePod

// census lists the workload's pods, now (rv "") or exactly as they were at
// resourceVersion rv. The cluster has one etcd, whose revisions are the
// resource versions of every kind, so the version of a Rollout status
// write names the instant of that write.
func (s *kindStory) census(rv string) podCensus {
	c, err := listPodCensus(s.C, s.NS, rv)
	if err != nil {
		s.t.Fatal(err)
	}
	return c
}

func listPodCensus(c client.Client, ns, rv string) (podCensus, error) {
	opts := &client.ListOptions{Namespace: ns, LabelSelector: labels.SelectorFromSet(labels.Set{"app": "web"})}
	if rv != "" {
		opts.Raw = &metav1.ListOptions{ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchExact}
	}
	var list corev1.PodList
	var err error
	for range 20 { // an exact version may be a moment ahead of the API server's cache
		if err = c.List(context.Background(), &list, opts); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return nil, fmt.Errorf("list pods at %q: %w", rv, err)
	}
	var out podCensus
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		info := livePod{name: p.Name, image: p.Spec.Containers[0].Image, labels: p.Labels}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				info.ready = true
			}
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

// count returns the ready and total pods running image.
func (c podCensus) count(image string) [2]int32 {
	var n [2]int32
	for _, p := range c {
		if p.image == image {
			n[1]++
			if p.ready {
				n[0]++
			}
		}
	}
	return n
}

// ready counts the ready pods of every image.
func (c podCensus) ready() int32 {
	var n int32
	for _, p := range c {
		if p.ready {
			n++
		}
	}
	return n
}

// batches counts the pods running image by their batch-id label, for the
// pods labelled with rolloutID; pods without it count under "no rollout-id".
func (c podCensus) batches(image, rolloutID string) map[string]int {
	out := map[string]int{}
	for _, p := range c {
		if p.image != image {
			continue
		}
		if p.labels[v1alpha1.LabelRolloutID] != rolloutID {
			out["no rollout-id "+rolloutID]++
			continue
		}
		out[p.labels[v1alpha1.LabelBatchID]]++
	}
	return out
}

// names are the pod names, as one string.
func (c podCensus) names() string {
	var n []string
	for _, p := range c {
		n = append(n, p.name)
	}
	return strings.Join(n, ",")
}

func (c podCensus) String() string {
	by := map[string][2]int32{}
	for _, p := range c {
		by[p.image] = c.count(p.image)
	}
	return fmt.Sprint(by)
}

// allReady is the ready and total pods of an image when n all run ready.
func allReady(n int32) [2]int32 { return [2]int32{n, n} }

// oldAt is the number of old pods while n new ones run.
func (s *kindStory) oldAt(n int32) int32 {
	if s.k.canary {
		return s.k.replicas // the canary Deployment runs beside every stable pod
	}
	return s.k.replicas - n
}

// bump applies image as Flux would.
func (s *kindStory) bump(image string) { s.ApplyYAML(s.workloadYAML(image)) }

// atGate waits until step 1 of the release of image waits for approval,
// with exactly one new pod, labelled for batch 1, and the old ones.
func (s *kindStory) atGate(image, old string) *v1alpha1.Rollout {
	s.t.Helper()
	var ro *v1alpha1.Rollout
	var pods podCensus
	s.until(90*time.Second, "step 1 of "+image+" waiting for approval with one new pod", func() (bool, string) {
		ro, pods = s.Rollout(s.NS, "web"), s.census("")
		a := ro.Status.AwaitingApproval
		batches := pods.batches(image, workload.RolloutID("web", ro.Status.CanaryRevision))
		return a != nil && a.Step == 1 && a.Revision == ro.Status.CanaryRevision && ro.Status.CurrentStepIndex == 1 &&
				ro.Status.ObservedGeneration == ro.Generation &&
				pods.count(image) == allReady(1) && pods.count(old) == allReady(s.oldAt(1)) && batches["1"] == 1,
			fmt.Sprintf("%s, pods %v, new by batch-id %v", releasePosition(&ro.Status), pods, batches)
	})
	if conditions.IsReady(ro) || conditions.IsStalled(ro) || !conditions.IsTrue(ro, v1alpha1.AwaitingApprovalCondition) {
		s.t.Errorf("at the gate: want AwaitingApproval=True, not Ready, not Stalled: %+v", ro.Status.Conditions)
	}
	assertKstatus(s.t, ro)
	s.t.Logf("step 1 gate: %v", pods)
	return ro
}

// healthy waits until the release of image is over: the Rollout Healthy
// with reason, every pod running image, the workload released.
func (s *kindStory) healthy(image, reason string) *v1alpha1.Rollout {
	s.t.Helper()
	var ro *v1alpha1.Rollout
	s.until(120*time.Second, image+" everywhere, the workload released and the Rollout healthy", func() (bool, string) {
		ro = s.Rollout(s.NS, "web")
		pods, why := s.census(""), s.released()
		return ro.Status.Phase == v1alpha1.PhaseHealthy && conditions.IsReady(ro) &&
				conditions.GetReason(ro, v1alpha1.ReadyCondition) == reason && ro.Status.ObservedGeneration == ro.Generation &&
				pods.count(image) == allReady(s.k.replicas) && len(pods) == int(s.k.replicas) && why == "",
			fmt.Sprintf("%s (%s), pods %v, %s", releasePosition(&ro.Status), conditions.GetReason(ro, v1alpha1.ReadyCondition), pods, why)
	})
	assertKstatus(s.t, ro)
	return ro
}

// kindReleaseStory: a three-step release with a gate, through to the end.
func kindReleaseStory(s *kindStory) {
	t := s.t
	s.given()
	targets := s.targets()
	rec := s.record(recordOptions{consistent: func(st *v1alpha1.RolloutStatus, pods podCensus) string {
		if st.Phase != v1alpha1.PhaseProgressing || st.CurrentStepIndex < 1 || st.CurrentStepState == v1alpha1.StepCompleted {
			return ""
		}
		if n, limit := pods.count(webV2)[1], targets[st.CurrentStepIndex-1]; n > limit {
			return fmt.Sprintf("step %d (%s) runs %d new pods, more than its %d", st.CurrentStepIndex, st.CurrentStepState, n, limit)
		}
		return ""
	}})

	// When Flux applies a new image.
	start := time.Now()
	s.bump(webV2)

	// Then step 1 runs one new pod and waits for approval; the gate holds.
	ro := s.atGate(webV2, webV1)
	canary := ro.Status.CanaryRevision
	t.Logf("gate reached %s after the bump", time.Since(start).Round(time.Millisecond))
	before := s.census("")
	// Nothing may move without an approval.
	rig.Holds(t, 3*time.Second, "the unapproved gate", func(ctx context.Context) error {
		ro = s.Rollout(s.NS, "web")
		if after := s.census(""); after.names() != before.names() || after.String() != before.String() {
			return fmt.Errorf("pods changed at an unapproved gate: %v -> %v", before, after)
		}
		if ro.Status.CurrentStepIndex != 1 || ro.Status.CurrentStepState != v1alpha1.StepPaused || ro.Status.AwaitingApproval == nil {
			return fmt.Errorf("the gate did not hold: %s", releasePosition(&ro.Status))
		}
		return nil
	})

	// When the approval is merged and Flux applies the Rollout.
	approved := time.Now()
	s.ApplyYAML(s.rolloutYAML(approvalItem(canary, 1)))

	// Then steps 2 and 3 run and the workload is handed back as declared.
	ro = s.healthy(webV2, v1alpha1.ReasonSucceeded)
	if ro.Status.StableRevision != canary {
		t.Errorf("stable revision %s, want the released %s", ro.Status.StableRevision, canary)
	}
	t.Logf("released %s after the approval", time.Since(approved).Round(time.Millisecond))

	// And each batch ran its pods, and only its pods, at its step: the
	// pods as they were at the status write that ended each step.
	writes := rec.stop()
	step2 := rec.first(writes, "step 2 started", func(st *v1alpha1.RolloutStatus) bool { return st.CurrentStepIndex == 2 })
	if got := step2.pods.count(webV2); got != allReady(1) {
		t.Errorf("when step 2 started (the approval): new pods %v, want the one of step 1", got)
	}
	step3 := rec.first(writes, "step 3 started", func(st *v1alpha1.RolloutStatus) bool { return st.CurrentStepIndex == 3 })
	s.assertBatch(step3.pods, 2, canary)
	done := rec.first(writes, "steps completed", func(st *v1alpha1.RolloutStatus) bool {
		return st.CurrentStepState == v1alpha1.StepCompleted
	})
	s.assertBatch(done.pods, 3, canary)
	for _, wr := range []statusAt{step2, step3, done} {
		assertKstatus(t, wr.ro)
	}
	if !s.k.canary {
		// The pods of the batches stay: the new pods at the end are theirs.
		// (The canary style's end is the Deployment's own pods.)
		want := map[string]int{"1": 1, "2": int(targets[1] - 1), "3": int(targets[2] - targets[1])}
		if got := s.census("").batches(webV2, workload.RolloutID("web", canary)); !equality.Semantic.DeepEqual(got, want) {
			t.Errorf("new pods by batch-id at the end: %v, want %v", got, want)
		}
	}
}

// assertBatch checks the pods when step ended: exactly the step's new
// pods, ready, labelled with the rollout id and the step that made them;
// the old ones as many as the step leaves, or a few more while the
// partition-style Deployment scales the old ReplicaSet down behind the new
// one (within maxSurge).
func (s *kindStory) assertBatch(pods podCensus, step int, canary string) {
	s.t.Helper()
	targets := s.targets()
	n := targets[step-1]
	if got := pods.count(webV2); got != allReady(n) {
		s.t.Errorf("when step %d ended: new pods %v (ready, total), want %d ready", step, got, n)
	}
	old := pods.count(webV1)[1]
	lo, hi := s.oldAt(n), s.oldAt(n)+s.k.surge
	if old < lo || old > hi {
		s.t.Errorf("when step %d ended: %d old pods, want %d to %d", step, old, lo, hi)
	}
	s.t.Logf("step %d ended: %v", step, pods)
	if step == len(targets) {
		return // the last batch's pods may be labelled by HandBack, just after this write
	}
	want := map[string]int{"1": 1}
	for i := 1; i < step; i++ {
		want[fmt.Sprint(i+1)] = int(targets[i] - targets[i-1])
	}
	if got := pods.batches(webV2, workload.RolloutID("web", canary)); !equality.Semantic.DeepEqual(got, want) {
		s.t.Errorf("when step %d ended: new pods by batch-id %v, want %v", step, got, want)
	}
}

// kindRollbackStory: Git reverts the image while step 1 waits for approval.
func kindRollbackStory(s *kindStory) {
	t := s.t
	s.given()
	s.bump(webV2)
	ro := s.atGate(webV2, webV1)
	stable := ro.Status.StableRevision
	rec := s.record(recordOptions{consistent: func(st *v1alpha1.RolloutStatus, pods podCensus) string {
		if n := pods.count(webV2)[1]; n > 1 {
			return fmt.Sprintf("%d new pods during a rollback (%s)", n, releasePosition(st))
		}
		return ""
	}})

	// When the revert is applied.
	reverted := time.Now()
	s.bump(webV1)

	// Then no batch runs: the new pod goes, the workload is released.
	ro = s.healthy(webV1, v1alpha1.ReasonRolledBack)
	t.Logf("rolled back in %s", time.Since(reverted).Round(time.Millisecond))
	if ro.Status.StableRevision != stable {
		t.Errorf("stable revision %s, want %s", ro.Status.StableRevision, stable)
	}
	for _, wr := range rec.stop() {
		if wr.ro.Status.CurrentStepIndex > 1 {
			t.Errorf("a rollback ran a batch: %s", releasePosition(&wr.ro.Status))
		}
	}
}

// kindContinuousStory: a newer image arrives while step 1 waits for
// approval.
func kindContinuousStory(s *kindStory) {
	t := s.t
	s.given()
	s.bump(webV2)
	ro := s.atGate(webV2, webV1)
	stable, v2 := ro.Status.StableRevision, ro.Status.CanaryRevision
	targets := s.targets()
	rec := s.record(recordOptions{consistent: func(st *v1alpha1.RolloutStatus, pods podCensus) string {
		if n := pods.count(webV2)[1]; n > 1 {
			return fmt.Sprintf("%d pods of the abandoned v2 (%s)", n, releasePosition(st))
		}
		if st.Phase != v1alpha1.PhaseProgressing || st.CurrentStepIndex < 1 || st.CurrentStepState == v1alpha1.StepCompleted {
			return ""
		}
		if n, limit := pods.count(webV3)[1], targets[st.CurrentStepIndex-1]; n > limit || n > 0 && st.CanaryRevision == v2 {
			return fmt.Sprintf("%d v3 pods at %s", n, releasePosition(st))
		}
		return ""
	}})

	// When Flux applies v3 at the gate.
	s.bump(webV3)

	// Then the release restarts at step 1 for v3, whose one pod replaces
	// v2's.
	ro = s.atGate(webV3, webV1)
	v3 := ro.Status.CanaryRevision
	if v3 == v2 || ro.Status.StableRevision != stable {
		t.Fatalf("revisions canary %s stable %s; want a new canary and stable %s", v3, ro.Status.StableRevision, stable)
	}
	s.until(30*time.Second, "no v2 pod left, not even terminating", func() (bool, string) {
		var list corev1.PodList
		if err := s.C.List(context.Background(), &list, client.InNamespace(s.NS), client.MatchingLabels{"app": "web"}); err != nil {
			return false, err.Error()
		}
		for _, p := range list.Items {
			if p.Spec.Containers[0].Image == webV2 {
				return false, "pod " + p.Name
			}
		}
		return true, ""
	})
	if got := s.census(""); got.count(webV3) != allReady(1) || got.count(webV1) != allReady(s.oldAt(1)) {
		t.Fatalf("after the restart at step 1: %v", got)
	}
	if s.k.canary {
		// The abandoned canary Deployment goes once its pods are gone
		// (garbage collection may take a moment on a loaded machine).
		s.until(30*time.Second, "only the canary Deployment of v3 left", func() (bool, string) {
			cds := s.canaryDeployments()
			return len(cds) == 1 && cds[0].Labels[v1alpha1.LabelRevision] == v3, fmt.Sprintf("%d canary Deployments", len(cds))
		})
	}

	// And approving v3 finishes the release with v3 everywhere.
	s.ApplyYAML(s.rolloutYAML(approvalItem(v3, 1)))
	if ro = s.healthy(webV3, v1alpha1.ReasonSucceeded); ro.Status.StableRevision != v3 {
		t.Errorf("stable revision %s, want %s", ro.Status.StableRevision, v3)
	}
	restart := rec.first(rec.stop(), "the release of v3 started", func(st *v1alpha1.RolloutStatus) bool { return st.CanaryRevision == v3 })
	if st := restart.ro.Status; st.CurrentStepIndex != 1 || st.StableRevision != stable {
		t.Errorf("the release of v3 started at %s, want step 1 from stable %s", releasePosition(&st), stable)
	}
}

// releaseRecorder follows a release from outside the controller. A watch
// sees every status write of the Rollout; for each that moves the release
// (revision, step, state, phase, gate) it lists the pods exactly as they
// were at that write. A sampler checks, every 100 ms, the availability
// floor, the most pods that may run at once, and the recordOptions.
type releaseRecorder struct {
	s    *kindStory
	opts recordOptions
	// floor is the fewest ready pods allowed; maxPods the most pods of
	// every revision (0: no bound).
	floor, maxPods int32

	mu       sync.Mutex
	writes   []statusAt
	problems []string
	minReady int32
	samples  int

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// recordOptions are a story's own checks.
type recordOptions struct {
	// consistent checks a sample taken while the Rollout did not change:
	// the pods against the status then in force.
	consistent func(st *v1alpha1.RolloutStatus, pods podCensus) string
	// sample checks every sample.
	sample func(pods podCensus) string
	// move checks each move of the release against the one before.
	move func(prev, next *v1alpha1.RolloutStatus) string
}

// statusAt is one status write of the Rollout and the pods at that
// instant.
type statusAt struct {
	ro   *v1alpha1.Rollout
	pods podCensus
}

// record starts a recorder; stop ends it.
func (s *kindStory) record(opts recordOptions) *releaseRecorder {
	s.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &releaseRecorder{s: s, opts: opts, floor: s.floor(), maxPods: s.k.maxPods, cancel: cancel, minReady: s.k.replicas}
	wc, err := client.NewWithWatch(s.cluster.RESTConfig, client.Options{Scheme: rig.NewScheme(s.t)})
	if err != nil {
		s.t.Fatal(err)
	}
	ro := s.Rollout(s.NS, "web")
	r.writes = append(r.writes, statusAt{ro: ro, pods: s.census(ro.ResourceVersion)})
	r.wg.Add(2)
	go r.watch(ctx, wc, ro.ResourceVersion)
	go r.sample(ctx)
	return r
}

func (r *releaseRecorder) fail(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.problems) < 20 {
		r.problems = append(r.problems, time.Now().Format("15:04:05.000 ")+fmt.Sprintf(format, args...))
	}
}

// watch records the status writes that move the release, from
// resourceVersion rv on.
func (r *releaseRecorder) watch(ctx context.Context, wc client.WithWatch, rv string) {
	defer r.wg.Done()
	for ctx.Err() == nil {
		wi, err := wc.Watch(ctx, &v1alpha1.RolloutList{}, client.InNamespace(r.s.NS),
			client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", "web")},
			&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}})
		if err != nil {
			if ctx.Err() == nil {
				r.fail("watch the Rollout: %v", err)
			}
			return
		}
		for ev := range wi.ResultChan() {
			if ev.Type == watch.Error {
				if ctx.Err() == nil {
					r.fail("watch the Rollout: %v", ev.Object)
				}
				wi.Stop()
				return
			}
			ro, ok := ev.Object.(*v1alpha1.Rollout)
			if !ok || (ev.Type != watch.Modified && ev.Type != watch.Added) {
				continue
			}
			rv = ro.ResourceVersion
			r.mu.Lock()
			prev := r.writes[len(r.writes)-1].ro.Status
			r.mu.Unlock()
			if releasePosition(&prev) == releasePosition(&ro.Status) {
				continue
			}
			pods, err := listPodCensus(r.s.C, r.s.NS, rv)
			if err != nil {
				r.fail("%v", err)
			}
			if r.opts.move != nil {
				if msg := r.opts.move(&prev, &ro.Status); msg != "" {
					r.fail("%s", msg)
				}
			}
			r.mu.Lock()
			r.writes = append(r.writes, statusAt{ro: ro, pods: pods})
			r.mu.Unlock()
		}
		wi.Stop()
	}
}

// releasePosition is where a release is: phase, revisions, step, state,
// gate.
func releasePosition(st *v1alpha1.RolloutStatus) string {
	gate := ""
	if a := st.AwaitingApproval; a != nil {
		gate = fmt.Sprintf(" awaiting %s/%d", a.Revision, a.Step)
	}
	return fmt.Sprintf("%s %s->%s step %d %s%s", st.Phase, st.StableRevision, st.CanaryRevision, st.CurrentStepIndex, st.CurrentStepState, gate)
}

// sample checks the pods every 100 ms.
func (r *releaseRecorder) sample(ctx context.Context) {
	defer r.wg.Done()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	key := client.ObjectKey{Namespace: r.s.NS, Name: "web"}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var before, after v1alpha1.Rollout
		if err := r.s.C.Get(ctx, key, &before); err != nil {
			continue
		}
		pods, err := listPodCensus(r.s.C, r.s.NS, "")
		if err != nil || r.s.C.Get(ctx, key, &after) != nil {
			continue
		}
		r.mu.Lock()
		r.samples++
		r.minReady = min(r.minReady, pods.ready())
		r.mu.Unlock()
		if n := pods.ready(); n < r.floor {
			r.fail("%d ready pods, below the floor of %d (%s): %v", n, r.floor, releasePosition(&after.Status), pods)
		}
		if r.maxPods > 0 && int32(len(pods)) > r.maxPods {
			r.fail("%d pods, more than the %d that may run at once: %v", len(pods), r.maxPods, pods)
		}
		if r.opts.sample != nil {
			if msg := r.opts.sample(pods); msg != "" {
				r.fail("%s: %v", msg, pods)
			}
		}
		if r.opts.consistent != nil && after.ResourceVersion == before.ResourceVersion {
			if msg := r.opts.consistent(&after.Status, pods); msg != "" {
				r.fail("%s: %v", msg, pods)
			}
		}
	}
}

// stop ends the recording, fails the test with what went wrong and
// returns the moves of the release.
func (r *releaseRecorder) stop() []statusAt {
	r.s.t.Helper()
	r.cancel()
	r.wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.s.t.Logf("recorded %d moves and %d samples; fewest ready pods %d (floor %d)", len(r.writes), r.samples, r.minReady, r.floor)
	for _, p := range r.problems {
		r.s.t.Error(p)
	}
	if len(r.problems) > 0 {
		r.s.t.Logf("events of the workload and its pods, to see who deleted what:\n%s", workloadEvents(r.s.C, r.s.NS))
	}
	return r.writes
}

// workloadEvents lists the events of ns about pods and workloads, oldest
// first: which controller created or deleted which pod, and when.
func workloadEvents(c client.Client, ns string) string {
	var list corev1.EventList
	if err := c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		return err.Error()
	}
	items := list.Items
	at := func(e corev1.Event) time.Time {
		switch {
		case !e.EventTime.IsZero():
			return e.EventTime.Time
		case !e.LastTimestamp.IsZero():
			return e.LastTimestamp.Time
		}
		return e.CreationTimestamp.Time
	}
	sort.SliceStable(items, func(i, j int) bool { return at(items[i]).Before(at(items[j])) })
	var b strings.Builder
	for _, e := range items {
		switch e.InvolvedObject.Kind {
		case "Pod", "StatefulSet", "DaemonSet", "Deployment", "ReplicaSet":
			fmt.Fprintf(&b, "  %s %s/%s %s (%s%s): %s\n", at(e).UTC().Format("15:04:05.000"), e.InvolvedObject.Kind, e.InvolvedObject.Name,
				e.Reason, e.Source.Component, e.ReportingController, e.Message)
		}
	}
	return b.String()
}

// first returns the first move whose status matches.
func (r *releaseRecorder) first(writes []statusAt, what string, match func(*v1alpha1.RolloutStatus) bool) statusAt {
	r.s.t.Helper()
	var seen []string
	for _, wr := range writes {
		if match(&wr.ro.Status) {
			return wr
		}
		seen = append(seen, releasePosition(&wr.ro.Status))
	}
	r.s.t.Fatalf("no move where %s; saw:\n%s", what, strings.Join(seen, "\n"))
	return statusAt{}
}
