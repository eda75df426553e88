package rollout

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

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

// actHooks asks the hooks the plan asks for and records their answers in
// status.hooks: a step's hooks one at a time and in order (the next once
// the one before said yes), onRollback hooks all at once; a hook is asked
// again no sooner than its interval after its last answer. An ask is one
// HTTP call, or one Job for a Job hook: the Job is looked at every
// reconcile until it ends, its name in the hook's status meanwhile. A hook
// that is not a confirm hook and said no more than its retries is Failed:
// the planner fails the release at its next plan. Entries of other
// releases, and of steps the release has left, are dropped (status.hooks
// stays within the hooks of one point and the onRollback hooks). A hook is
// asked at least once per answer recorded: a crash between a call and the
// status write calls it again (a Job hook finds its Job again: its name
// follows from the ask).
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
		if !hookDue(&h, st, sc.now) {
			// The plan looks again every second (strategy's hookPoll).
			if ordered {
				break
			}
			continue
		}
		r.askHook(ctx, sc, &h, *call, st)
		if ordered && st.Phase != strategy.HookPhases.Successful {
			break
		}
	}
	ro.Status.Hooks = kept
}

// hookDue reports whether hook h may be asked now: never asked, its
// interval over since its last answer, or its Job under way (looked at
// every time).
func hookDue(h *v1alpha1.Hook, st *v1alpha1.HookStatus, now time.Time) bool {
	if st.Job != "" || st.LastCall == nil {
		return true
	}
	interval := defaultHookInterval
	if h.Interval != nil && h.Interval.Duration > 0 {
		interval = h.Interval.Duration
	}
	return !now.Before(st.LastCall.Add(interval))
}

// askHook asks hook h once (a call, or a look at its Job, started when
// none runs) and records the answer in st.
func (r *Reconciler) askHook(ctx context.Context, sc *scope, h *v1alpha1.Hook, call strategy.HookCall, st *v1alpha1.HookStatus) {
	at := metav1.NewTime(sc.now)
	if st.Job == "" {
		st.Calls++
		st.LastCall = &at
	}
	var answer analysis.HookAnswer
	if h.Job != nil {
		var running string
		if answer, running = r.lookAtJob(ctx, sc, h, call, st.Calls-1); running != "" {
			st.Job = running
			st.Message = cmp.Or(answer.Message, "Job "+running+" runs")
			return
		}
	} else {
		answer = r.callHook(ctx, sc, h, call)
	}
	st.Job, st.LastCall, st.Message = "", &at, answer.Message
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
}

// lookAtJob looks at the Job of ask index of Job hook h, creating it when
// it does not exist: the answer once the Job ended (or could not be
// created), or the Job's name while it runs. The Job is the JobProvider's,
// as a Job check's: its spec expanded, rollgate's defaults, owned by the
// Rollout, deleted at once when its pod cannot start, and finished Jobs
// kept within analysis.JobHistory.
func (r *Reconciler) lookAtJob(ctx context.Context, sc *scope, h *v1alpha1.Hook, call strategy.HookCall, index int32) (analysis.HookAnswer, string) {
	ro := sc.ro
	if r.Jobs == nil {
		return analysis.HookAnswer{Message: "this controller runs no Jobs: a Job hook cannot be asked"}, ""
	}
	f := hookFacts(ro, call)
	spec, err := verdict.JobSpec(h.Job, func(s string) (string, error) { return verdict.Expand(s, nil, f) })
	if err != nil {
		return analysis.JobAnswer(false, "job.spec: "+err.Error()), ""
	}
	check := &analysis.Check{Namespace: ro.Namespace, Rollout: ro.Name, Revision: call.Revision, Metric: h.Name, Step: call.Step,
		Index: index, Hook: call.Point, Attempt: call.Attempt}
	writes := &analysis.Writes{}
	yes, note, err := r.Jobs.Run(ctx, analysis.Query{Job: spec, Check: check, Writes: writes,
		Owner: metav1.NewControllerRef(ro, v1alpha1.GroupVersion.WithKind("Rollout"))})
	pending := errors.Is(err, analysis.ErrPending)
	if werr := analysis.ApplyWrites(ctx, r.Client, writes); werr != nil {
		if pending && len(writes.Create) > 0 {
			// A Job the API server refuses (a quota, an invalid field)
			// is a no, as a call without an answer.
			return analysis.JobAnswer(false, werr.Error()), ""
		}
		log.FromContext(ctx).Error(werr, "Job hook", "hook", h.Name)
	}
	switch {
	case pending:
		return analysis.HookAnswer{}, check.JobName()
	case err != nil:
		// The Job cannot be read now: look again.
		return analysis.JobAnswer(false, err.Error()), check.JobName()
	}
	return analysis.JobAnswer(yes, note), ""
}

// callHook makes one call of hook h at call.
func (r *Reconciler) callHook(ctx context.Context, sc *scope, h *v1alpha1.Hook, call strategy.HookCall) analysis.HookAnswer {
	ro := sc.ro
	url, err := verdict.Expand(h.URL, nil, hookFacts(ro, call))
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

// hookFacts fill a hook's placeholders: the Rollout's, with
// {{rollout.step}} the step the hook is declared on (for onRollback, the
// Rollout's current step).
func hookFacts(ro *v1alpha1.Rollout, call strategy.HookCall) verdict.Facts {
	f := facts(ro)
	if call.Step > 0 {
		f.Step = strconv.Itoa(int(call.Step))
	}
	return f
}
