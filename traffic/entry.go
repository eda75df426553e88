package traffic

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// annotationProgress on the canary Service records the last traffic change
// of a release and when it was confirmed, so the grace period survives a
// controller restart without a status field.
const annotationProgress = "rollgate.dev/traffic-progress"

// Stages of a release recorded in annotationProgress.
const (
	stageServices        = "services"
	stageRoutes          = "routes"
	stageRestoreServices = "restore-services"
	stageRestoreRoutes   = "restore-routes"
)

// progress is the value of annotationProgress.
type progress struct {
	Stage   string    `json:"stage"`
	Desired string    `json:"desired,omitempty"`
	At      time.Time `json:"at"`
}

// entry is the Router of one trafficRoutings entry: Services first, then
// the routes, with the grace period after each change.
//
// EnsureRoutes: (1) canary Service and stable selector; if the canary
// Service was created or changed, wait the grace period (narrowing the
// stable Service again after a GitOps sync is no new change: no wait, so
// the routes the same sync took back return at once); (2) the routes; once
// they are done, wait the grace period once per desired state.
//
// Restore: (1) the stable Service's declared selector (it then selects the
// pods of every revision, so the next step cannot leave it without pods);
// wait; (2) the routes; wait; (3) delete the canary Service.
type entry struct {
	svc    *services
	routes Router
	grace  time.Duration
	sticky string
	opts   Options
}

func (e *entry) EnsureRoutes(ctx context.Context, d Desired) (bool, error) {
	d.StableService = e.svc.stable
	d.CanaryService = e.svc.canaryName()
	d.StickyCookie = e.sticky
	if d.CanaryWeight < 0 || d.CanaryWeight > 100 {
		return false, fmt.Errorf("%w: canary weight %d is not within 0-100", ErrInvalid, d.CanaryWeight)
	}
	if err := d.checkMirror(); err != nil {
		return false, err
	}
	changed, canary, err := e.svc.ensure(ctx, d)
	if err != nil {
		return false, err
	}
	if changed {
		err = e.changed(ctx, canary, progress{Stage: stageServices}, "Services updated")
	} else {
		err = e.waiting(canary, stageServices, "")
	}
	if err != nil {
		return false, err
	}
	if err := e.canaryServes(ctx, canary, d); err != nil {
		return false, err
	}
	done, err := e.routes.EnsureRoutes(ctx, d)
	if err != nil || !done {
		return false, err
	}
	reason := fmt.Sprintf("routes send %d%% to the canary", d.CanaryWeight)
	if len(d.Matches) > 0 {
		reason = fmt.Sprintf("routes send %d matches to the canary", len(d.Matches))
	} else if d.MirrorPercent > 0 {
		reason = fmt.Sprintf("routes copy %d%% of requests to the canary", d.MirrorPercent)
	}
	reached := progress{Stage: stageRoutes, Desired: shortHash(d)}
	if e.grace <= 0 {
		return true, e.reached(ctx, canary, d, reached)
	}
	err = e.settleOnce(ctx, canary, reached, reason)
	return err == nil, err
}

// reached records, without a grace period, that the routes carry d, once
// per d, where canaryServes reads it: otherwise each reconcile of the step
// would list the canary's EndpointSlices again.
func (e *entry) reached(ctx context.Context, canary *corev1.Service, d Desired, p progress) error {
	if e.opts.Endpoints == nil || canary == nil || !d.sendsToCanary() {
		return nil
	}
	if last := e.read(canary); last.Stage == p.Stage && last.Desired == p.Desired {
		return nil
	}
	p.At = e.opts.now()
	return e.record(ctx, canary, p)
}

