package rollout

import (
	"fmt"

	"github.com/fluxcd/pkg/runtime/conditions"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/strategy"
	"github.com/rollgate/rollgate/strategy/verdict"
)

const (
	metav1True  = metav1.ConditionTrue
	metav1False = metav1.ConditionFalse
)

// applyPlan writes the plan's status fields into the Rollout and queues
// the plan's event (transitions only; queueEvent). It reports whether the
// release moved: another step, state, phase, revision or traffic.
// Conditions are left to updateStatus.
func (r *Reconciler) applyPlan(sc *scope) bool {
	ro, p := sc.ro, sc.plan
	keep := ro.Status
	moved := keep.CurrentStepIndex != p.Status.CurrentStepIndex || keep.CurrentStepState != p.Status.CurrentStepState ||
		keep.Phase != p.Status.Phase || keep.CanaryRevision != p.Status.CanaryRevision || keep.StableRevision != p.Status.StableRevision ||
		keep.Attempt != p.Status.Attempt || keep.Traffic != p.Status.Traffic
	ro.Status = p.Status
	ro.Status.Conditions = keep.Conditions
	ro.Status.Analysis = keep.Analysis
	ro.Status.Git = gitStatusFor(keep.Git, &keep, &p.Status)
	sc.queueEvent(p.Event)
	return moved
}

// queueEvent queues the event of a plan, recorded when the reconcile ends
// (recordEvents). A Progressing event that the next plan of the same
// reconcile follows with an event of its own is dropped: it told of a
// state the reconcile left at once (a step's traffic the routers
// confirmed as soon as they were asked), which nobody could see.
func (sc *scope) queueEvent(e strategy.Event) {
	if e.IsZero() {
		return
	}
	if n := len(sc.events); n > 0 && sc.events[n-1].Type == strategy.EventNormal && sc.events[n-1].Reason == v1alpha1.ReasonProgressing {
		sc.events = sc.events[:n-1]
	}
	sc.events = append(sc.events, e)
}

// recordEvents records the events the reconcile's plans queued.
func (r *Reconciler) recordEvents(sc *scope) {
	if r.Recorder == nil {
		return
	}
	for _, e := range sc.events {
		typ := corev1.EventTypeNormal
		if e.Type == strategy.EventWarning {
			typ = corev1.EventTypeWarning
		}
		r.Recorder.Event(sc.ro, typ, e.Reason, e.Message)
	}
	sc.events = nil
}

// updateStatus is the one writer of a Rollout's conditions (and of the
// status fields that come from observations: analysis results, where the
// progress is in Git). It reads only the scope, so calling it again on the
// same scope changes nothing. In order: the planner's conditions, the
// error the reconcile stopped on (which overrides the kstatus ones), then
// the domain conditions TrafficShifted, Analysis and GitSynced.
func (r *Reconciler) updateStatus(sc *scope) {
	ro := sc.ro
	if sc.plan != nil {
		for t, c := range sc.plan.Conditions.ByType() {
			if c.Status == "" {
				conditions.Delete(ro, t)
				continue
			}
			conditions.Set(ro, &metav1.Condition{Type: t, Status: c.Status, Reason: c.Reason, Message: c.Message})
		}
	}
	if f := sc.failure; f != nil {
		markFailure(ro, f)
	}
	if sc.analysis.ran {
		ro.Status.Analysis = sc.analysis.results
	}
	markAnalysis(ro, sc.analysis)
	markTraffic(sc)
	markGit(sc)
	r.markApproval(sc)
}

