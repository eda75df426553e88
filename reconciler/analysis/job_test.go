package analysis_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/analysis"
	"github.com/rollgate/rollgate/strategy/verdict"
	"github.com/rollgate/rollgate/test/envtest"
)

// smokeTemplate is an AnalysisTemplate with one Job check.
func smokeTemplate(image string) v1alpha1.AnalysisTemplate {
	spec := fmt.Sprintf(`{"template": {"spec": {"containers": [{"name": "smoke", "image": %q,
		"args": ["-url", "http://{{rollout.canaryService}}.{{rollout.namespace}}.svc/", "-want", "{{args.want}}"]}]}}}`, image)
	return v1alpha1.AnalysisTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke", Namespace: "demo"},
		Spec: v1alpha1.AnalysisTemplateSpec{
			Args: []v1alpha1.TemplateArg{{Name: "want"}},
			Metrics: []v1alpha1.Metric{{
				Name: "smoke", Count: ptr.To[int32](2), Interval: &metav1.Duration{Duration: time.Second}, SuccessCondition: "result[0] == 1",
				Provider: v1alpha1.MetricProvider{Job: &v1alpha1.JobMetric{Spec: runtime.RawExtension{Raw: []byte(spec)}}},
			}},
		},
	}
}

// TestJobCheck runs a Job check against a real API server (no Job
// controller: the test sets the Jobs' outcomes as it would): the first
// measurement creates the Job (placeholders expanded, rollgate's defaults,
// owned by the Rollout) and records nothing while it runs; a Job that
// succeeded is a Successful measurement with its log's last lines, the
// next measurement runs a new Job, and one that failed is Failed with its
// reason; a pod that cannot start fails the measurement at once and its
// Job is deleted; finished Jobs beyond the history bound are deleted.
func TestJobCheck(t *testing.T) {
	_, c := envtest.Start(t)
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo"}}); err != nil {
		t.Fatal(err)
	}
	owner := &metav1.OwnerReference{APIVersion: "rollgate.dev/v1alpha1", Kind: "Rollout", Name: "web", UID: "0b6a2b84-7f36-4d0c-9d38-3a3f4e1c2d10", Controller: ptr.To(true)}
	jobs := &analysis.JobProvider{Reader: c, Logs: func(_ context.Context, ns, pod, container string, lines, bytes int64) (string, error) {
		return fmt.Sprintf("log of %s/%s %s (last %d lines)\n0 of 20 requests failed\n", ns, pod, container, lines), nil
	}}
	runner := analysis.Runner{Provider: analysis.Providers{Job: jobs}}
	tmpl := smokeTemplate("example.invalid/smoke:1")
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	in := analysis.Input{
		Templates: []v1alpha1.AnalysisTemplate{tmpl}, Args: []v1alpha1.AnalysisArg{{Name: "want", Value: "v2"}},
		Facts: verdict.Facts{Namespace: "demo", Name: "web", CanaryRevision: "7b1e2a", StableRevision: "6d4f9c", CanaryService: "web-canary", StableService: "web"},
		Step:  1, StartedAt: now, Now: now, Owner: owner,
	}
	// run is one look at the analysis, then the reconciler's act phase
	// (the provider only reads).
	run := func() analysis.Report {
		t.Helper()
		rep, err := runner.Run(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		if err := analysis.ApplyWrites(ctx, c, rep.Writes); err != nil {
			t.Fatal(err)
		}
		in.Previous, in.Now = rep.Results, in.Now.Add(2*time.Second)
		return rep
	}
	// jobOf is the Job of measurement index of the current revision.
	jobOf := func(index int32) *batchv1.Job {
		t.Helper()
		name := analysis.Check{Namespace: "demo", Rollout: "web", Revision: in.Facts.CanaryRevision, Template: "smoke", Metric: "smoke", Step: 1, Index: index}.JobName()
		var j batchv1.Job
		if err := c.Get(ctx, client.ObjectKey{Namespace: "demo", Name: name}, &j); err != nil {
			t.Fatalf("Job of measurement %d: %v", index, err)
		}
		return &j
	}
	finish := func(j *batchv1.Job, typ batchv1.JobConditionType, reason string) {
		t.Helper()
		at := metav1.NewTime(time.Now())
		j.Status.StartTime = &at
		if typ == batchv1.JobComplete {
			j.Status.CompletionTime = &at
			j.Status.Succeeded = 1
			j.Status.Conditions = append(j.Status.Conditions, batchv1.JobCondition{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: at})
		} else {
			j.Status.Failed = 1
			j.Status.Conditions = append(j.Status.Conditions, batchv1.JobCondition{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: reason, LastTransitionTime: at})
		}
		j.Status.Conditions = append(j.Status.Conditions, batchv1.JobCondition{Type: typ, Status: corev1.ConditionTrue, Reason: reason, Message: "test", LastTransitionTime: at})
		if err := c.Status().Update(ctx, j); err != nil {
			t.Fatal(err)
		}
	}

	// The first measurement asks for the Job (the provider writes nothing
	// itself) and records nothing.
	dry, err := runner.Run(ctx, in)
	if err != nil || dry.Writes == nil || len(dry.Writes.Create) != 1 {
		t.Fatalf("first look: writes %+v, %v; want one Job to create", dry.Writes, err)
	}
	var none batchv1.JobList
	if err := c.List(ctx, &none, client.InNamespace("demo")); err != nil || len(none.Items) != 0 {
		t.Fatalf("the provider wrote %d Jobs (%v); it only reads", len(none.Items), err)
	}
	rep := run()
	if len(rep.Results) != 1 || len(rep.Results[0].Measurements) != 0 || rep.Outcome.Phase.Terminal() {
		t.Fatalf("while the Job is created: %+v", rep)
	}
	if d := rep.NextAt.Sub(in.Now.Add(-2 * time.Second)); d != analysis.PendingPoll {
		t.Errorf("next look %v after, want %v", d, analysis.PendingPoll)
	}
	j := jobOf(0)
	first := j.Name
	cont := j.Spec.Template.Spec.Containers[0]
	switch {
	case strings.Join(cont.Args, " ") != "-url http://web-canary.demo.svc/ -want v2":
		t.Errorf("args %v, want the placeholders expanded", cont.Args)
	case j.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyNever || ptr.Deref(j.Spec.BackoffLimit, -1) != 0 ||
		ptr.Deref(j.Spec.ActiveDeadlineSeconds, 0) != verdict.JobDeadlineSeconds || ptr.Deref(j.Spec.TTLSecondsAfterFinished, 0) != verdict.JobTTLSeconds:
		t.Errorf("Job spec without rollgate's defaults: %+v", j.Spec)
	case len(j.OwnerReferences) != 1 || j.OwnerReferences[0].UID != owner.UID:
		t.Errorf("owners %+v, want the Rollout", j.OwnerReferences)
	case j.Labels[analysis.LabelCheckRollout] != "web" || j.Labels[analysis.LabelCheck] != "smoke.smoke":
		t.Errorf("labels %v", j.Labels)
	}
	// Running: still nothing.
	if rep = run(); len(rep.Results[0].Measurements) != 0 {
		t.Fatalf("while the Job runs: %+v", rep.Results[0])
	}

	// Succeeded: Successful, with the log; the next measurement is a new Job.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: first + "-abcde", Labels: map[string]string{batchv1.JobNameLabel: first}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "smoke", Image: "example.invalid/smoke:1"}}}}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	finish(j, batchv1.JobComplete, "CompletionsReached")
	rep = run()
	m := rep.Results[0].Measurements
	if len(m) != 1 || m[0].Phase != "Successful" || m[0].Value != "1" || !strings.Contains(m[0].Message, "Job "+first+" succeeded") ||
		!strings.Contains(m[0].Message, "log of demo/"+pod.Name+" smoke (last 10 lines)\n0 of 20 requests failed") {
		t.Fatalf("after the Job succeeded: %+v", m)
	}
	in.Now = in.Now.Add(time.Second)
	if rep = run(); len(rep.Results[0].Measurements) != 1 {
		t.Fatalf("the second measurement's Job just created: %+v", rep.Results[0])
	}
	second := jobOf(1)
	if second.Name == first {
		t.Fatalf("the second measurement reuses Job %s", first)
	}
	finish(second, batchv1.JobFailed, "BackoffLimitExceeded")
	rep = run()
	m = rep.Results[0].Measurements
	if len(m) != 2 || m[1].Phase != "Failed" || m[1].Value != "0" || !strings.Contains(m[1].Message, "failed: BackoffLimitExceeded") {
		t.Fatalf("after the Job failed: %+v", m)
	}
	if rep.Outcome.Phase != verdict.PhaseFailed {
		t.Errorf("outcome %s, want Failed", rep.Outcome.Phase)
	}

	// A pod that cannot start: Failed at once, its Job deleted.
	in.Previous, in.Facts.CanaryRevision = nil, "9c0ffe"
	run()
	third := jobOf(0)
	stuck := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: third.Name + "-fghij", Labels: map[string]string{batchv1.JobNameLabel: third.Name}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "smoke", Image: "example.invalid/smoke:1"}}}}
	if err := c.Create(ctx, stuck); err != nil {
		t.Fatal(err)
	}
	stuck.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "smoke", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
		Reason: "ImagePullBackOff", Message: `Back-off pulling image "example.invalid/smoke:1"`}}}}
	if err := c.Status().Update(ctx, stuck); err != nil {
		t.Fatal(err)
	}
	rep = run()
	m = rep.Results[0].Measurements
	if len(m) != 1 || m[0].Phase != "Failed" || !strings.Contains(m[0].Message, "cannot start: pod "+stuck.Name+", container smoke: ImagePullBackOff") {
		t.Fatalf("with a pod that cannot start: %+v", m)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(third), &batchv1.Job{}); err == nil {
		var j batchv1.Job
		_ = c.Get(ctx, client.ObjectKeyFromObject(third), &j)
		if j.DeletionTimestamp == nil {
			t.Errorf("Job %s whose pod cannot start is kept", third.Name)
		}
	} else if !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}

	// History: finished Jobs beyond JobHistory go.
	for i := 0; i < analysis.JobHistory+2; i++ {
		in.Previous, in.Facts.CanaryRevision = nil, fmt.Sprintf("rev%d", i)
		run()
		finish(jobOf(0), batchv1.JobComplete, "CompletionsReached")
		run()
	}
	var list batchv1.JobList
	if err := c.List(ctx, &list, client.InNamespace("demo"), client.MatchingLabels{analysis.LabelCheckRollout: "web"}); err != nil {
		t.Fatal(err)
	}
	live := 0
	for _, j := range list.Items {
		if j.DeletionTimestamp == nil {
			live++
		}
	}
	if live != analysis.JobHistory {
		t.Errorf("%d Jobs kept, want %d (JobHistory)", live, analysis.JobHistory)
	}

	// A Job check without a Job provider is an error measurement, not a pass.
	bare := analysis.Runner{Provider: analysis.Providers{}}
	in.Previous, in.Facts.CanaryRevision = nil, "none"
	rep, err = bare.Run(ctx, in)
	if err != nil || len(rep.Results[0].Measurements) != 1 || rep.Results[0].Measurements[0].Phase != "Error" ||
		!strings.Contains(rep.Results[0].Measurements[0].Message, analysis.ErrNoProvider.Error()) {
		t.Errorf("without a Job provider: %+v, %v", rep.Results, err)
	}
}

// TestJobNamesOfARetriedRelease: a retried release's Job check runs Jobs
// of its own (the first attempt's finished Jobs are kept for an hour and
// must not answer for the retry); the first attempt's names stay as they
// were, so an upgrade finds the Jobs under way.
func TestJobNamesOfARetriedRelease(t *testing.T) {
	c := analysis.Check{Namespace: "demo", Rollout: "web", Revision: "abc", Template: "smoke", Metric: "smoke", Step: 1, Index: 0}
	first := c.JobName()
	c.Attempt = 1
	if c.JobName() != first {
		t.Errorf("attempt 1 names its Job %s, attempt unset %s: want the same", c.JobName(), first)
	}
	c.Attempt = 2
	if c.JobName() == first {
		t.Errorf("attempt 2 names its Job %s, as attempt 1 does: the retry would read the first attempt's answer", first)
	}
}
