package webhook_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/rollgate/rollgate/api/v1alpha1"
	"github.com/rollgate/rollgate/reconciler/webhook"
	"github.com/rollgate/rollgate/reconciler/webhook/webhooktest"
	"github.com/rollgate/rollgate/reconciler/workload"
	"github.com/rollgate/rollgate/test/rig"
)

// gitOpsManager is the field manager the tests apply manifests with, as
// Flux's kustomize-controller does (server-side apply, forced).
const gitOpsManager = "kustomize-controller"

func namespace(t *testing.T) string { return rig.NewNamespace(t, suite.c) }

// apply server-side applies a YAML manifest as the GitOps tool would.
func apply(t *testing.T, ns, manifest string) {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(manifest), &u.Object); err != nil {
		t.Fatalf("manifest: %v", err)
	}
	u.SetNamespace(ns)
	err := suite.c.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(u),
		client.FieldOwner(gitOpsManager), client.ForceOwnership)
	if err != nil {
		t.Fatalf("apply %s %s: %v", u.GetKind(), u.GetName(), err)
	}
}

// cover creates a Rollout for the workload and labels the workload the
// way the reconciler does.
func cover(t *testing.T, ns, kind, name string, mutate func(*v1alpha1.Rollout)) *v1alpha1.Rollout {
	t.Helper()
	ro := &v1alpha1.Rollout{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.RolloutSpec{
			WorkloadRef: v1alpha1.WorkloadRef{APIVersion: "apps/v1", Kind: kind, Name: name},
			Strategy: v1alpha1.RolloutStrategy{Canary: &v1alpha1.CanaryStrategy{
				Steps: []v1alpha1.CanaryStep{{Replicas: ptr.To(intstr.FromInt32(1))}},
			}},
		},
	}
	if mutate != nil {
		mutate(ro)
	}
	ctx := context.Background()
	if err := suite.c.Create(ctx, ro); err != nil {
		t.Fatal(err)
	}
	a, err := workload.For(suite.c, ro, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Cover(ctx); err != nil {
		t.Fatal(err)
	}
	// The webhook reads Rollouts from its cache: wait until it has this one.
	waitHeldable(t, ns, kind, name)
	return ro
}

// waitHeldable waits until the webhook's cache knows the Rollout: a
// dry-run template change comes back with the control annotation.
func waitHeldable(t *testing.T, ns, kind, name string) {
	t.Helper()
	obj := object(kind)
	obj.SetNamespace(ns)
	obj.SetName(name)
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		return webhooktest.Held(ctx, suite.c, obj)
	})
	if err != nil {
		t.Fatalf("the webhook never saw the Rollout of %s %s: %v", kind, name, err)
	}
}

func object(kind string) client.Object {
	switch kind {
	case "StatefulSet":
		return &appsv1.StatefulSet{}
	case "DaemonSet":
		return &appsv1.DaemonSet{}
	}
	return &appsv1.Deployment{}
}

func control(t *testing.T, obj client.Object) *workload.Control {
	t.Helper()
	ctrl, err := workload.ParseControl(obj)
	if err != nil {
		t.Fatal(err)
	}
	return ctrl
}

func get(t *testing.T, obj client.Object, ns, name string) {
	t.Helper()
	if err := suite.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, obj); err != nil {
		t.Fatal(err)
	}
}

const deploymentYAML = `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 4
  selector: {matchLabels: {app: web}}
  strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: %s, maxUnavailable: 0}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: "web:%s"}]}
`

