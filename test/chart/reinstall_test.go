package chart

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
)

// TestUninstallAndInstallMidRelease: the release of a Deployment waits at a
// manual gate when rollgate is uninstalled with helm and installed again
// (docs/install.md#uninstall). Uninstalled, nothing of the chart is left
// that would refuse the next install or any write (no webhook
// configuration), the Deployment stays held and the Rollout keeps its
// place. Installed again, the new controller resumes the release where it
// stands: the gate stays closed, no pod moves, and two approvals complete
// it.
func TestUninstallAndInstallMidRelease(t *testing.T) {
	t.Parallel()
	s := newUpgradeStory(t)

	// Given the chart installed and a release waiting at step 1's gate.
	s.prevVersion = chartVersion(t)
	s.helm("install", release, chartDir(), "-n", releaseNS, "--create-namespace", "--set", "replicaCount=1", "--wait", "--timeout=2m")
	s.startController("")
	s.givenAtGate()
	before := s.snapshot()
	still := s.watchStill(before)

	// When rollgate is uninstalled (its pod goes with the release).
	if err := s.ctrl.Stop(); err != nil {
		t.Fatalf("stop the controller: %v", err)
	}
	s.ctrl = nil
	s.helm("uninstall", release, "-n", releaseNS, "--wait", "--timeout=2m")

	// Then no webhook configuration is left to refuse writes or the next
	// install, and the release stays where it was: the Deployment held,
	// the Rollout at its gate.
	for _, obj := range []client.Object{&admissionregistrationv1.MutatingWebhookConfiguration{}, &admissionregistrationv1.ValidatingWebhookConfiguration{}} {
		err := s.c.Get(context.Background(), client.ObjectKey{Name: controller}, obj)
		if !apierrors.IsNotFound(err) {
			t.Errorf("%T %s after helm uninstall: %v (want it gone)", obj, controller, err)
		}
	}
	d := s.deployment()
	if !d.Spec.Paused || d.Labels[v1alpha1.LabelControlled] == "" || d.Annotations[v1alpha1.AnnotationControl] != before.control {
		t.Fatalf("after helm uninstall the Deployment is no longer held: paused %t, label %q, control %q (before: %q)",
			d.Spec.Paused, d.Labels[v1alpha1.LabelControlled], d.Annotations[v1alpha1.AnnotationControl], before.control)
	}
	if p := positionOf(s.rollout()); p != before.position {
		t.Fatalf("the Rollout moved across helm uninstall:\n before %s\n after  %s", before.position, p)
	}

	// When the chart is installed again, with the same release name.
	s.helm("install", release, chartDir(), "-n", releaseNS, "--set", "replicaCount=1", "--wait", "--timeout=2m")
	s.startController("")
	s.assertChartFlags(s.ctrl)
	s.until(60*time.Second, "the webhooks registered at the new controller's URL", func() (bool, string) {
		url, ca := s.webhookRegistration()
		return strings.HasPrefix(url, s.ctrl.WebhookURL()+"/") && len(ca) > 0, fmt.Sprintf("url %s, CA bundle %d bytes", url, len(ca))
	})
	s.until(60*time.Second, "the new controller to reconcile the Rollout", func() (bool, string) {
		n, _ := s.reconciles()
		return n > 0, fmt.Sprintf("%d reconciles", n)
	})
	leading := time.Now()

	// Then it holds the release where it stood, and two approvals
	// complete it.
	s.resumedThenReleased(before, still, leading)
	s.assertNoForbidden(s.ctrl)
	s.uninstall()
}
