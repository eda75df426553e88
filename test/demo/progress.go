package demo

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// printer writes the demo's story, each line stamped with the time since
// the start.
type printer struct {
	out   io.Writer
	start time.Time
}

// step prints one timestamped line.
func (p *printer) step(format string, args ...any) {
	fmt.Fprintf(p.out, "[%6.1fs] %s\n", time.Since(p.start).Seconds(), fmt.Sprintf(format, args...))
}

// section prints a heading.
func (p *printer) section(title string) {
	fmt.Fprintf(p.out, "\n== %s ==\n", title)
}

// block prints text indented under the last line.
func (p *printer) block(text string) {
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		fmt.Fprintf(p.out, "          %s\n", line)
	}
}

// progressFormat lays out the live view: one line per change.
const progressFormat = "%-5s %-19s %-9s %-9s %-10s %s"

func progressHeader() string {
	return fmt.Sprintf(progressFormat, "STEP", "STATE", "OLD PODS", "NEW PODS", "TRAFFIC", "WAITING FOR")
}

// observation is what the demo sees of the release at one instant.
type observation struct {
	ro         *v1alpha1.Rollout // nil until Flux applied it
	deployment *appsv1.Deployment
	// pods counts ready and total pods by image.
	pods map[string][2]int
	// stable and canary are the HTTPRoute's traffic shares in percent.
	stable, canary int32
	// fluxRevision is the revision Flux last applied.
	fluxRevision string
}

// observe reads the Rollout, the pods, the HTTPRoute and the Kustomization.
func (w *world) observe(ctx context.Context) (*observation, error) {
	o := &observation{ro: &v1alpha1.Rollout{}, deployment: &appsv1.Deployment{}}
	key := client.ObjectKey{Namespace: Namespace, Name: App}
	if err := w.c.Get(ctx, key, o.ro); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, err
		}
		o.ro = nil
	}
	if err := w.c.Get(ctx, key, o.deployment); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, err
		}
		o.deployment = nil
	}
	var err error
	if o.pods, err = w.podsByImage(ctx); err != nil {
		return nil, err
	}
	if o.stable, o.canary, err = w.routeSplit(ctx); err != nil {
		return nil, err
	}
	if o.fluxRevision, _, err = w.fluxApplied(ctx); err != nil {
		return nil, err
	}
	return o, nil
}

// podsByImage counts the application's pods by image: ready and total.
func (w *world) podsByImage(ctx context.Context) (map[string][2]int, error) {
	var list corev1.PodList
	if err := w.c.List(ctx, &list, client.InNamespace(Namespace), client.MatchingLabels{"app": App}); err != nil {
		return nil, err
	}
	out := map[string][2]int{}
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil || len(p.Spec.Containers) == 0 {
			continue
		}
		n := out[p.Spec.Containers[0].Image]
		n[1]++
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				n[0]++
			}
		}
		out[p.Spec.Containers[0].Image] = n
	}
	return out, nil
}

// routeSplit returns the HTTPRoute's shares of traffic, in percent, for
// the stable Service and rollgate's canary Service.
func (w *world) routeSplit(ctx context.Context) (stable, canary int32, err error) {
	var route gatewayv1.HTTPRoute
	if err := w.c.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: App}, &route); err != nil {
		return 0, 0, client.IgnoreNotFound(err)
	}
	if len(route.Spec.Rules) == 0 {
		return 0, 0, nil
	}
	weights := map[string]int32{}
	var total int32
	for _, ref := range route.Spec.Rules[0].BackendRefs {
		wt := int32(1) // the Gateway API default
		if ref.Weight != nil {
			wt = *ref.Weight
		}
		weights[string(ref.Name)] += wt
		total += wt
	}
	if total == 0 {
		return 0, 0, nil
	}
	return weights[App] * 100 / total, weights[App+"-canary"] * 100 / total, nil
}

