package chart

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/rollgate/rollgate/test/kwok"
	"github.com/rollgate/rollgate/test/rig"
)

// TestInstallUpgradeUninstall installs the previous chart release on a kwok
// cluster (a real control plane), upgrades it to the current chart with
// changed values, and uninstalls it. kwok's fake kubelets run no
// containers, so this proves the manifests are accepted and become Ready;
// TestUpgradeMidRelease runs the chart's controller through an upgrade.
func TestInstallUpgradeUninstall(t *testing.T) {
	t.Parallel()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := kwok.Start(t, kwok.Options{Nodes: 2, Scheme: scheme})
	kc := "--kubeconfig=" + c.Kubeconfig
	ns := "rollgate-system"

	previous, _ := previousChart(t)
	out := helm(t, "install", "rg", previous, kc, "-n", ns, "--create-namespace", "--wait", "--timeout=2m")
	if !strings.Contains(out, "STATUS: deployed") {
		t.Fatalf("helm install:\n%s", out)
	}
	waitReplicas(t, c, ns, "rg-rollgate", 2)
	for _, crd := range []string{"rollouts.rollgate.dev", "repositories.rollgate.dev", "analysistemplates.rollgate.dev"} {
		var obj apiextensionsv1.CustomResourceDefinition
		if err := c.Client.Get(context.Background(), types.NamespacedName{Name: crd}, &obj); err != nil {
			t.Fatalf("CRD %s not installed: %v", crd, err)
		}
	}

	// The controller writes its CA bundle into the webhook configurations;
	// an upgrade (say, in the middle of a release) must keep them, or
	// covered workloads could not be updated until the controller notices.
	bundle := []byte("test CA bundle written by the controller")
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := c.Client.Get(context.Background(), types.NamespacedName{Name: "rg-rollgate"}, &mwc); err != nil {
		t.Fatal(err)
	}
	mwc.Webhooks[0].ClientConfig.CABundle = bundle
	if err := c.Client.Update(context.Background(), &mwc); err != nil {
		t.Fatal(err)
	}

	helm(t, "upgrade", "rg", chartDir(), kc, "-n", ns, "--set", "replicaCount=3", "--set", "logLevel=debug", "--wait", "--timeout=2m")
	waitReplicas(t, c, ns, "rg-rollgate", 3)
	if err := c.Client.Get(context.Background(), types.NamespacedName{Name: "rg-rollgate"}, &mwc); err != nil {
		t.Fatal(err)
	}
	if got := string(mwc.Webhooks[0].ClientConfig.CABundle); got != string(bundle) {
		t.Fatalf("helm upgrade replaced the webhook CA bundle the controller wrote: %q", got)
	}
	var d appsv1.Deployment
	if err := c.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "rg-rollgate"}, &d); err != nil {
		t.Fatal(err)
	}
	if got, want := d.Labels["helm.sh/chart"], "rollgate-"+chartVersion(t); got != want {
		t.Fatalf("after the upgrade the Deployment is labelled helm.sh/chart=%s, want %s", got, want)
	}
	// Three replicas: the budget keeps one up during a drain, and the
	// disruption controller computes it over the three pods.
	waitBudget(t, c, ns, "rg-rollgate", 1, 2)

	helm(t, "uninstall", "rg", kc, "-n", ns, "--wait", "--timeout=2m")
	if err := c.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "rg-rollgate"}, &d); err == nil {
		t.Fatal("the controller Deployment is still there after helm uninstall")
	}
	var pdb policyv1.PodDisruptionBudget
	if err := c.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "rg-rollgate"}, &pdb); err == nil {
		t.Fatal("the PodDisruptionBudget is still there after helm uninstall")
	}
	// Helm keeps CRDs on uninstall (and so the users' Rollouts): documented.
	var crd apiextensionsv1.CustomResourceDefinition
	if err := c.Client.Get(context.Background(), types.NamespacedName{Name: "rollouts.rollgate.dev"}, &crd); err != nil {
		t.Fatalf("CRDs must survive helm uninstall: %v", err)
	}
}

// waitBudget waits until the PodDisruptionBudget of the controller asks
// for minAvailable pods and allows disruptions of the others.
func waitBudget(t *testing.T, c *kwok.Cluster, ns, name string, minAvailable, allowed int32) {
	t.Helper()
	var pdb policyv1.PodDisruptionBudget
	_, err := rig.Wait(context.Background(), 60*time.Second, "PodDisruptionBudget "+name, func(ctx context.Context) (bool, string, error) {
		if err := c.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &pdb); err != nil {
			return false, err.Error(), nil
		}
		return pdb.Spec.MinAvailable.IntValue() == int(minAvailable) && pdb.Status.DesiredHealthy == minAvailable &&
			pdb.Status.DisruptionsAllowed == allowed, "", nil
	})
	if err != nil {
		t.Fatalf("PodDisruptionBudget %s/%s: want minAvailable %d and %d disruptions allowed, got spec %+v status %+v: %v",
			ns, name, minAvailable, allowed, pdb.Spec, pdb.Status, err)
	}
}

func waitReplicas(t *testing.T, c *kwok.Cluster, ns, name string, n int32) {
	t.Helper()
	_, err := rig.Wait(context.Background(), 90*time.Second, "Deployment "+name+" ready", func(ctx context.Context) (bool, string, error) {
		var d appsv1.Deployment
		if err := c.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &d); err != nil {
			return false, err.Error(), nil
		}
		return d.Status.ReadyReplicas == n && d.Status.UpdatedReplicas == n,
			fmt.Sprintf("%d ready, %d updated", d.Status.ReadyReplicas, d.Status.UpdatedReplicas), nil
	})
	if err != nil {
		t.Fatalf("Deployment %s/%s did not reach %d ready replicas: %v", ns, name, n, err)
	}
}
