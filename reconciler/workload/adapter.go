package workload

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// Errors the reconciler must decide on.
var (
	// ErrNotHeld: EnsureBatch was called on a workload no release holds
	// (no rollgate.dev/control annotation).
	ErrNotHeld = errors.New("workload is not held by a release")
	// ErrUnsupported: the Rollout asks for something this workload kind
	// cannot do; the spec must change (Stalled, no retry).
	ErrUnsupported = errors.New("unsupported by the workload")
	// ErrInvalidControl: the workload's rollgate.dev/control annotation
	// was edited into something rollgate cannot read (Stalled, no retry
	// until the workload changes).
	ErrInvalidControl = errors.New("invalid control annotation")
)

// Pods counts the pods of one revision.
type Pods struct {
	// Total is the number of pods that exist and are not terminating.
	Total int32
	// Ready is the number of those that are available (Ready for the
	// workload's minReadySeconds).
	Ready int32
}

// Observation is what an Adapter sees of its workload.
type Observation struct {
	// Replicas is the number of pods the workload asks for (DaemonSet: the
	// number of nodes that should run one).
	Replicas int32
	// Revision is the revision of the workload's current pod template.
	Revision string
	// Images are the containers of that template (see Images).
	Images []string
	// StableRevision is the revision released before the release in
	// progress; without one, Revision.
	StableRevision string
	// CanaryRevision is the revision being released; empty without a
	// release.
	CanaryRevision string
	// Stable, Canary and Other count the pods of the stable revision, the
	// canary revision and any other revision (an abandoned canary).
	Stable, Canary, Other Pods
	// Held is true while a release holds the workload: the control
	// annotation is present (Control is its content), or the canary
	// style's canary Deployment is still to be removed (Control nil;
	// HandBack or Rollback removes it).
	Held    bool
	Control *Control
	// HeldWithoutRollout is true when the release holding the workload is
	// marked to stay once its Rollout is gone (LeaveHeld).
	HeldWithoutRollout bool
	// Rollback is true when the workload is held but its template is back
	// at the stable revision (a revert in Git): call Rollback.
	Rollback bool
	// Leaving counts the pods of revisions other than Revision that are
	// shutting down (terminating, possibly still answering requests).
	Leaving int32
	// MaxUnavailable is the workload's declared maxUnavailable, resolved
	// against Replicas (at least 1 where the workload kind needs it to
	// make progress).
	MaxUnavailable int32
	// Complete is true when no release holds the workload, the native
	// controller has observed the latest spec and every pod runs Revision
	// and is available.
	Complete bool
	// RevisionLabel is the pod label whose value tells the pods of one
	// revision from another's, for the Services of a release to select
	// them by; empty means rollgate.dev/revision, which the adapter puts
	// on the pods and whose value is the revision itself. A Deployment
	// released in place uses pod-template-hash instead: every pod of a
	// ReplicaSet carries it from its creation, so no pod waits for a
	// label and none is patched for one.
	RevisionLabel string
	// LabelValues maps a revision to the value of RevisionLabel on its
	// pods where the two differ (a ReplicaSet the Deployment controller
	// made has its own hash).
	LabelValues map[string]string
	// LabelPending is a revision whose value of RevisionLabel is not
	// known yet: a StatefulSet's or DaemonSet's new revision whose
	// ControllerRevision rollgate has not seen yet. A Service is not
	// narrowed to it until it is.
	LabelPending string
	// AvailableAt is when the next pod that is Ready but not yet for the
	// workload's minReadySeconds becomes available; zero when no pod
	// waits for that. Nothing announces that moment (the pod does not
	// change), so the Rollout controller sets a timer for it.
	AvailableAt time.Time
}

// LabelValue is the value of RevisionLabel on the pods of revision rev.
func (o Observation) LabelValue(rev string) string {
	if v, ok := o.LabelValues[rev]; ok {
		return v
	}
	return rev
}

// Batch is the desired state of one step of a release.
type Batch struct {
	// CanaryReplicas is the number of pods of the canary revision the
	// step wants (clamped to the workload's replicas).
	CanaryReplicas int32
	// MaxUnavailable bounds the pods unavailable at any instant while the
	// batch is realised (the Rollout's failureThreshold); nil means the
	// workload's declared maxUnavailable.
	MaxUnavailable *intstr.IntOrString
	// RolloutID labels the new pods (rollgate.dev/rollout-id), by
	// convention RolloutID(rollout name, canary revision).
	RolloutID string
	// BatchID labels the new pods (rollgate.dev/batch-id): the 1-based
	// step that created them.
	BatchID int32
}