func TestDeploymentHeldOnImageChangeAndReasserted(t *testing.T) {
	ns := namespace(t)
	apply(t, ns, fmt.Sprintf(deploymentYAML, "1", "v1"))
	cover(t, ns, "Deployment", "web", nil)
	var v1 appsv1.Deployment
	get(t, &v1, ns, "web")

	// Given a covered Deployment, when Git bumps the image, then it is held.
	apply(t, ns, fmt.Sprintf(deploymentYAML, "1", "v2"))
	var d appsv1.Deployment
	get(t, &d, ns, "web")
	if !d.Spec.Paused || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Fatalf("after the image bump: paused=%v strategy=%s, want paused and Recreate", d.Spec.Paused, d.Spec.Strategy.Type)
	}
	ctrl := control(t, &d)
	if ctrl == nil || ctrl.StableRevision != workload.Revision(&v1.Spec.Template) || ctrl.CanaryRevision != workload.Revision(&d.Spec.Template) {
		t.Fatalf("control annotation = %+v, want stable %s and canary %s", ctrl, workload.Revision(&v1.Spec.Template), workload.Revision(&d.Spec.Template))
	}

	// When Git re-applies (and changes) the declared strategy mid-release,
	// then the hold stays and the new declared values are recorded.
	apply(t, ns, fmt.Sprintf(deploymentYAML, "2", "v2"))
	get(t, &d, ns, "web")
	if !d.Spec.Paused || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType || d.Spec.Strategy.RollingUpdate != nil {
		t.Fatalf("after the re-apply: paused=%v strategy=%+v, want the hold re-asserted", d.Spec.Paused, d.Spec.Strategy)
	}
	ctrl = control(t, &d)
	if s := ctrl.Declared.DeploymentStrategy; s == nil || s.RollingUpdate.MaxSurge.IntValue() != 2 || *ctrl.Declared.Paused {
		t.Fatalf("declared = %+v, want RollingUpdate with maxSurge 2, not paused", ctrl.Declared)
	}

	// When Git reverts the image, then the release is marked for rollback.
	apply(t, ns, fmt.Sprintf(deploymentYAML, "2", "v1"))
	get(t, &d, ns, "web")
	if ctrl = control(t, &d); ctrl == nil || !ctrl.Rollback || !d.Spec.Paused {
		t.Fatalf("after the revert: control=%+v paused=%v, want a held rollback", ctrl, d.Spec.Paused)
	}
}

const statefulSetYAML = `
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  replicas: 3
  serviceName: db
  selector: {matchLabels: {app: db}}
  updateStrategy: {type: RollingUpdate, rollingUpdate: {partition: 0}}
  template:
    metadata: {labels: {app: db}}
    spec: {containers: [{name: db, image: "db:%s"}]}
`

func TestStatefulSetHeldAndPartitionReasserted(t *testing.T) {
	ns := namespace(t)
	apply(t, ns, fmt.Sprintf(statefulSetYAML, "v1"))
	ro := cover(t, ns, "StatefulSet", "db", nil)
	apply(t, ns, fmt.Sprintf(statefulSetYAML, "v2"))
	var s appsv1.StatefulSet
	get(t, &s, ns, "db")
	if p := partition(&s); p != workload.HoldPartition {
		t.Fatalf("after the image bump: partition = %d, want %d", p, workload.HoldPartition)
	}

	// The adapter moves the partition for batch 1 (rollgate's own update).
	a, err := workload.For(suite.c, ro, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.EnsureBatch(context.Background(), workload.Batch{CanaryReplicas: 1, RolloutID: "db-x", BatchID: 1}); err != nil {
		t.Fatal(err)
	}
	get(t, &s, ns, "db")
	if p := partition(&s); p != 2 {
		t.Fatalf("after EnsureBatch(1): partition = %d, want 2", p)
	}

	// Git re-applies partition 0: the held partition stays.
	apply(t, ns, fmt.Sprintf(statefulSetYAML, "v2"))
	get(t, &s, ns, "db")
	if p := partition(&s); p != 2 {
		t.Fatalf("after the re-apply: partition = %d, want the held 2", p)
	}
	if d := control(t, &s).Declared.StatefulSetStrategy; d == nil || *d.RollingUpdate.Partition != 0 {
		t.Fatalf("declared strategy = %+v, want partition 0", d)
	}
}

func partition(s *appsv1.StatefulSet) int32 {
	if ru := s.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
		return *ru.Partition
	}
	return -1
}

const daemonSetYAML = `
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  selector: {matchLabels: {app: agent}}
  updateStrategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: %d}}
  template:
    metadata: {labels: {app: agent}}
    spec: {containers: [{name: agent, image: "agent:%s"}]}
`

func TestDaemonSetHeldOnImageChange(t *testing.T) {
	ns := namespace(t)
	apply(t, ns, fmt.Sprintf(daemonSetYAML, 1, "v1"))
	cover(t, ns, "DaemonSet", "agent", nil)
	apply(t, ns, fmt.Sprintf(daemonSetYAML, 1, "v2"))
	var ds appsv1.DaemonSet
	get(t, &ds, ns, "agent")
	if ds.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType {
		t.Fatalf("after the image bump: strategy = %s, want OnDelete", ds.Spec.UpdateStrategy.Type)
	}
	apply(t, ns, fmt.Sprintf(daemonSetYAML, 2, "v2"))
	get(t, &ds, ns, "agent")
	d := control(t, &ds).Declared.DaemonSetStrategy
	if ds.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType || d == nil || d.RollingUpdate.MaxUnavailable.IntValue() != 2 {
		t.Fatalf("after the re-apply: strategy=%s declared=%+v, want OnDelete and declared maxUnavailable 2", ds.Spec.UpdateStrategy.Type, d)
	}
}

