package rollout

import (
	"context"
	"encoding/json"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/analysis"
	"github.com/rollgate/rollgate/strategy"
	"github.com/rollgate/rollgate/strategy/verdict"
)

// Defaults of a hook that sets none (the CRD defaults them too).
const (
	defaultHookInterval = 10 * time.Second
	defaultHookRetries  = 2
)

// hookPayload is the JSON document a hook receives.
type hookPayload struct {
	Namespace      string             `json:"namespace"`
	Name           string             `json:"name"`
	Hook           string             `json:"hook"`
	Point          v1alpha1.HookPoint `json:"point"`
	Step           int32              `json:"step,omitempty"`
	Steps          int32              `json:"steps"`
	Revision       string             `json:"revision"`
	StableRevision string             `json:"stableRevision"`
	Attempt        int32              `json:"attempt"`
	Phase          string             `json:"phase"`
	Message        string             `json:"message"`
}

// actHooks calls the hooks the plan asks for and records their answers in
// status.hooks: a step's hooks one at a time and in order (the next once
// the one before said yes), onRollback hooks all at once; a hook is called
// again no sooner than its interval after its last call. A hook that is
// not a confirm hook and said no more than its retries is Failed: the
// planner fails the release at its next plan. Entries of other releases,
// and of steps the release has left, are dropped (status.hooks stays
// within the hooks of one point and the onRollback hooks). A hook is
// called at least once per answer recorded: a crash between the call and
// the status write calls it again.
func (r *Reconciler) actHooks(ctx context.Context, sc *scope) {
	call := sc.plan.Hooks
	if call == nil {
		return
	}
	ro := sc.ro
	kept := ro.Status.Hooks[:0:0]
	for _, h := range ro.Status.Hooks {
		if h.Revision == call.Revision && h.Attempt == call.Attempt &&
			(h.Point == v1alpha1.HookRollback || (h.Step == call.Step && call.Point != v1alpha1.HookRollback)) {
			kept = append(kept, h)
		}
	}
	ordered := call.Point != v1alpha1.HookRollback
	for _, h := range strategy.Hooks(&ro.Spec, call.Point, call.Step) {
		st := strategy.FindHookStatus(kept, *call, h.Name)
		if st == nil {
			kept = append(kept, v1alpha1.HookStatus{Name: h.Name, Point: call.Point, Step: call.Step, Revision: call.Revision,
				Attempt: call.Attempt, Phase: strategy.HookPhases.Running})
			st = &kept[len(kept)-1]
		}
		if st.Phase == strategy.HookPhases.Successful || st.Phase == strategy.HookPhases.Failed {
			if ordered && st.Phase == strategy.HookPhases.Failed {
				break
			}
			continue
		}
		interval := defaultHookInterval
		if h.Interval != nil && h.Interval.Duration > 0 {
			interval = h.Interval.Duration
		}
		if st.LastCall != nil && sc.now.Before(st.LastCall.Add(interval)) {
			// The plan looks again every second (strategy's hookPoll).
			if ordered {
				break
			}
			continue
		}
		answer := r.callHook(ctx, sc, &h, *call)
		at := metav1.NewTime(sc.now)
		st.Calls++
		st.LastCall, st.Message = &at, answer.Message
		retries := int32(defaultHookRetries)
		if h.Retries != nil {
			retries = *h.Retries
		}
		switch {
		case answer.Yes:
			st.Phase = strategy.HookPhases.Successful
		case !h.Confirm && st.Calls > retries:
			st.Phase = strategy.HookPhases.Failed
		}
		if ordered && st.Phase != strategy.HookPhases.Successful {
			break
		}
	}
	ro.Status.Hooks = kept
}

// callHook makes one call of hook h at call.
func (r *Reconciler) callHook(ctx context.Context, sc *scope, h *v1alpha1.Hook, call strategy.HookCall) analysis.HookAnswer {
	ro := sc.ro
	url, err := verdict.Expand(h.URL, nil, facts(ro))
	if err != nil {
		return analysis.HookAnswer{Message: "url: " + err.Error()}
	}
	cond, err := verdict.CompileHookCondition(h.SuccessCondition)
	if err != nil {
		return analysis.HookAnswer{Message: "successCondition: " + err.Error()}
	}
	var secret analysis.SecretData
	if h.SecretRef != nil {
		var s corev1.Secret
		if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: ro.Namespace, Name: h.SecretRef.Name}, &s); err != nil {
			return analysis.HookAnswer{Message: "secretRef: " + err.Error()}
		}
		secret = s.Data
	}
	payload, _ := json.Marshal(hookPayload{
		Namespace: ro.Namespace, Name: ro.Name, Hook: h.Name, Point: call.Point, Step: call.Step, Steps: ro.Status.StepCount,
		Revision: call.Revision, StableRevision: ro.Status.StableRevision, Attempt: call.Attempt,
		Phase: string(ro.Status.Phase), Message: ro.Status.Message,
	})
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return analysis.CallHook(cctx, h, url, secret, payload, cond)
}
