package traffic

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
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
	if e.grace <= 0 {
		if canary != nil && d.sendsToCanary() {
			e.opts.Reached.set(canary.UID, shortHash(d))
		}
		return true, nil
	}
	err = e.settleOnce(ctx, canary, progress{Stage: stageRoutes, Desired: shortHash(d)}, reason)
	return err == nil, err
}

// canaryServes holds routes that send requests to the canary Service
// until its EndpointSlices list a ready endpoint (Options.Endpoints). Once
// the routes carry d, it looks no more: a canary pod replaced later does
// not hold the step. With a grace period that is read from the record on
// the canary Service; without one, from Options.Reached, in memory (after
// a restart the first reconcile of the step looks at the cached slices
// again, which costs no request).
func (e *entry) canaryServes(ctx context.Context, canary *corev1.Service, d Desired) error {
	if e.opts.Endpoints == nil || canary == nil || !d.sendsToCanary() {
		return nil
	}
	if last := e.read(canary); last.Stage == stageRoutes && last.Desired == shortHash(d) {
		return nil
	}
	if e.opts.Reached.has(canary.UID, shortHash(d)) {
		return nil
	}
	return e.svc.endpointsReady(ctx, e.opts.Endpoints, canary)
}

// Reached remembers, without a grace period, which desired state the routes
// of each canary Service carry (by the Service's UID), so that the wait for
// a ready canary endpoint is judged once per step. Writing it on the canary
// Service, as a grace period's record is, cost one request per step and
// Rollout (P5: 3 of 49.4 per Rollout). It holds one entry per canary
// Service (removed when Restore deletes it) and at most ReachedLimit: past
// that it starts again empty, and each step looks at the cached slices once
// more. A nil *Reached remembers nothing. Safe for concurrent use.
type Reached struct {
	mu sync.Mutex
	at map[types.UID]string
}

// ReachedLimit bounds the entries of a Reached.
const ReachedLimit = 100_000

func (r *Reached) has(uid types.UID, desired string) bool {
	if r == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.at[uid] == desired
}

func (r *Reached) set(uid types.UID, desired string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at == nil || len(r.at) >= ReachedLimit {
		r.at = map[types.UID]string{}
	}
	r.at[uid] = desired
}

func (r *Reached) forget(uid types.UID) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.at, uid)
}

// Len is the number of canary Services remembered.
func (r *Reached) Len() int {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.at)
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
	done, err = e.svc.deleteCanary(ctx)
	if done && canary != nil {
		e.opts.Reached.forget(canary.UID)
	}
	return done, err
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
