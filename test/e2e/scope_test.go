package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/test/rig"
)

// TestNamespacedControllerLeavesOtherNamespacesAlone: a controller
// started with --watch-all-namespaces=false (every story's here) releases
// the Rollouts of its own namespace only. A Rollout in another namespace
// gets no finalizer and no status, its workload is neither taken over nor
// held by the webhook, and a new image there rolls out at once as it
// would without rollgate; the controller's webhook configurations send it
// its own namespace's requests only. Its own Rollout, meanwhile, stops at
// step 1 as usual.
func TestNamespacedControllerLeavesOtherNamespacesAlone(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	other := w.NS + "-other"
	rig.EnsureNamespace(t, w.C, other)
	t.Cleanup(func() {
		if err := w.C.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other}}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete namespace %s: %v", other, err)
		}
	})
	applyIn := func(ns, docs string) { rig.ApplyYAML(t, w.C, rig.InNamespace(docs, ns), fluxManager) }

	for _, ns := range []string{w.NS, other} {
		applyIn(ns, echoApp("echo:v1"))
		applyIn(ns, plainRollout("echoserver"))
	}
	w.Eventually(60*time.Second, "v1 running in both namespaces, the own Rollout Ready", func(context.Context) (bool, error) {
		return w.Pods(w.NS, "echoserver")["echo:v1"] == [2]int{5, 5} && w.Pods(other, "echoserver")["echo:v1"] == [2]int{5, 5} &&
			condition(w.Rollout(w.NS, "echoserver"), v1alpha1.ReadyCondition).Status == metav1.ConditionTrue, nil
	})

	{
		name := w.ctrlOpts.WebhookConfigName
		var m admissionregistrationv1.MutatingWebhookConfiguration
		var v admissionregistrationv1.ValidatingWebhookConfiguration
		for _, o := range []client.Object{&m, &v} {
			if err := w.C.Get(context.Background(), client.ObjectKey{Name: name}, o); err != nil {
				t.Fatal(err)
			}
		}
		var sels []*metav1.LabelSelector
		for _, h := range m.Webhooks {
			sels = append(sels, h.NamespaceSelector)
		}
		for _, h := range v.Webhooks {
			sels = append(sels, h.NamespaceSelector)
		}
		for _, sel := range sels {
			s, err := metav1.LabelSelectorAsSelector(sel)
			if err != nil {
				t.Fatal(err)
			}
			if s.Matches(namespaceLabels(other)) || !s.Matches(namespaceLabels(w.NS)) {
				t.Errorf("webhook configuration %s: namespaceSelector %v does not send %s alone", name, sel, w.NS)
			}
		}
	}

	for _, ns := range []string{w.NS, other} {
		applyIn(ns, echoApp("echo:v2"))
	}
	w.Eventually(60*time.Second, "v2 everywhere in the other namespace; step 1 at home", func(context.Context) (bool, error) {
		ro := w.Rollout(w.NS, "echoserver")
		return w.Pods(other, "echoserver")["echo:v2"] == [2]int{5, 5} && w.Pods(other, "echoserver")["echo:v1"][1] == 0 &&
			ro.Status.CurrentStepIndex == 1 && ro.Status.AwaitingApproval != nil, nil
	})
	w.Holds(3*time.Second, "the other namespace untouched", func(context.Context) error {
		ro := w.Rollout(other, "echoserver")
		if len(ro.Finalizers) > 0 || ro.Status.Phase != "" || len(ro.Status.Conditions) > 0 || ro.Status.ObservedGeneration != 0 {
			return fmt.Errorf("Rollout %s/echoserver was reconciled: finalizers %v, status %+v", other, ro.Finalizers, ro.Status)
		}
		if d := w.Deployment(other, "echoserver"); d.Labels[v1alpha1.LabelControlled] != "" || d.Spec.Paused {
			return fmt.Errorf("Deployment %s/echoserver was taken over: labels %v, paused %v", other, d.Labels, d.Spec.Paused)
		}
		if n := w.Pods(w.NS, "echoserver")["echo:v2"][1]; n != 1 {
			return fmt.Errorf("own namespace: %d pods of v2 at step 1, want 1", n)
		}
		return nil
	})
}

// namespaceLabels are the labels the API server gives namespace name.
func namespaceLabels(name string) labels.Set {
	return labels.Set{corev1.LabelMetadataName: name}
}
