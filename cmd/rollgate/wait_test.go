package main

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler"
	"github.com/rollgate/rollgate/reconciler/workload"
	"github.com/rollgate/rollgate/test/envtest"
)

// TestWaitForARelease: `rollgate wait` exits 0 once the revision the
// workload declares is released, 4 when its release failed or the workload
// was reverted, 5 on timeout, 3 for a missing Rollout; with --image it
// waits for the image to reach the workload first.
func TestWaitForARelease(t *testing.T) {
	scheme, err := reconciler.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	cfg, c := envtest.Start(t, envtest.WithScheme(scheme))
	k := "--kubeconfig=" + writeKubeconfig(t, cfg)
	ctx := context.Background()
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "echo"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "echo"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "echo", Image: "echo:v1"}}},
			},
		},
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.Create(ctx, d))
	v1 := workload.Revision(&d.Spec.Template)
	d.Spec.Template.Spec.Containers[0].Image = "echo:v2"
	must(c.Update(ctx, d))
	v2 := workload.Revision(&d.Spec.Template)

	ro := &v1alpha1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: "default"},
		Spec: v1alpha1.RolloutSpec{
			WorkloadRef: v1alpha1.WorkloadRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "echo"},
			Strategy:    v1alpha1.RolloutStrategy{Canary: &v1alpha1.CanaryStrategy{Steps: []v1alpha1.CanaryStep{{Replicas: ptr.To(intstr.FromInt32(1)), Pause: &v1alpha1.RolloutPause{}}}}},
		},
	}
	must(c.Create(ctx, ro))
	setStatus := func(s v1alpha1.RolloutStatus) {
		t.Helper()
		must(c.Get(ctx, client.ObjectKeyFromObject(ro), ro))
		s.ObservedGeneration = ro.Generation
		ro.Status = s
		must(c.Status().Update(ctx, ro))
	}
	gate := v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseProgressing, StableRevision: v1, CanaryRevision: v2, StepCount: 1,
		CurrentStepIndex: 1, CurrentStepState: v1alpha1.StepPaused,
		AwaitingApproval: &v1alpha1.ApprovalRequest{Revision: v2, Step: 1, Since: metav1.Now()}}
	setStatus(gate)

	wait := func(args ...string) (string, int) {
		return run(t, "", append([]string{"wait", "echo", k, "--interval=100ms"}, args...)...)
	}
	// The cases that time out must read the Rollout (or the Deployment) at
	// least once before --timeout: a new client's first read took more
	// than 3 s with the machine at a load of 15 on 2 cores, so they give
	// it 8 s. The cases that end by themselves return at once.
	if out, code := wait("--timeout=8s"); code != exitTimeout || !strings.Contains(out, "not released within 8s") || !strings.Contains(out, "step 1/1 StepPaused") {
		t.Fatalf("at a gate: exit %d, want %d\n%s", code, exitTimeout, out)
	}
	if out, code := wait("--timeout=8s", "--image=echo:v3"); code != exitTimeout || !strings.Contains(out, "waiting for Deployment echo to use image echo:v3") {
		t.Fatalf("for an image not applied yet: exit %d, want %d\n%s", code, exitTimeout, out)
	}
	setStatus(v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseHealthy, StableRevision: v2, CanaryRevision: v2, StepCount: 1,
		CurrentStepIndex: 1, CurrentStepState: v1alpha1.StepCompleted})
	if out, code := wait("--timeout=60s", "--image=echo:v2"); code != exitOK || !strings.Contains(out, "revision "+v2+" is released") {
		t.Fatalf("released: exit %d, want 0\n%s", code, out)
	}

	// A failed release of the declared revision: exit 4 with the reason.
	setStatus(v1alpha1.RolloutStatus{Phase: v1alpha1.PhaseFailed, StableRevision: v1, CanaryRevision: v2, StepCount: 1,
		CurrentStepIndex: 1, CurrentStepState: v1alpha1.StepRollingBack, Message: "release of v2 failed (Aborted)"})
	if out, code := wait("--timeout=60s"); code != exitReleaseFailed || !strings.Contains(out, "failed (Aborted)") {
		t.Fatalf("failed: exit %d, want %d\n%s", code, exitReleaseFailed, out)
	}

	if out, code := run(t, "", "wait", "missing", k, "--timeout=60s"); code != exitNotFound {
		t.Fatalf("a missing Rollout: exit %d, want %d\n%s", code, exitNotFound, out)
	}
	if out, code := wait("--timeout=0s"); code != exitUsage {
		t.Fatalf("--timeout=0s: exit %d, want %d\n%s", code, exitUsage, out)
	}
}