func TestUpdatesThatPass(t *testing.T) {
	ns := namespace(t)
	// A labelled Deployment whose Rollout is disabled is not held.
	apply(t, ns, fmt.Sprintf(deploymentYAML, "1", "v1"))
	ro := cover(t, ns, "Deployment", "web", nil)
	ro.Spec.Disabled = true
	if err := suite.c.Update(context.Background(), ro); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		var d appsv1.Deployment
		get(t, &d, ns, "web")
		d.Spec.Template.Spec.Containers[0].Image = "web:v2"
		if err := suite.c.Update(ctx, &d, client.DryRunAll); err != nil {
			return false, err
		}
		return !d.Spec.Paused && control(t, &d) == nil, nil
	})
	if err != nil {
		t.Fatalf("a Deployment of a disabled Rollout is still held: %v", err)
	}

	// Rollgate's own update passes as sent, even a template change.
	var d appsv1.Deployment
	get(t, &d, ns, "web")
	ro.Spec.Disabled = false
	if err := suite.c.Update(context.Background(), ro); err != nil {
		t.Fatal(err)
	}
	waitHeldable(t, ns, "Deployment", "web")
	get(t, &d, ns, "web")
	d.Spec.Template.Spec.Containers[0].Image = "web:v3"
	if err := suite.c.Update(context.Background(), &d, client.FieldOwner(workload.FieldOwner)); err != nil {
		t.Fatal(err)
	}
	if d.Spec.Paused || control(t, &d) != nil {
		t.Fatalf("rollgate's update was rewritten: paused=%v", d.Spec.Paused)
	}

	// A scale (replicas only) passes: no release.
	get(t, &d, ns, "web")
	d.Spec.Replicas = ptr.To[int32](6)
	if err := suite.c.Update(context.Background(), &d); err != nil {
		t.Fatal(err)
	}
	if d.Spec.Paused || control(t, &d) != nil || *d.Spec.Replicas != 6 {
		t.Fatalf("a scale was held: paused=%v replicas=%d", d.Spec.Paused, *d.Spec.Replicas)
	}
}

func TestCertificatesAndRegistration(t *testing.T) {
	ctx := context.Background()
	var secret corev1.Secret
	get(t, &secret, webhooktest.Namespace, suite.server.Name+"-certs")
	for _, k := range []string{"tls.crt", "tls.key", "ca.crt", "ca.key"} {
		if len(secret.Data[k]) == 0 {
			t.Fatalf("certificate Secret has no %s", k)
		}
	}
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := suite.c.Get(ctx, client.ObjectKey{Name: suite.server.Name}, &mwc); err != nil {
		t.Fatal(err)
	}
	if len(mwc.Webhooks) != 1 {
		t.Fatalf("webhooks = %d, want 1", len(mwc.Webhooks))
	}
	w := mwc.Webhooks[0]
	if got, want := ptr.Deref(w.ClientConfig.URL, ""), suite.server.URL+webhook.WorkloadPath; got != want {
		t.Errorf("webhook URL = %s, want %s", got, want)
	}
	if !bytes.Equal(w.ClientConfig.CABundle, secret.Data["ca.crt"]) {
		t.Errorf("CA bundle is not the Secret's CA")
	}
	if *w.FailurePolicy != admissionregistrationv1.Fail || w.ObjectSelector.MatchExpressions[0].Key != v1alpha1.LabelControlled {
		t.Errorf("failurePolicy=%s objectSelector=%v", *w.FailurePolicy, w.ObjectSelector)
	}
	if want := webhook.WorkloadHook(nil).MatchConditions; len(want) == 0 || !equality.Semantic.DeepEqual(w.MatchConditions, want) {
		t.Errorf("matchConditions = %v, want %v", w.MatchConditions, want)
	}

	// A registration that is current is not written again.
	if err := suite.server.Keeper.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := suite.c.Get(ctx, client.ObjectKey{Name: suite.server.Name}, &mwc); err != nil {
		t.Fatal(err)
	}
	written := mwc.ResourceVersion
	if err := suite.server.Keeper.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := suite.c.Get(ctx, client.ObjectKey{Name: suite.server.Name}, &mwc); err != nil {
		t.Fatal(err)
	}
	if mwc.ResourceVersion != written {
		t.Errorf("a current registration was written again (resourceVersion %s, then %s)", written, mwc.ResourceVersion)
	}

	// A drifted registration (someone cleared the bundle) is repaired by a
	// sync, the periodic check's (a conflict: the watch got there first).
	mwc.Webhooks[0].ClientConfig.CABundle = nil
	if err := suite.c.Update(ctx, &mwc); err != nil {
		t.Fatal(err)
	}
	if err := suite.server.Keeper.Sync(ctx); err != nil && !apierrors.IsConflict(err) {
		t.Fatal(err)
	}
	if err := suite.c.Get(ctx, client.ObjectKey{Name: suite.server.Name}, &mwc); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mwc.Webhooks[0].ClientConfig.CABundle, secret.Data["ca.crt"]) {
		t.Errorf("the cleared CA bundle was not put back")
	}
}