// RolloutID is the rollout id of the release of revision by the Rollout
// named rollout: <rollout>-<revision>, keeping the last 63 characters (a
// label value).
func RolloutID(rollout, revision string) string {
	id := rollout + "-" + revision
	if len(id) > 63 {
		id = id[len(id)-63:]
	}
	return id
}

// Adapter moves one workload through a release. Every method is
// idempotent and level-triggered: call it again until it reports done.
type Adapter interface {
	// Cover labels the workload rollgate.dev/controlled so the admission
	// webhook holds its next template change, and takes over a release a
	// deleted Rollout left held (LeaveHeld).
	Cover(ctx context.Context) error
	// Uncover removes the label: template changes are no longer held.
	Uncover(ctx context.Context) error
	// Observe reads the workload, its pods and the release holding it.
	Observe(ctx context.Context) (Observation, error)
	// EnsureBatch brings exactly b.CanaryReplicas pods of the canary
	// revision up and keeps the others at the stable revision, never
	// letting more than the batch's maxUnavailable pods be unavailable,
	// and labels the new pods. done is true when the canary pods are all
	// available and the stable ones number replicas minus canary (the
	// canary style keeps every stable pod). ErrNotHeld without a release.
	// When Observation.Rollback is set, call Rollback instead.
	EnsureBatch(ctx context.Context, b Batch) (done bool, err error)
	// HandBack completes a release by handing the workload back to its own
	// controller (not a Kubernetes finalizer): the canary pods no EnsureBatch has
	// labelled get the batch id of the Rollout's current step (the last
	// batch's pods may become available before a reconcile sees them), the
	// declared settings are restored, the annotation removed and the
	// native controller finishes the rollout; done when it has (and any
	// canary Deployment is gone).
	HandBack(ctx context.Context) (done bool, err error)
	// Rollback returns every pod to the stable revision and removes the
	// canary pods, ReplicaSet or Deployment. When the workload's template
	// is the stable revision (reverted in Git) it then releases the
	// workload (declared settings restored, annotation removed);
	// otherwise the workload stays held with no canary pods, so a later
	// revert or a new revision is handled like any other update. done is
	// true when no canary pod is left (and, released, the native
	// controller is complete).
	Rollback(ctx context.Context) (done bool, err error)
	// LeaveHeld marks the release holding the workload to stay as it
	// stands once the Rollout is gone: no pod moves, and the webhook
	// keeps the workload held until a Rollout names it again (Cover) or
	// it is handed back (HandBack). done once marked; nothing to do
	// without a release.
	LeaveHeld(ctx context.Context) (done bool, err error)
}

// For returns the Adapter of the workload ro points at. c must be able to
// read and write the workload kind, ReplicaSets, ControllerRevisions and
// Pods in ro's namespace (and Deployments for the canary style). clock
// tells the time pod availability (minReadySeconds) is judged at: the
// reconciler's clock, the one the planner gets; nil is time.Now. opts
// (OwnerIndexed) change how the Adapter lists.
func For(c client.Client, ro *v1alpha1.Rollout, clock func() time.Time, opts ...Option) (Adapter, error) {
	if clock == nil {
		clock = time.Now
	}
	ref := ro.Spec.WorkloadRef
	if ref.APIVersion != "apps/v1" {
		return nil, fmt.Errorf("spec.workloadRef.apiVersion %q: %w: rollgate releases apps/v1 Deployments, StatefulSets and DaemonSets", ref.APIVersion, ErrUnsupported)
	}
	b := base{c: c, ro: ro, clock: clock}
	for _, o := range opts {
		o(&b)
	}
	switch ref.Kind {
	case "Deployment":
		return &deployment{base: b}, nil
	case "StatefulSet":
		if ro.Spec.Strategy.BlueGreen != nil {
			return nil, fmt.Errorf("spec.strategy.blueGreen: %w: a StatefulSet is released with spec.strategy.canary steps", ErrUnsupported)
		}
		return newStatefulSet(b), nil
	case "DaemonSet":
		if ro.Spec.Strategy.BlueGreen != nil {
			return nil, fmt.Errorf("spec.strategy.blueGreen: %w: a DaemonSet is released with spec.strategy.canary steps", ErrUnsupported)
		}
		return newDaemonSet(b), nil
	}
	return nil, fmt.Errorf("spec.workloadRef.kind %q: %w: use Deployment, StatefulSet or DaemonSet", ref.Kind, ErrUnsupported)
}
