package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// A workload scaled while a release runs (by a HorizontalPodAutoscaler or
// `kubectl scale`, both through the scale subresource): given a Deployment
// of 4 pods whose Rollout asks for 25% of the pods at a manual gate, then
// 50%, then all; when it is scaled to 8 at the gate, then the batch follows
// the live count (2 new pods of 8); when scaled back to 4, then it shrinks
// to 1 new pod and never grows back past the step; when scaled to 6 and
// approved, step 2 runs 3 new pods of 6 and the release ends with 6 pods,
// every step in order.

// scaledSteps are the steps of the story: percentages, so each follows the
// live replica count.
const scaledSteps = `
      - replicas: "25%"
        pause: {}
      - replicas: "50%"
        pause: {duration: 1}
      - replicas: "100%"`

func TestWorkloadScaledMidRelease(t *testing.T) {
	for _, k := range []workloadKind{partitionKind, canaryKind, statefulSetKind} {
		k.replicas = 4
		t.Run(k.name, func(t *testing.T) { scaledStory(newKindStory(t, k)) })
	}
}

// stepShare is the share of the pods each step of scaledSteps asks for.
var stepShare = []float64{0.25, 0.5, 1}

// newAt is the number of new pods step asks for at replicas: the step's
// share rounded up.
func newAt(step int32, replicas int32) int32 {
	n := int32(stepShare[step-1]*float64(replicas) + 0.999)
	return min(max(n, 1), replicas)
}

func scaledStory(s *kindStory) {
	t := s.t
	s.steps = scaledSteps
	s.given()
	sampler := s.sampleScaled()
	defer sampler.stop()

	// When Flux applies v2, step 1 runs 1 new pod of 4 at the gate.
	s.bump(webV2)
	ro := s.atGate(webV2, webV1)
	canary := ro.Status.CanaryRevision

	// When an autoscaler scales the workload to 8: 2 new pods of 8, still at the gate.
	for _, replicas := range []int32{8, 4, 6} {
		s.scaleTo(replicas)
		s.atScaledGate(replicas)
	}

	// When the approval is merged: step 2 runs half of the 6 pods, then all.
	s.k.replicas = 6
	s.ApplyYAML(s.rolloutYAML(approvalItem(canary, 1)))
	ro = s.healthy(webV2, v1alpha1.ReasonSucceeded)
	if got := s.replicas(); got != 6 {
		t.Errorf("the release ended with %d replicas, want the 6 the autoscaler set", got)
	}

	// And no sample ran more new pods than the step allows at the live
	// count (once the count had settled), and no step was skipped.
	samples, over, steps := sampler.stop()
	t.Logf("%d samples, %d above the step's share, steps seen %v; within %s of a scale event: %v", samples, len(over), steps, settle, sampler.transient)
	for _, o := range over {
		t.Errorf("more new pods than the step allows: %s", o)
	}
	if fmt.Sprint(steps) != "[1 2 3]" {
		t.Errorf("steps seen in order %v, want [1 2 3]", steps)
	}
}

// scaleTo sets the workload's replicas through the scale subresource, as
// an autoscaler does.
func (s *kindStory) scaleTo(replicas int32) {
	s.t.Helper()
	sc := &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: replicas}}
	if err := s.C.SubResource("scale").Update(context.Background(), s.workload(), client.WithSubResourceBody(sc)); err != nil {
		s.t.Fatalf("scale to %d: %v", replicas, err)
	}
	s.t.Logf("scaled to %d", replicas)
}

// replicas reads the workload's spec.replicas.
func (s *kindStory) replicas() int32 {
	n, err := s.liveReplicas()
	if err != nil {
		s.t.Fatal(err)
	}
	return n
}