// canaryServes holds routes that send requests to the canary Service
// until its EndpointSlices list a ready endpoint (Options.Endpoints). Once
// the routes carry d (recorded on the canary Service), it looks no more.
func (e *entry) canaryServes(ctx context.Context, canary *corev1.Service, d Desired) error {
	if e.opts.Endpoints == nil || canary == nil || !d.sendsToCanary() {
		return nil
	}
	if last := e.read(canary); last.Stage == stageRoutes && last.Desired == shortHash(d) {
		return nil
	}
	return e.svc.endpointsReady(ctx, e.opts.Endpoints, canary)
}

func (e *entry) Restore(ctx context.Context) (bool, error) {
	canary, err := e.canary(ctx)
	if err != nil {
		return false, err
	}
	changed, err := e.svc.restoreStable(ctx)
	if err != nil {
		return false, err
	}
	if changed {
		err = e.changed(ctx, canary, progress{Stage: stageRestoreServices}, "stable Service selector restored")
	} else {
		err = e.waiting(canary, stageRestoreServices, "")
	}
	if err != nil {
		return false, err
	}
	done, err := e.routes.Restore(ctx)
	if err != nil || !done {
		return false, err
	}
	if err := e.settleOnce(ctx, canary, progress{Stage: stageRestoreRoutes}, "routes restored"); err != nil {
		return false, err
	}
	return e.svc.deleteCanary(ctx)
}

// changed records a change on the canary Service and returns the wait for
// the grace period. With no grace period, or no canary Service to record it
// on, it returns nil: nothing to wait for.
func (e *entry) changed(ctx context.Context, canary *corev1.Service, p progress, reason string) error {
	if e.grace <= 0 || canary == nil {
		return nil
	}
	p.At = e.opts.now()
	if err := e.record(ctx, canary, p); err != nil {
		return err
	}
	return &WaitError{After: e.grace, Reason: reason}
}

// settleOnce returns nil once the grace period has passed since p was first
// reached; the first call records it and returns the wait.
func (e *entry) settleOnce(ctx context.Context, canary *corev1.Service, p progress, reason string) error {
	if e.grace <= 0 || canary == nil {
		return nil
	}
	if last := e.read(canary); last.Stage != p.Stage || last.Desired != p.Desired {
		return e.changed(ctx, canary, p, reason)
	}
	return e.waiting(canary, p.Stage, p.Desired)
}

// waiting returns a *WaitError while the recorded stage is still within its
// grace period.
func (e *entry) waiting(canary *corev1.Service, stage, desired string) error {
	if e.grace <= 0 || canary == nil {
		return nil
	}
	last := e.read(canary)
	if last.Stage != stage || last.Desired != desired {
		return nil
	}
	if left := last.At.Add(e.grace).Sub(e.opts.now()); left > 0 {
		return &WaitError{After: left, Reason: "grace period after " + stage}
	}
	return nil
}

func (e *entry) read(canary *corev1.Service) progress {
	var p progress
	if raw, ok := canary.Annotations[annotationProgress]; ok {
		_ = json.Unmarshal([]byte(raw), &p) // unreadable: no wait, the safe side of "settled"
	}
	return p
}

// record writes p on the canary Service with a merge patch.
func (e *entry) record(ctx context.Context, canary *corev1.Service, p progress) error {
	raw, err := json.Marshal(p)
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{annotationProgress: string(raw)}},
	})
	if err != nil {
		return err
	}
	if err := e.svc.c.Patch(ctx, canary, client.RawPatch(types.MergePatchType, patch), e.opts.fieldOwner()); err != nil {
		return fmt.Errorf("record traffic progress on Service %s/%s: %w", canary.Namespace, canary.Name, err)
	}
	return nil
}

// canary returns the canary Service if it exists and is ours, else nil.
func (e *entry) canary(ctx context.Context) (*corev1.Service, error) {
	svc := &corev1.Service{}
	if err := e.svc.c.Get(ctx, e.svc.key(e.svc.canaryName()), svc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("get Service %s: %w", e.svc.key(e.svc.canaryName()), err)
	}
	if !ownedBy(svc, e.svc.ro) {
		return nil, nil
	}
	return svc, nil
}
