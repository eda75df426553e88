package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/workload"
)

// Exit codes of wait, besides the common ones.
const (
	exitReleaseFailed = 4 // the release failed, was aborted or rolled back
	exitTimeout       = 5 // --timeout passed first
)

// releaseFailed and timedOut mark wait's own outcomes.
type releaseFailed struct{ err error }

func (e releaseFailed) Error() string { return e.err.Error() }

type timedOut struct{ err error }

func (e timedOut) Error() string { return e.err.Error() }

func newWaitCommand() *cobra.Command {
	f := &clusterFlags{}
	var image string
	var timeout, interval time.Duration
	cmd := &cobra.Command{
		Use:   "wait <name>",
		Short: "Wait until the workload's current revision is released (for pipelines)",
		Long: `Wait until the revision the workload declares now (its pod template in the
cluster) is released by the Rollout: every step done, the workload given back,
phase Healthy. With --image, first wait until the workload's template uses
that image (your GitOps tool has applied the change), then for its release.

It prints a line each time the release moves (step, state, what it waits
for), so a pipeline log tells the story. Gates are not approved for you.

Exit codes: 0 released; 4 the release failed, was aborted or rolled back (the
message says why); 5 --timeout passed first; 3 the Rollout or its workload
does not exist; 1 another error; 2 bad usage.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout <= 0 || interval <= 0 {
				return usageError{errors.New("--timeout and --interval must be positive")}
			}
			c, ns, err := f.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			return waitReleased(ctx, cmd.OutOrStdout(), c, ns, args[0], image, interval, timeout)
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().StringVar(&image, "image", "", "Wait until a container of the workload's template uses this image, then for its release")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Minute, "Give up after this long (exit 5)")
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "How often to look")
	return cmd
}

// waitReleased polls until the target revision is released, the release
// ends otherwise, or ctx ends. The target is the revision the workload
// declares when first seen (with the image, when one is given).
func waitReleased(ctx context.Context, w io.Writer, c client.Client, ns, ref, image string, interval, timeout time.Duration) error {
	last, target := "", ""
	for {
		done, line, err := releaseOutcome(ctx, c, ns, ref, image, &target)
		if line != "" && line != last {
			fmt.Fprintln(w, line)
			last = line
		}
		if err != nil && deadlineHit(ctx, err) && !errors.As(err, new(releaseFailed)) {
			// The deadline passed during a read: that is the timeout,
			// not an API error.
			return timedOut{fmt.Errorf("not released within %s: %s", timeout, orWaiting(last))}
		}
		if err != nil || done {
			return err
		}
		select {
		case <-ctx.Done():
			return timedOut{fmt.Errorf("not released within %s: %s", timeout, last)}
		case <-time.After(interval):
		}
	}
}

// deadlineHit reports whether err comes from the --timeout deadline: it
// passed during a read, or the client's rate limiter would wait past it.
func deadlineHit(ctx context.Context, err error) bool {
	return ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "would exceed context deadline")
}

func orWaiting(last string) string {
	if last == "" {
		return "no answer from the API server yet"
	}
	return last
}

// releaseOutcome looks once: done is true when *target is released; err is
// a releaseFailed when its release ended otherwise.
func releaseOutcome(ctx context.Context, c client.Client, ns, ref, image string, target *string) (done bool, line string, err error) {
	ro, err := getRollout(ctx, c, ns, ref)
	if err != nil {
		return false, "", err
	}
	wl := ro.Spec.WorkloadRef
	obj, err := workloadObject(wl.Kind)
	if err != nil {
		return false, "", err
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ro.Namespace, Name: wl.Name}, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return false, "", notFoundError{fmt.Errorf("%s %s/%s named by Rollout %s does not exist", wl.Kind, ro.Namespace, wl.Name, ro.Name)}
		}
		return false, "", err
	}
	tpl, err := workload.PodTemplate(obj)
	if err != nil {
		return false, "", err
	}
	rev := workload.Revision(tpl)
	if *target == "" {
		if image != "" && !slices.ContainsFunc(tpl.Spec.Containers, func(ct corev1.Container) bool { return ct.Image == image }) {
			return false, fmt.Sprintf("waiting for %s %s to use image %s", wl.Kind, wl.Name, image), nil
		}
		*target = rev
	}
	s := ro.Status
	where := fmt.Sprintf("%s: revision %s, phase %s, step %d/%d %s", ro.Name, *target, dash(string(s.Phase)), s.CurrentStepIndex, s.StepCount, dash(string(s.CurrentStepState)))
	if w := waitingForCluster(ro); w != "" && w != "-" {
		where += ", waiting for " + w
	}
	if rev != *target {
		return false, where, releaseFailed{fmt.Errorf("%s %s no longer declares revision %s (now %s): reverted or replaced before its release ended; %s",
			wl.Kind, wl.Name, *target, rev, s.Message)}
	}
	stalled := meta.FindStatusCondition(s.Conditions, v1alpha1.StalledCondition)
	switch {
	case s.ObservedGeneration != ro.Generation:
		return false, where, nil
	case s.CanaryRevision == *target && (s.Phase == v1alpha1.PhaseFailed || (stalled != nil && stalled.Status == metav1.ConditionTrue)):
		return false, where, releaseFailed{fmt.Errorf("the release of revision %s failed: %s", *target, s.Message)}
	case s.StableRevision == *target && s.CanaryRevision == *target && s.Phase == v1alpha1.PhaseHealthy:
		return true, fmt.Sprintf("%s: revision %s is released", ro.Name, *target), nil
	}
	return false, where, nil
}

// workloadObject returns an empty object of a workload kind.
func workloadObject(kind string) (client.Object, error) {
	switch kind {
	case "Deployment":
		return &appsv1.Deployment{}, nil
	case "StatefulSet":
		return &appsv1.StatefulSet{}, nil
	case "DaemonSet":
		return &appsv1.DaemonSet{}, nil
	}
	return nil, fmt.Errorf("spec.workloadRef.kind %q: not a workload rollgate releases", kind)
}