// rotationAge is the age at which certificates are due for renewal: two
// thirds of a year, and a day.
const rotationAge = 244 * 24 * time.Hour

// TestRotationKeepsTheWebhookWorking runs a second webhook server whose
// certificates start two thirds of a year old (API servers check them
// against real time, so the clock starts in the past and moves to now): a
// new CA joins the bundle, then the served certificate moves to it, and
// the API server trusts the webhook throughout.
func TestRotationKeepsTheWebhookWorking(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	server, err := webhooktest.Run(ctx, suite.env.Config, suite.env.Scheme, "rollgate-rotation", webhooktest.NewClock(-rotationAge))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		<-server.Stopped // or it would re-create the configuration deleted below
		mwc := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: server.Name}}
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: webhooktest.Namespace, Name: server.Name + "-certs"}}
		for _, obj := range []client.Object{mwc, secret} {
			if err := suite.c.Delete(context.Background(), obj); err != nil {
				t.Errorf("delete the rotation test's %T: %v", obj, err)
			}
		}
	})
	ns := namespace(t)
	apply(t, ns, fmt.Sprintf(deploymentYAML, "1", "v1"))
	cover(t, ns, "Deployment", "web", nil)
	secretName := server.Name + "-certs"
	var before corev1.Secret
	get(t, &before, webhooktest.Namespace, secretName)
	handshake(t, server, before.Data["tls.crt"])

	server.Clock.Advance(rotationAge)
	if err := server.Keeper.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	var mid corev1.Secret
	get(t, &mid, webhooktest.Namespace, secretName)
	if bytes.Equal(mid.Data["ca.crt"], before.Data["ca.crt"]) || !bytes.Equal(mid.Data["tls.crt"], before.Data["tls.crt"]) {
		t.Fatal("at two thirds of its life: want a new CA and the same serving certificate")
	}
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := suite.c.Get(ctx, client.ObjectKey{Name: server.Name}, &mwc); err != nil {
		t.Fatal(err)
	}
	if b := mwc.Webhooks[0].ClientConfig.CABundle; !bytes.Contains(b, before.Data["ca.crt"]) || !bytes.Contains(b, mid.Data["ca.crt"]) {
		t.Fatal("the CA bundle does not hold the old and the new CA")
	}
	handshake(t, server, before.Data["tls.crt"])
	waitHeldable(t, ns, "Deployment", "web")

	server.Clock.Advance(6 * time.Minute)
	if err := server.Keeper.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	var after corev1.Secret
	get(t, &after, webhooktest.Namespace, secretName)
	if bytes.Equal(after.Data["tls.crt"], before.Data["tls.crt"]) {
		t.Fatal("after the grace period the serving certificate was not renewed")
	}
	handshake(t, server, after.Data["tls.crt"])
	waitHeldable(t, ns, "Deployment", "web")
}

// handshake opens a new TLS connection to the webhook server trusting only
// the registered CA bundle (as an API server does) and checks that the
// server presents want.
func handshake(t *testing.T, server *webhooktest.Server, want []byte) {
	t.Helper()
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := suite.c.Get(context.Background(), client.ObjectKey{Name: server.Name}, &mwc); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(mwc.Webhooks[0].ClientConfig.CABundle) {
		t.Fatal("no certificate in the CA bundle")
	}
	conn, err := tls.Dial("tcp", strings.TrimPrefix(server.URL, "https://"), &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatalf("TLS handshake with the registered CA bundle: %v", err)
	}
	defer conn.Close()
	block, _ := pem.Decode(want)
	if got := conn.ConnectionState().PeerCertificates[0].Raw; !bytes.Equal(got, block.Bytes) {
		t.Fatal("the webhook server does not present the Secret's serving certificate")
	}
}