// liveReplicas reads the workload's spec.replicas (safe to call from any
// goroutine).
func (s *kindStory) liveReplicas() (int32, error) {
	var obj client.Object = &appsv1.Deployment{}
	if s.k.kind == "StatefulSet" {
		obj = &appsv1.StatefulSet{}
	}
	if err := s.C.Get(context.Background(), client.ObjectKey{Namespace: s.ns, Name: "web"}, obj); err != nil {
		return 0, err
	}
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return ptr.Deref(o.Spec.Replicas, 1), nil
	case *appsv1.StatefulSet:
		return ptr.Deref(o.Spec.Replicas, 1), nil
	}
	return 0, fmt.Errorf("%s has no replicas", s.k.kind)
}

// atScaledGate waits until step 1 still waits for approval with the step's
// share of the live count: new pods ready, old pods as many as the style
// keeps, nothing else.
func (s *kindStory) atScaledGate(replicas int32) {
	s.t.Helper()
	n := newAt(1, replicas)
	old := replicas - n
	if s.k.canary {
		old = replicas // the canary Deployment runs beside every stable pod
	}
	s.until(90*time.Second, fmt.Sprintf("step 1 at %d replicas: %d new pods, %d old", replicas, n, old), func() (bool, string) {
		ro, pods := s.Rollout(s.ns, "web"), s.census("")
		return ro.Status.CurrentStepIndex == 1 && ro.Status.AwaitingApproval != nil &&
				pods.count(webV2) == allReady(n) && pods.count(webV1) == allReady(old) && len(pods) == int(n+old),
			fmt.Sprintf("%s, pods %v", releasePosition(&ro.Status), pods)
	})
}

// scaledSampler samples the workload every 100 ms: the Rollout's step, the
// live replicas and the new pods.
type scaledSampler struct {
	stopOnce sync.Once
	done     chan struct{}
	wg       sync.WaitGroup

	mu      sync.Mutex
	samples int
	over    []string
	steps   []int32
	// transient are the samples above the step's share within settle of
	// a scale event (logged, not failed).
	transient []string
}

// settle is how long after a change of the replica count the pods may
// still lag behind it (the ReplicaSet controller deleting a pod).
const settle = 5 * time.Second

func (s *kindStory) sampleScaled() *scaledSampler {
	sm := &scaledSampler{done: make(chan struct{})}
	sm.wg.Add(1)
	go func() {
		defer sm.wg.Done()
		var last int32
		var changed time.Time
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-sm.done:
				return
			case <-tick.C:
			}
			var ro v1alpha1.Rollout
			if err := s.C.Get(context.Background(), client.ObjectKey{Namespace: s.ns, Name: "web"}, &ro); err != nil {
				continue
			}
			replicas, err := s.liveReplicas()
			if err != nil {
				continue
			}
			pods, err := listPodCensus(s.C, s.ns, "")
			if err != nil {
				continue
			}
			if replicas != last {
				last, changed = replicas, time.Now()
			}
			st := ro.Status
			sm.mu.Lock()
			sm.samples++
			if st.Phase == v1alpha1.PhaseProgressing && st.CurrentStepIndex >= 1 {
				if k := len(sm.steps); k == 0 || sm.steps[k-1] != st.CurrentStepIndex {
					sm.steps = append(sm.steps, st.CurrentStepIndex)
				}
				limit := newAt(st.CurrentStepIndex, replicas)
				if n := pods.count(webV2)[1]; n > limit && st.CurrentStepState != v1alpha1.StepCompleted {
					msg := fmt.Sprintf("%d new of %d replicas at %s (limit %d)", n, replicas, releasePosition(&st), limit)
					if time.Since(changed) > settle {
						sm.over = append(sm.over, msg)
					} else {
						sm.transient = append(sm.transient, msg)
					}
				}
			}
			sm.mu.Unlock()
		}
	}()
	return sm
}

// stop ends the sampling (once) and returns what it saw.
func (sm *scaledSampler) stop() (samples int, over []string, steps []int32) {
	sm.stopOnce.Do(func() { close(sm.done) })
	sm.wg.Wait()
	sm.mu.Lock()
	defer sm.mu.Unlock()
	return sm.samples, sm.over, sm.steps
}
