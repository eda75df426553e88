package rollout

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
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/analysis"
	"github.com/rollgate/rollgate/reconciler/internal/rollouttest"
	"github.com/rollgate/rollgate/strategy"
	"github.com/rollgate/rollgate/strategy/verdict"
)

// TestJobHookAnswers runs the Job hooks of a step against a real API
// server (no Job controller: the test sets the Jobs' outcomes as it would).
// The first ask creates the Job the Job check's way (placeholders with the
// hook's step expanded, rollgate's defaults, owned by the Rollout,
// labelled as the hook's) and records it as under way; a restart that lost
// the status finds the same Job. A Job past its deadline is a no with the
// reason and the last lines of its log; the next Job starts once the
// interval is over, not before; a pod that cannot start is a no at once
// (its Job deleted), and the last no fails the hook. A Job that succeeds
// is a yes; a Job the API server refuses is a no naming the field; another
// attempt of the release runs new Jobs. Every message fits status.hooks.
func TestJobHookAnswers(t *testing.T) {
	ctx, _, c, _ := rollouttest.StartAPIServer(t)
	const ns = "jobhook"
	rollouttest.MustCreate(t, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	ro := &v1alpha1.Rollout{}
	if err := yaml.Unmarshal(fmt.Appendf(nil, `
metadata: {name: web, namespace: %s, uid: 0b6a2b84-7f36-4d0c-9d38-3a3f4e1c2d10}
spec:
  workloadRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  strategy:
    canary:
      trafficRoutings: [{service: web, ingress: {name: web}}]
      steps:
      - {traffic: "20%%", replicas: 1}
      - traffic: "50%%"
        replicas: 2
        hooks:
          before:
          - name: smoke
            retries: 1
            interval: 5s
            job:
              spec:
                template:
                  spec:
                    containers:
                    - name: smoke
                      image: smoke:1
                      args: ["http://{{rollout.canaryService}}.{{rollout.namespace}}.svc/", "step {{rollout.step}}", "{{rollout.canaryRevision}}"]
          after:
          - name: load
            retries: 0
            job: {spec: {template: {spec: {containers: [{name: load, image: "hey:1"}]}}}}
          - name: refused
            retries: 0
            job: {spec: {template: {spec: {containers: [{name: Load, image: "hey:1"}]}}}}
      - {traffic: "100%%", replicas: "100%%"}
status: {canaryRevision: 7b1e2a, stableRevision: 6d4f9c, currentStepIndex: 2}
`, ns), ro); err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{Client: c, APIReader: c, Jobs: &analysis.JobProvider{Reader: c,
		Logs: func(_ context.Context, ns, pod, container string, lines, bytes int64) (string, error) {
			return strings.Repeat("a line to push the answer out\n", 30) + fmt.Sprintf("log of %s/%s %s\n20 of 20 requests failed\n", ns, pod, container), nil
		}}}
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	before := strategy.HookCall{Point: v1alpha1.HookBefore, Step: 2, Revision: "7b1e2a", Attempt: 1}
	// ask is one reconcile's act phase for the hooks of call, at now.
	ask := func(call strategy.HookCall) *v1alpha1.HookStatus {
		t.Helper()
		sc := newScope(ro, now)
		sc.plan = &strategy.Plan{Hooks: &call}
		r.actHooks(ctx, sc)
		for _, st := range ro.Status.Hooks {
			if len(st.Message) > 512 {
				t.Fatalf("hook %s's message has %d bytes; status.hooks holds 512", st.Name, len(st.Message))
			}
		}
		return strategy.FindHookStatus(ro.Status.Hooks, call, strategy.Hooks(&ro.Spec, call.Point, call.Step)[0].Name)
	}
	jobOf := func(call strategy.HookCall, name string, index int32) *batchv1.Job {
		t.Helper()
		key := analysis.Check{Namespace: ns, Rollout: "web", Revision: call.Revision, Metric: name, Step: call.Step, Index: index,
			Hook: call.Point, Attempt: call.Attempt}.JobName()
		var j batchv1.Job
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: key}, &j); err != nil {
			t.Fatalf("Job %d of hook %s: %v", index, name, err)
		}
		return &j
	}
	podOf := func(j *batchv1.Job, waiting string) {
		t.Helper()
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: j.Name + "-abcde", Labels: map[string]string{batchv1.JobNameLabel: j.Name}},
			Spec: j.Spec.Template.Spec}
		rollouttest.MustCreate(t, c, pod)
		if waiting != "" {
			pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "smoke", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
				Reason: waiting, Message: `Container image "smoke:1" is not present with pull policy of Never`}}}}
			if err := c.Status().Update(ctx, pod); err != nil {
				t.Fatal(err)
			}
		}
	}
	finish := func(j *batchv1.Job, typ batchv1.JobConditionType, reason string) {
		t.Helper()
		at := metav1.NewTime(time.Now())
		j.Status.StartTime = &at
		if typ == batchv1.JobComplete {
			j.Status.CompletionTime, j.Status.Succeeded = &at, 1
			j.Status.Conditions = append(j.Status.Conditions, batchv1.JobCondition{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: at})
		} else {
			j.Status.Failed = 1
			j.Status.Conditions = append(j.Status.Conditions, batchv1.JobCondition{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: reason, LastTransitionTime: at})
		}
		j.Status.Conditions = append(j.Status.Conditions, batchv1.JobCondition{Type: typ, Status: corev1.ConditionTrue, Reason: reason,
			Message: "Job was active longer than specified deadline", LastTransitionTime: at})
		if err := c.Status().Update(ctx, j); err != nil {
			t.Fatal(err)
		}
	}

	// The first ask creates the Job and records it as under way.
	st := ask(before)
	first := jobOf(before, "smoke", 0)
	cont := first.Spec.Template.Spec.Containers[0]
	switch {
	case st.Phase != "Running" || st.Calls != 1 || st.Job != first.Name || st.LastCall == nil:
		t.Fatalf("after the first ask: %+v, want Running with Job %s", st, first.Name)
	case strings.Join(cont.Args, " ") != "http://web-canary.jobhook.svc/ step 2 7b1e2a":
		t.Errorf("args %q, want the placeholders expanded with the hook's step", cont.Args)
	case first.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyNever || ptr.Deref(first.Spec.BackoffLimit, -1) != 0 ||
		ptr.Deref(first.Spec.ActiveDeadlineSeconds, 0) != verdict.JobDeadlineSeconds || ptr.Deref(first.Spec.TTLSecondsAfterFinished, 0) != verdict.JobTTLSeconds:
		t.Errorf("Job spec without rollgate's defaults: %+v", first.Spec)
	case len(first.OwnerReferences) != 1 || first.OwnerReferences[0].UID != ro.UID || !ptr.Deref(first.OwnerReferences[0].Controller, false):
		t.Errorf("owners %+v, want the Rollout", first.OwnerReferences)
	case first.Labels[analysis.LabelCheckRollout] != "web" || first.Labels[analysis.LabelCheck] != "hook.before.smoke" || !strings.HasPrefix(first.Name, "web-hook-"):
		t.Errorf("Job %s labels %v, want the Rollout's and hook.before.smoke", first.Name, first.Labels)
	}
	// A restart that lost the status write finds the same Job.
	ro.Status.Hooks = nil
	now = now.Add(time.Second)
	if st = ask(before); st.Calls != 1 || st.Job != first.Name {
		t.Fatalf("after a restart: %+v, want Job %s again", st, first.Name)
	}
	// Running: looked at again, no answer, no new Job.
	now = now.Add(time.Second)
	if st = ask(before); st.Phase != "Running" || st.Calls != 1 || st.Job != first.Name || !strings.Contains(st.Message, first.Name+" runs") {
		t.Fatalf("while the Job runs: %+v", st)
	}

	// Past its deadline: a no with the reason and the log's last lines; a
	// retry is left, so the hook still runs.
	podOf(first, "")
	finish(first, batchv1.JobFailed, "DeadlineExceeded")
	now = now.Add(time.Second)
	st = ask(before)
	if st.Phase != "Running" || st.Job != "" || st.Calls != 1 || !st.LastCall.Time.Equal(now) ||
		!strings.Contains(st.Message, "Job "+first.Name+" failed: DeadlineExceeded") ||
		!strings.HasSuffix(st.Message, "log of jobhook/"+first.Name+"-abcde smoke\n20 of 20 requests failed") {
		t.Fatalf("after the Job ran past its deadline: %+v", st)
	}
	// Within the interval: no new Job.
	now = now.Add(4 * time.Second)
	if st = ask(before); st.Calls != 1 || st.Job != "" {
		t.Fatalf("4s after a no, with a 5s interval: %+v, want no new Job", st)
	}
	// The interval over: the next Job.
	now = now.Add(time.Second)
	st = ask(before)
	second := jobOf(before, "smoke", 1)
	if st.Calls != 2 || st.Job != second.Name || second.Name == first.Name {
		t.Fatalf("after the interval: %+v, want a second Job", st)
	}
	// Its pod cannot start: a no at once, the last one: Failed, the Job
	// deleted.
	podOf(second, "ErrImageNeverPull")
	now = now.Add(time.Second)
	st = ask(before)
	if st.Phase != "Failed" || st.Calls != 2 || st.Job != "" ||
		!strings.Contains(st.Message, "Job "+second.Name+" cannot start: pod "+second.Name+"-abcde, container smoke: ErrImageNeverPull") {
		t.Fatalf("with a pod that cannot start: %+v, want Failed with the reason", st)
	}
	var gone batchv1.Job
	if err := c.Get(ctx, client.ObjectKeyFromObject(second), &gone); err == nil && gone.DeletionTimestamp == nil {
		t.Errorf("Job %s whose pod cannot start is kept", second.Name)
	} else if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	// Asked again: nothing changes.
	now = now.Add(time.Minute)
	if st = ask(before); st.Phase != "Failed" || st.Calls != 2 {
		t.Fatalf("a Failed hook asked again: %+v", st)
	}

	// A Job that succeeds is a yes; the next hook is then asked, and a Job
	// the API server refuses is a no naming the field.
	after := strategy.HookCall{Point: v1alpha1.HookAfter, Step: 2, Revision: "7b1e2a", Attempt: 1}
	ask(after)
	load := jobOf(after, "load", 0)
	podOf(load, "")
	finish(load, batchv1.JobComplete, "CompletionsReached")
	now = now.Add(time.Second)
	if st = ask(after); st.Phase != "Successful" || st.Job != "" || !strings.HasPrefix(st.Message, "Job "+load.Name+" succeeded; last lines of its log:") {
		t.Fatalf("after the Job succeeded: %+v", st)
	}
	refused := strategy.FindHookStatus(ro.Status.Hooks, after, "refused")
	if refused == nil || refused.Phase != "Failed" || refused.Job != "" || !strings.Contains(refused.Message, "spec.template.spec.containers[0].name: Invalid value: \"Load\"") {
		t.Fatalf("a Job the API server refuses: %+v, want Failed naming the field", refused)
	}

	// Another attempt of the release runs its own Jobs.
	again := before
	again.Attempt = 2
	if st = ask(again); st.Calls != 1 || st.Job == "" || st.Job == first.Name {
		t.Fatalf("attempt 2: %+v, want a Job of its own", st)
	}
}