// line renders the observation as one line of the live view.
func (o *observation) line() string {
	step, state := "-", "-"
	if o.ro != nil && o.ro.Status.StepCount > 0 && o.ro.Status.CurrentStepIndex > 0 {
		step = fmt.Sprintf("%d/%d", o.ro.Status.CurrentStepIndex, o.ro.Status.StepCount)
	}
	if o.ro != nil && o.ro.Status.CurrentStepState != "" {
		state = string(o.ro.Status.CurrentStepState)
	}
	if o.ro != nil && o.ro.Status.Phase == v1alpha1.PhaseHealthy {
		state = string(v1alpha1.PhaseHealthy)
	}
	old, cur := o.pods[OldImage], o.pods[NewImage]
	return fmt.Sprintf(progressFormat, step, state,
		fmt.Sprintf("%d/%d", old[0], old[1]), fmt.Sprintf("%d/%d", cur[0], cur[1]),
		fmt.Sprintf("%d/%d", o.stable, o.canary), o.waitingFor())
}

// waitingFor says in a few words what the release waits for.
func (o *observation) waitingFor() string {
	if o.ro == nil {
		return "Flux to apply the Rollout"
	}
	s := o.ro.Status
	switch {
	case s.Phase == "" || s.Phase == v1alpha1.PhaseInitial:
		return "rollgate to take the Deployment over"
	case s.CurrentStepState == v1alpha1.StepPaused && o.canary != s.CanaryWeight:
		// Flux re-applied the HTTPRoute as Git declares it (one backend)
		// in the middle of a step; the controller puts the split back.
		return fmt.Sprintf("rollgate to restore %d/%d: Flux re-applied the HTTPRoute from Git", 100-s.CanaryWeight, s.CanaryWeight)
	case s.AwaitingApproval != nil && s.AwaitingApproval.Branch != "":
		return "approval: merge " + s.AwaitingApproval.Branch
	case s.AwaitingApproval != nil:
		return "approval: the approval branch to be pushed"
	case conditions.IsStalled(o.ro):
		return "a fix: " + conditions.GetMessage(o.ro, v1alpha1.StalledCondition)
	case s.Phase == v1alpha1.PhaseHealthy && s.StableRevision == s.CanaryRevision:
		return "nothing: released"
	}
	switch s.CurrentStepState {
	case v1alpha1.StepUpgrade:
		return "new pods to become ready"
	case v1alpha1.StepTrafficRouting:
		return "the HTTPRoute to carry " + o.stepTraffic()
	case v1alpha1.StepMetricsAnalysis:
		return "the analysis"
	case v1alpha1.StepReady:
		return "the next step"
	}
	// Timed pauses and the end of the release: the controller's own words.
	msg := s.Message
	if i := strings.Index(msg, ": "); i >= 0 && strings.HasPrefix(msg, "step ") {
		msg = msg[i+2:]
	}
	return msg
}

// stepTraffic returns the traffic the current step sends to the new
// revision, as the Rollout declares it.
func (o *observation) stepTraffic() string {
	c, i := o.ro.Spec.Strategy.Canary, int(o.ro.Status.CurrentStepIndex)
	if c == nil || i < 1 || i > len(c.Steps) || c.Steps[i-1].Traffic == nil {
		return "the step's traffic"
	}
	return *c.Steps[i-1].Traffic + " to the new pods"
}

// watchUntil prints the live view, a line whenever the release changes and
// one when Flux applies a new revision, until done holds.
func (w *world) watchUntil(ctx context.Context, timeout time.Duration, what string, done func(ctx context.Context, o *observation) (bool, error)) (*observation, error) {
	err := w.waitFor(ctx, timeout, what, func(ctx context.Context) (bool, error) {
		o, err := w.observe(ctx)
		if err != nil {
			return false, err
		}
		last := w.last
		if last != nil && o.fluxRevision != last.fluxRevision && o.fluxRevision != "" {
			w.p.step("Flux applied %s", shortRevision(o.fluxRevision))
		}
		if w.lastLine == "" || o.line() != w.lastLine {
			w.lastLine = o.line()
			w.p.step("%s", w.lastLine)
		}
		w.last = o
		return done(ctx, o)
	})
	return w.last, err
}

// header starts a live view: the column names, then every line anew.
func (w *world) header() {
	w.p.block(progressHeader())
	w.lastLine = ""
}

// shortRevision shortens Flux's "main@sha1:<hash>".
func shortRevision(rev string) string {
	branch, hash, ok := strings.Cut(rev, "@sha1:")
	if !ok {
		return rev
	}
	return branch + "@" + short(hash)
}