// markApproval sets ApprovalVerified from the verdict on the waiting
// gate's approval in Git, with an event when it changes (a rejected
// approval is a Warning naming the commit).
func (r *Reconciler) markApproval(sc *scope) {
	v := sc.approvalVerdict
	if v == nil {
		return
	}
	ro := sc.ro
	c := metav1.Condition{Type: v1alpha1.ApprovalVerifiedCondition, Status: metav1True, Reason: v1alpha1.ReasonApprovalVerified, Message: v.String()}
	typ := corev1.EventTypeNormal
	if !v.Counts() {
		c.Status, c.Reason, typ = metav1False, v1alpha1.ReasonApprovalRejected, corev1.EventTypeWarning
	}
	if old := conditions.Get(ro, c.Type); old != nil && old.Status == c.Status && old.Message == c.Message {
		return
	}
	conditions.Set(ro, &c)
	if r.Recorder != nil {
		r.Recorder.Event(ro, typ, c.Reason, c.Message)
	}
}

// markFailure reports the error a reconcile stopped on. A stall: Stalled
// and Ready=False (Reconciling dropped when final). A transient error:
// still Reconciling, and Ready=False, unless the release already failed:
// its Stalled condition (and its reason, which the planner reads back)
// stays.
func markFailure(ro *v1alpha1.Rollout, f *failure) {
	if f.stalled {
		conditions.MarkStalled(ro, f.reason, "%s", f.message)
		conditions.MarkFalse(ro, v1alpha1.ReadyCondition, f.reason, "%s", f.message)
		if f.final {
			conditions.Delete(ro, v1alpha1.ReconcilingCondition)
		}
		ro.Status.Message = f.message
		return
	}
	if conditions.IsTrue(ro, v1alpha1.StalledCondition) {
		return
	}
	conditions.MarkFalse(ro, v1alpha1.ReadyCondition, v1alpha1.ReasonProgressing, "retrying: %s", f.message)
	conditions.MarkTrue(ro, v1alpha1.ReconcilingCondition, v1alpha1.ReasonProgressing, "retrying: %s", f.message)
}

// markAnalysis sets Analysis from the step analysis' outcome, or from a
// template that cannot be used.
func markAnalysis(ro *v1alpha1.Rollout, a analysisSeen) {
	if a.invalid != nil {
		// The planner reports it (Stalled); Analysis says which template.
		conditions.MarkFalse(ro, v1alpha1.AnalysisCondition, v1alpha1.ReasonInvalidSpec, "%s", a.invalid.Error())
		return
	}
	o := a.step
	if o == nil {
		return
	}
	switch o.Phase {
	case verdict.PhaseSuccessful:
		conditions.MarkTrue(ro, v1alpha1.AnalysisCondition, string(o.Phase), "%s", o.Message)
	case verdict.PhaseFailed, verdict.PhaseError:
		conditions.MarkFalse(ro, v1alpha1.AnalysisCondition, v1alpha1.ReasonAnalysisFailed, "%s", o.Message)
	case verdict.PhaseInconclusive:
		conditions.MarkFalse(ro, v1alpha1.AnalysisCondition, v1alpha1.ReasonAnalysisInconclusive, "%s", o.Message)
	default:
		conditions.MarkUnknown(ro, v1alpha1.AnalysisCondition, string(o.Phase), "%s", o.Message)
	}
}

// markTraffic sets TrafficShifted from the routers' last answer. A plan
// that asks for other traffic than the routers were last asked for is
// written (persisted before the routers are asked) as that traffic
// pending: the routers' answer then changes the condition only if they
// confirm it at once, and a move that waits for them (a canary endpoint
// not ready yet) costs no second status write saying so.
func markTraffic(sc *scope) {
	ro, t := sc.ro, sc.traffic
	switch {
	case sc.routerErr != nil && hasRouting(ro):
		conditions.MarkFalse(ro, v1alpha1.TrafficShiftedCondition, v1alpha1.ReasonTrafficError, "%s", sc.routerErr.Error())
	case !t.sent:
	case t.err != nil:
		conditions.MarkFalse(ro, v1alpha1.TrafficShiftedCondition, v1alpha1.ReasonTrafficError, "%s", t.err.Error())
	case sc.plan != nil && !sc.plan.Traffic.Equal(t.asked):
		conditions.MarkFalse(ro, v1alpha1.TrafficShiftedCondition, v1alpha1.ReasonTrafficPending, "moving traffic: %s", trafficMessage(sc.plan.Traffic))
	case t.done:
		conditions.MarkTrue(ro, v1alpha1.TrafficShiftedCondition, v1alpha1.ReasonTrafficShifted, "%s", trafficMessage(t.asked))
	default:
		conditions.MarkFalse(ro, v1alpha1.TrafficShiftedCondition, v1alpha1.ReasonTrafficPending, "moving traffic: %s", trafficMessage(t.asked))
	}
}

func trafficMessage(t strategy.Traffic) string {
	switch t.Mode {
	case strategy.TrafficOriginal:
		return "routes as declared in Git"
	case strategy.TrafficStable:
		return "all traffic to the stable revision"
	case strategy.TrafficPromoted:
		return "all traffic to the canary revision, the stable Service narrowed to it too"
	}
	return t.String() + " of traffic to the canary revision"
}

// markGit sets GitSynced, and where the progress was last written: Git
// could not be read or written; the progress is in Git (a flush wrote it,
// or found it there); or it waits for the next flush, whose callback
// reconciles the Rollout again. Without spec.git the condition is left
// alone.
func markGit(sc *scope) {
	ro := sc.ro
	if sc.git == nil {
		if sc.gitReadErr != nil {
			setGit(ro, metav1False, v1alpha1.ReasonGitError, sc.gitReadErr.Error())
		}
		return
	}
	w := sc.git.Writer()
	written := ""
	if sc.gitState != nil {
		// The state is queued after this status is persisted: written
		// only when the Writer already wrote that very state.
		written = w.WrittenAs(*sc.gitState)
		if g := ro.Status.Git; g != nil && written != "" && written != g.StatusCommit {
			g.StatusCommit = written
			now := metav1.NewTime(sc.now)
			g.LastWriteTime = &now
		}
	}
	_, _, flushErr := w.LastFlush()
	switch {
	case sc.gitReadErr != nil:
		setGit(ro, metav1False, v1alpha1.ReasonGitError, sc.gitReadErr.Error())
	case sc.gitWriteErr != nil:
		setGit(ro, metav1False, v1alpha1.ReasonGitError, sc.gitWriteErr.Error())
	case written != "":
		setGit(ro, metav1True, v1alpha1.ReasonGitSynced, "progress written to "+sc.git.StatusBranch()+" in "+shortCommit(written))
	case sc.gitQueued && flushErr != nil:
		setGit(ro, metav1False, v1alpha1.ReasonGitError, "writing progress to "+sc.git.StatusBranch()+": "+flushErr.Error())
	case sc.gitQueued || sc.moved:
		setGit(ro, metav1False, v1alpha1.ReasonGitPending,
			fmt.Sprintf("progress queued for %s, written within %s", sc.git.StatusBranch(), sc.git.Window()))
	}
}

func setGit(ro *v1alpha1.Rollout, status metav1.ConditionStatus, reason, msg string) {
	conditions.Set(ro, &metav1.Condition{Type: v1alpha1.GitSyncedCondition, Status: status, Reason: reason, Message: msg})
}

// gitStatusFor returns the Git status to keep when the status moves from
// prev to next. The revert of a failed release belongs to that release: once
// a new release starts (a canary revision other than the previous one and the
// stable one) the record is dropped, so that the new release, should it fail,
// gets its own revert written (revertInGit writes one only while none is
// recorded). The record of the last release otherwise stays, rolled back or
// not.
func gitStatusFor(g *v1alpha1.GitStatus, prev, next *v1alpha1.RolloutStatus) *v1alpha1.GitStatus {
	newRelease := next.CanaryRevision != "" && next.CanaryRevision != prev.CanaryRevision &&
		next.CanaryRevision != next.StableRevision
	if g == nil || (g.RevertBranch == "" && g.RevertPullRequestURL == "") || !newRelease {
		return g
	}
	out := *g
	out.RevertBranch, out.RevertPullRequestURL = "", ""
	return &out
}
